"""The C printer of kernel expressions: every index, stage, parity, guard and condition of a
:class:`~cypressc.backend.plan.KernelPlan` is an IR expression (:mod:`cypressc.ir.nodes`)
over the kernel's variables, and this module alone writes it as C++ (Cypress paper
§4.2.6, the code-generation half of CUDA lowering).

The kernel's variables are plain :class:`~cypressc.ir.nodes.IVar` names: the sizes (``M``,
``N``, …), the tile coordinates ``b0, b1, b2``, the main-loop step ``kb`` (``kn``: a load
issued ahead), the trip counts ``num_k``, ``num_k_1``, … (one per main loop), the consumer warpgroup ``cw``, the thread in the
warpgroup ``tw``, the pipeline counters ``stage, phase, istage, iphase, kbase``, ``tiles<d>``,
``threadIdx.x`` and the thread predicates ``leader`` and ``issuer``.  The lowering
substitutes every IR name by one of them; a processor index left over is a lowering bug
(:class:`TypeError`).

Printing rules (what the generated kernels have always looked like):

* a number prints as Python writes it (``128``, ``2.0``), a boolean as ``true``/``false``;
* index arithmetic (``+ - * / // %``; the IR's floor division ``//`` is C's ``/`` on the
  non-negative values indices take) is grouped: ``(a op b)`` with its operands grouped
  too, so an index reads without precedence reasoning (``((b0 * 128) + (cw * 64))``);
  ``cdiv``, ``min`` and ``max`` print as calls (``cdiv`` is the kernel's own helper);
* conditions print with C's precedence: a comparison's or a conjunction's operand that
  binds tighter loses its parentheses (``b1 == tiles1 - 1``, ``leader && cw == 0``), as do
  the condition and branches of ``c ? a : b``; an ``^`` of parities groups its terms like
  arithmetic, a comparison among them parenthesized (``(phase ^ (stage < 1) ^ 1)``);
* an IR guard (:class:`cypressc.ir.sync.Guard`, ``a >= b``) compares two grouped indices;
* ``top=True`` prints the expression where nothing binds tighter around it (a statement,
  an ``if`` condition, the launcher's test): its own outer parentheses are dropped.

The printer never simplifies: expressions arrive folded (:func:`cypressc.ir.nodes.ibin`),
so the text has no ``0 * x`` or ``+ 0`` terms unless the expression has them.
"""

from __future__ import annotations

import math

from cypressc.ir import nodes as N
from cypressc.ir.sync import Guard

__all__ = ["ARITH", "CALLS", "COMPARE", "cexpr", "is_true", "is_zero", "mentions"]

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
_SELECT = 3


def _prec(e) -> int:
    if isinstance(e, N.IBin):
        return 100 if e.op in CALLS else _PREC[e.op]
    if isinstance(e, Guard):
        return _PREC[">="]
    if isinstance(e, N.ISelect):
        return _SELECT
    return 100  # a number or a name


def _loose(e, within: int) -> str:
    """``e`` as an operand of an operator of strength ``within`` that writes its operands by
    precedence: bare when it binds tighter, grouped otherwise."""
    return cexpr(e, top=_prec(e) > within)


def _chain(e: N.IBin) -> list:
    """The terms of a left-nested chain of one associative operator (``^``, ``&&``)."""
    terms = []
    while isinstance(e, N.IBin) and isinstance(e.a, N.IBin) and e.a.op == e.op:
        terms.append(e.b)
        e = e.a
    return [e.a, e.b, *reversed(terms)]


def cexpr(e, top: bool = False) -> str:
    """Kernel expression ``e`` (an :data:`~cypressc.ir.nodes.IExpr` over the kernel's
    variables, or an IR :class:`~cypressc.ir.sync.Guard`) as C++ source (rules in the module
    docstring); ``top``: without the outer parentheses.  Raises :class:`TypeError` for a
    processor index or anything else that is not a kernel expression, :class:`ValueError`
    for an operator C has no spelling for here."""
    if isinstance(e, N.IConst):
        if isinstance(e.value, bool):
            return "true" if e.value else "false"
        return str(e.value)
    if isinstance(e, N.IVar):
        return e.name
    if isinstance(e, Guard):
        text = f"{cexpr(e.a)} >= {cexpr(e.b)}"
    elif isinstance(e, N.ISelect):
        text = f"{_loose(e.cond, _SELECT)} ? {_loose(e.a, _SELECT)} : {_loose(e.b, _SELECT)}"
    elif isinstance(e, N.IBin):
        op = e.op
        if op in CALLS:
            return f"{op}({cexpr(e.a)}, {cexpr(e.b)})"
        if op in ARITH:
            text = f"{cexpr(e.a)} {ARITH[op]} {cexpr(e.b)}"
        elif op in COMPARE:
            text = f"{_loose(e.a, _PREC[op])} {op} {_loose(e.b, _PREC[op])}"
        elif op == "&&":
            text = " && ".join(_loose(t, _PREC[op]) for t in _chain(e))
        elif op == "^":
            text = " ^ ".join(cexpr(t) for t in _chain(e))
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
    """Whether kernel expression (or guard) ``e`` reads variable ``name``."""
    if isinstance(e, N.IVar):
        return e.name == name
    if isinstance(e, (N.IBin, Guard)):
        return mentions(e.a, name) or mentions(e.b, name)
    if isinstance(e, N.ISelect):
        return mentions(e.cond, name) or mentions(e.a, name) or mentions(e.b, name)
    return False
