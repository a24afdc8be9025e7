"""A main-loop step's divisions by run-time values, computed once at the top of the step.

A loop over several tiles of a block -- the attention backward's query heads times query
blocks in one ``srange`` (tests/programs/attn_bwd_dkdv.cyp: step ``kb`` is head ``kb // n``,
block ``kb % n`` with ``n`` a per-tile count) -- has index expressions that divide the step
``kb`` by a value only known at run time.  Printed where each statement needs it, such a
division lands between a step's wgmma issues and their ``wait_group``, and ptxas then
serializes the wgmmas (C7513: "non wgmma instructions defining input registers of a wgmma
between start and end of the pipeline stage").  :func:`hoist_step_divisions` names each
distinct one (``kq0``, ``kq1``, …) and the emitter computes it before the step's first
statement, where nothing is in flight yet.  A division by a constant (a shift, or a multiply
by its inverse) stays where it is: printed code without a run-time divisor is unchanged.

Every name a hoisted expression reads is defined before the main loop (the tile's
coordinates, sizes, the step ``kb``, the role's pipeline state, which advances only after
the step's last statement), so its value at the top of the step is the value each
statement would compute; the loop body runs only for ``0 <= kb < num_k``, where the
statements themselves would divide.
"""

from __future__ import annotations

import dataclasses

from cypressc.backend.cexpr import KVar, mentions
from cypressc.ir import nodes as N

__all__ = ["hoist_step_divisions"]

_DIVIDE = ("/", "//", "%")


def hoist_step_divisions(stmts: list, step: str = "kb") -> tuple[list[tuple[str, N.IBin]], list]:
    """(names and values of the step's divisions by run-time values, ``stmts`` with each
    such division replaced by its name): a division (``/``, ``//``, ``%``) whose dividend
    reads the step variable ``step`` and whose divisor is not a constant.  ``stmts`` are
    plan statements (frozen dataclasses whose fields hold kernel expressions, tuples of
    them or nested dataclasses); they are not modified.  Names are ``kq0``, ``kq1``, … in
    the order the divisions first occur."""
    found: dict[N.IBin, KVar] = {}

    def expr(e):
        if not isinstance(e, N.IBin):
            return e
        a, b = expr(e.a), expr(e.b)
        if e.op in _DIVIDE and mentions(e.a, step) and not isinstance(b, N.IConst):
            key = N.IBin(e.op, a, b)
            if key not in found:
                found[key] = KVar(f"kq{len(found)}")
            return found[key]
        return e if (a is e.a and b is e.b) else N.IBin(e.op, a, b)

    def walk(x):
        if isinstance(x, N.IBin):
            return expr(x)
        if isinstance(x, (tuple, list)):
            out = [walk(i) for i in x]
            return x if all(i is j for i, j in zip(out, x)) else type(x)(out)
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            changes = {}
            for f in dataclasses.fields(x):
                if not f.init:
                    continue
                v = getattr(x, f.name)
                w = walk(v)
                if w is not v:
                    changes[f.name] = w
            return dataclasses.replace(x, **changes) if changes else x
        return x

    out = [walk(s) for s in stmts]
    return [(k.name, e) for e, k in found.items()], out
