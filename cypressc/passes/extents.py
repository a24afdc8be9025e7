"""Static index arithmetic checks of dependence analysis (E048, E049; issue #9).

Once the mapping's tunables are substituted, most extents of a program are numbers.  An
extent that divides by zero, that ``/`` cannot divide exactly (``/`` is exact integer
division, docs/language.md §3.4), that is not an integer, that leaves the 64-bit integers
the generated code computes in, or — for loop ranges, block extents and ``make_tensor``
extents — that is not positive is reported where it is written, naming the tunables that
made it so (a note at each one's YAML value).  Left alone, such values would surface
later and elsewhere: as "run-time extents" of an mma tile, or as mismatched partitions of a
NONE tensor (E044).
"""

from __future__ import annotations

from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir.origin import blame, origins_of, where
from cypressc.lang import syntax as S

__all__ = ["INT64_MAX", "source", "check_value", "check_division", "check_extent", "check_block"]

INT64_MAX = 2**63 - 1  # sizes and extents are int64_t in the generated code


def source(e: S.Expr) -> str:
    """The text of ``e`` as written (from its location), or a rendering of it."""
    loc = e.loc
    if loc.line > 0 and loc.text and 0 < loc.col < loc.end_col <= len(loc.text) + 1:
        return loc.text[loc.col - 1 : loc.end_col - 1]
    if isinstance(e, S.Const):
        return repr(e.value)
    if isinstance(e, S.Name):
        return e.id
    if isinstance(e, S.BinOp):
        return f"{source(e.lhs)} {e.op} {source(e.rhs)}"
    if isinstance(e, S.Call):
        return f"{e.fn}({', '.join(source(a) for a in e.args)})"
    if isinstance(e, S.Shape):
        return f"{e.tensor}.shape[{e.dim}]"
    return "this expression"


def _shown(e: S.Expr, value: object) -> str:
    """``WGS - 2 = 0``, or just ``0`` when that is what is written."""
    src = source(e)
    return src if src == str(value) else f"{src} = {value}"


def _error(code: str, msg: str, e: S.Expr, v: object, hint: str) -> CypressError:
    """At the expression, naming the tunables behind it (a note at each YAML value); a bare
    tunable name is the mapping's value itself, so that error goes to the YAML."""
    os_ = origins_of(v)
    if (
        isinstance(e, S.Name)
        and len(os_) == 1
        and os_[0].key == e.id
        and isinstance(v, N.IConst)
        and os_[0].value == v.value
    ):
        return blame(code, msg, e.loc, os_, breaks=f"'{e.id}' is used here", hint=hint)
    notes = tuple((f"{o.key} is set here, in {o.owner}", o.loc) for o in os_)
    return CypressError(code, msg + where(os_), e.loc, hint=hint, notes=notes)


def check_value(e: S.Expr, v: N.IExpr) -> None:
    """E048 when index expression ``e`` evaluated to a non-integer or out-of-range number."""
    if not isinstance(v, N.IConst):
        return
    x = v.value
    if isinstance(x, float):
        raise _error(
            "E048",
            f"{_shown(e, x)} is not an integer",
            e,
            v,
            hint="extents and indices are integers; `/` divides exactly, `//` rounds down",
        )
    if abs(x) > INT64_MAX:
        raise _error(
            "E048",
            f"{_shown(e, x)} overflows the signed 64-bit range that "
            "extents and indices are computed in",
            e,
            v,
            hint=f"extents and indices are at most 2**63 - 1 = {INT64_MAX}",
        )


def check_division(e: S.Expr, op: str, a: N.IExpr, b: N.IExpr) -> None:
    """E048 when ``e`` (``a op b``) divides by a static zero or ``/`` is not exact."""
    if op not in ("/", "//", "%", "cdiv") or not isinstance(b, N.IConst):
        return
    rhs = e.rhs if isinstance(e, S.BinOp) else e.args[1]  # type: ignore[union-attr]
    both = N.IBin(op, a, b)
    if b.value == 0:
        shown = source(rhs)
        what = "" if shown == "0" else f": {shown} is 0"
        raise _error(
            "E048",
            f"{source(e)} divides by zero{what}",
            e,
            b,
            hint="a divisor in index arithmetic must not be 0",
        )
    if (
        op == "/"
        and isinstance(a, N.IConst)
        and isinstance(a.value, int)
        and isinstance(b.value, int)
        and a.value % b.value
    ):
        src = source(e)
        shown = src if src == f"{a.value} / {b.value}" else f"{src} is {a.value} / {b.value}, which"
        raise _error(
            "E048",
            f"{shown} is not an integer",
            e,
            both,
            hint="`/` is exact integer division: pick values that divide evenly, or write "
            "cdiv(a, b) or a // b",
        )


def check_extent(e: S.Expr, v: N.IExpr, what: str) -> None:
    """E049 when a loop range, block extent or ``make_tensor`` extent is a number <= 0."""
    if isinstance(v, N.IConst) and isinstance(v.value, int) and v.value <= 0:
        loop = what.endswith("range extent")
        raise _error(
            "E049",
            f"the {what} {_shown(e, v.value)} is not positive",
            e,
            v,
            hint="a loop runs at least one iteration"
            if loop
            else "a tile or tensor has at least one element along each dimension",
        )


def check_block(e: S.Expr, v: N.IExpr, extent: N.IExpr, tensor: str, dim: int) -> None:
    """E049 when a static block extent exceeds the static extent of the tile it partitions
    (its one piece would reach past the tile: ``M * 99999999999`` rows of a 128-row tile)."""
    if (
        isinstance(v, N.IConst)
        and isinstance(extent, N.IConst)
        and isinstance(v.value, int)
        and isinstance(extent.value, int)
        and v.value > extent.value
    ):
        raise _error(
            "E049",
            f"the block extent {_shown(e, v.value)} exceeds dimension {dim} of "
            f"'{tensor}', which is {extent.value}",
            e,
            (v, extent),
            hint="a block extent is at most the extent of the tensor it partitions",
        )
