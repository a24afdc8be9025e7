"""The C printer of kernel expressions: every index, stage, parity, guard and condition of a
:class:`~cypressc.backend.plan.KernelPlan` is an IR expression (:mod:`cypressc.ir.nodes`)
over the kernel's variables, and this module alone writes it as C++ (Cypress paper
§4.2.6, the code-generation half of CUDA lowering).

Two kinds of names occur.  An :class:`~cypressc.ir.nodes.IVar` is a program scalar: a size
(``M``, ``N``, …) or a float argument; the emitter may spell it otherwise where it collides
with a name of the kernel (``var``, :mod:`cypressc.backend.names`).  A :class:`KVar` is a
variable the kernel itself declares: the tile coordinates ``b0, b1, b2``, the main-loop step
``kb`` (``kn``: a load issued ahead), the trip counts ``num_k``, ``num_k_1``, … (one per
main loop), the consumer warpgroup ``cw``, the thread in the warpgroup ``tw``, the pipeline
counters ``kbase`` and ``tphase``, ``tiles<d>``, ``threadIdx.x`` and the thread predicates
``leader``, ``issuer`` and ``more``.  A :class:`PipeAt` is a field of a running pipeline
state (``cypress::PipelineState``, :mod:`cypressc.backend.sync_lower`).  The lowering
substitutes every IR name by one of these; a processor index left over is a lowering bug
(:class:`TypeError`).

Printing rules (what the generated kernels have always looked like):

* a number prints as Python writes it (``128``, ``2.0``), a boolean as ``true``/``false``;
* index arithmetic (``+ - * / // %``; the IR's floor division ``//`` is C's ``/`` on the
  non-negative values indices take) is grouped: ``(a op b)`` with its operands grouped
  too, so an index reads without precedence reasoning (``((b0 * 128) + (cw * 64))``);
  ``cdiv``, ``min`` and ``max`` print as calls (``cdiv`` is the kernel's own helper);
* conditions print with C's precedence: a comparison's or a conjunction's operand that
  binds tighter loses its parentheses (``b1 == tiles1 - 1``, ``leader && cw == 0``); an
  ``^`` of parities groups its terms like arithmetic, a comparison among them
  parenthesized (``(tphase ^ (kb < 1) ^ 1)``);
* a pipeline state's field prints as C++ member access: ``pipe.index``, and stepped,
  ``(pipe + 1).phase``;
* an IR guard (:class:`cypressc.ir.sync.Guard`, ``a >= b``) compares two grouped indices;
* ``top=True`` prints the expression where nothing binds tighter around it (a statement,
  an ``if`` condition, the launcher's test): its own outer parentheses are dropped.

The printer never simplifies: expressions arrive folded (:func:`cypressc.ir.nodes.ibin`),
so the text has no ``0 * x`` or ``+ 0`` terms unless the expression has them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from cypressc.ir import nodes as N
from cypressc.ir.sync import Guard

__all__ = [
    "ARITH",
    "CALLS",
    "COMPARE",
    "KVar",
    "PipeAt",
    "cexpr",
    "is_true",
    "is_zero",
    "mentions",
]


@dataclass(frozen=True, slots=True)
class KVar:
    """A variable the generated kernel declares or a CUDA built-in it reads (``kb``, ``cw``,
    ``b0``, ``threadIdx.x``, …: the module docstring lists them).  In a kernel expression an
    :class:`~cypressc.ir.nodes.IVar` is always a program scalar instead, so a size that a
    program names ``kb`` is never the main loop's ``kb``."""

    name: str


PIPE_FIELDS = ("index", "phase")


@dataclass(frozen=True, slots=True)
class PipeAt:
    """Field ``what`` of the running pipeline state ``pipe`` (a ``cypress::PipelineState``
    the kernel declares and advances once per main-loop step) moved ``ahead`` steps on
    (back, when negative; ``-depth < ahead < depth``): ``"index"`` is a stage of the ring,
    ``"phase"`` the parity its mbarriers complete on that pass (CUTLASS's
    ``PipelineState::index()`` / ``phase()``).  Raises ValueError for another field."""

    pipe: str
    what: str
    ahead: int = 0

    def __post_init__(self) -> None:
        if self.what not in PIPE_FIELDS:
            raise ValueError(f"a pipeline state has fields {PIPE_FIELDS}, not {self.what!r}")


ARITH = {"+": "+", "-": "-", "*": "*", "/": "/", "//": "/", "%": "%"}
CALLS = ("cdiv", "min", "max")
COMPARE = ("==", "!=", "<", "<=", ">", ">=")

# C's binding strength (higher binds tighter), for operands printed without parentheses
_PREC = {
    "*": 13,
    "/": 13,
    "//": 13,
    "%": 13,
    "+": 12,
    "-": 12,
    "<": 10,
    "<=": 10,
    ">": 10,
    ">=": 10,
    "==": 9,
    "!=": 9,
    "^": 7,
    "&&": 5,
}


def _prec(e) -> int:
    if isinstance(e, N.IBin):
        return 100 if e.op in CALLS else _PREC[e.op]
    if isinstance(e, Guard):
        return _PREC[">="]
    return 100  # a number, a name or a member access


def _loose(e, within: int, var) -> str:
    """``e`` as an operand of an operator of strength ``within`` that writes its operands by
    precedence: bare when it binds tighter, grouped otherwise."""
    return cexpr(e, top=_prec(e) > within, var=var)


def _chain(e: N.IBin) -> list:
    """The terms of a left-nested chain of one associative operator (``^``, ``&&``)."""
    terms = []
    while isinstance(e, N.IBin) and isinstance(e.a, N.IBin) and e.a.op == e.op:
        terms.append(e.b)
        e = e.a
    return [e.a, e.b, *reversed(terms)]


def cexpr(e, top: bool = False, var: Callable[[str], str] | None = None) -> str:
    """Kernel expression ``e`` (an :data:`~cypressc.ir.nodes.IExpr` over program scalars
    and the kernel's :class:`KVar` and :class:`PipeAt` variables, or an IR
    :class:`~cypressc.ir.sync.Guard`) as C++ source (rules in the module docstring); ``top``:
    without the outer parentheses; ``var``: the C spelling of a program scalar's name (default:
    the name).  Raises :class:`TypeError` for a processor index or anything else that is
    not a kernel expression, :class:`ValueError` for an operator C has no spelling for here."""
    if isinstance(e, N.IConst):
        if isinstance(e.value, bool):
            return "true" if e.value else "false"
        return str(e.value)
    if isinstance(e, N.IVar):
        return e.name if var is None else var(e.name)
    if isinstance(e, KVar):
        return e.name
    if isinstance(e, PipeAt):
        if not e.ahead:
            return f"{e.pipe}.{e.what}"
        return f"({e.pipe} {'+' if e.ahead > 0 else '-'} {abs(e.ahead)}).{e.what}"
    if isinstance(e, Guard):
        text = f"{cexpr(e.a, var=var)} >= {cexpr(e.b, var=var)}"
    elif isinstance(e, N.IBin):
        op = e.op
        if op in CALLS:
            args = [cexpr(x, var=var) for x in (e.a, e.b)]
            if op != "cdiv" and _wide(e.a) != _wide(e.b):
                # min(int, long long) matches several CUDA overloads: widen the int operand
                n = 0 if _wide(e.b) else 1
                args[n] = f"static_cast<long long>({cexpr((e.a, e.b)[n], top=True, var=var)})"
            return f"{op}({args[0]}, {args[1]})"
        if op in ARITH:
            text = f"{cexpr(e.a, var=var)} {ARITH[op]} {cexpr(e.b, var=var)}"
        elif op in COMPARE:
            text = f"{_loose(e.a, _PREC[op], var)} {op} {_loose(e.b, _PREC[op], var)}"
        elif op == "&&":
            text = " && ".join(_loose(t, _PREC[op], var) for t in _chain(e))
        elif op == "^":
            text = " ^ ".join(cexpr(t, var=var) for t in _chain(e))
        else:
            raise ValueError(f"no C operator for {op!r}")
    elif isinstance(e, N.IProc):
        raise TypeError(
            f"the {e.proc.lower()} index in a kernel expression (the lowering substitutes "
            "processor indices by kernel variables)"
        )
    else:
        raise TypeError(f"not a kernel expression: {e!r}")
    return text if top else f"({text})"


def _wide(e) -> bool:
    """Whether ``e`` prints as a ``long long`` C expression: it has a ``cdiv`` (the kernel's
    helper returns ``long long``) outside a ``min``/``max`` of two ``int`` operands."""
    if not isinstance(e, N.IBin) or e.op not in ARITH and e.op not in CALLS:
        return False
    return e.op == "cdiv" or _wide(e.a) or _wide(e.b)


def is_zero(e, *, exact: bool = True) -> bool:
    """Whether ``e`` is the index ``0``: a stage or column the printed kernel leaves out of
    an address.  ``exact=False`` also takes the float ``0.0`` (not ``-0.0``): a fill value
    a wgmma's scale-d can replace."""
    if not isinstance(e, N.IConst) or isinstance(e.value, bool):
        return False
    if exact:
        return isinstance(e.value, int) and e.value == 0
    return e.value == 0 and math.copysign(1.0, e.value) > 0


def is_true(e) -> bool:
    """Whether condition ``e`` is the constant ``true`` (every thread: no ``if`` to print)."""
    return isinstance(e, N.IConst) and e.value is True


def mentions(e, name: str) -> bool:
    """Whether kernel expression (or guard) ``e`` reads the kernel's variable ``name`` (a
    :class:`KVar`, or the pipeline state of a :class:`PipeAt`; never a program scalar)."""
    if isinstance(e, KVar):
        return e.name == name
    if isinstance(e, PipeAt):
        return e.pipe == name
    if isinstance(e, (N.IBin, Guard)):
        return mentions(e.a, name) or mentions(e.b, name)
    return False
