"""Rewrites of a role's typed kernel statements that the instruction set makes exact.

**Zero fill into a wgmma** (scale-d = 0).  ``fill(C, 0)`` followed, with no other
statement touching ``C`` in between, by a wgmma accumulating into ``C`` computes
``C = A @ B``, which is what ``wgmma.mma_async`` does with its scale-d predicate off on
the first k16 step: the fill and its edge to the wgmma (a read of the zeros) disappear
together, nothing else changes.  It matters inside a main loop: writing an accumulator's
registers there while another wgmma group is still in flight makes ptxas inject a
``warpgroup.wait`` (C7517) that serializes the two products (FlashAttention's S = Q·Kᵀ of
step k+1 behind O += P·V of step k); CUTLASS and FlashAttention-3 clear the S accumulator
the same way.

**Dead row sums** (a HOST loop's lastprivate result).  When a HOST loop around the blocks
becomes a grid dimension, a 1-D result every iteration writes alike is stored only by the
blocks of the last iteration (``when``: gemm_reduction's ``y``, written by every column
tile).  A SIMT row sum whose vector nothing but such stores reads computes a value the other
blocks throw away, so it runs under the same ``when`` (a condition uniform over the block:
no divergence); its fills, stores and every synchronization stay as they are.

**Deferred quad sums** (FlashAttention's row sum ``l``).  ``warpgroup_row_sum(l, x)`` adds a
row's sum to ``l``: each thread sums its own elements of the row, and two xor-shuffles combine
the 4 lanes of its quad.  When ``l`` starts at zero and, until it is first read, is only added
to that way and scaled by quad-uniform per-row factors (``scale_rows(l, alpha)``), both of
which distribute over the quad's lanes, each lane can keep its own part and the shuffles run
once, where ``l`` is first read (FlashAttention-3 reduces its row sums at the end too): two
shuffles and adds per row per main-loop step fewer, off the softmax's dependent chains.  The
sum's association changes (as any reduction order does); the value does not.
"""

from __future__ import annotations

from dataclasses import replace

from cypressc.backend import plan as P
from cypressc.backend.cexpr import cexpr, is_true, is_zero
from cypressc.ir import nodes as N

__all__ = ["fold_zero_fills", "guard_dead_row_sums", "defer_row_sums"]

_FIELDS = ("acc", "src", "dst", "other", "a_frag")


def _touches(st, name: str) -> bool:
    """Whether a compute statement reads or writes register fragment ``name`` (sync
    statements only order the compiler's accesses, they do not touch values)."""
    return not isinstance(st, P.Sync) and any(getattr(st, f, None) == name for f in _FIELDS)


def fold_zero_fills(stmts: list) -> list:
    """``stmts`` with every ``Fill(X, 0)`` whose next statement touching ``X`` is an ``Mma``
    into ``X`` removed and that ``Mma`` marked with the fill's event (``zero_fill``).  Pure: returns a new list."""
    out = list(stmts)
    i = 0
    while i < len(out):
        st = out[i]
        if isinstance(st, P.Fill) and is_zero(st.value, exact=False):
            nxt = next((j for j in range(i + 1, len(out)) if _touches(out[j], st.acc)), None)
            if (
                nxt is not None
                and isinstance(out[nxt], P.Mma)
                and out[nxt].acc == st.acc
                and out[nxt].a_frag != st.acc
            ):
                out[nxt] = replace(out[nxt], zero_fill=st.event)
                del out[i]
                continue
        i += 1
    return out


def _lists(plan: P.KernelPlan) -> list[list]:
    """Every statement list of ``plan`` (the lists themselves, to edit in place)."""
    return [
        plan.prologue,
        plan.simt_body,
        plan.epilogue,
        plan.issue_ahead,
        plan.entry,
        plan.exit,
        *plan.consumer.sections(),
        *plan.producer.sections(),
    ]


def _mentions(x, name: str) -> bool:
    """Whether ``name`` is the value of any string field of statement ``x`` (at any depth:
    an external call's operands, a sync op's edges)."""
    if isinstance(x, str):
        return x == name
    if isinstance(x, (tuple, list)):
        return any(_mentions(y, name) for y in x)
    if hasattr(x, "__dataclass_fields__"):
        return any(_mentions(getattr(x, f), name) for f in x.__dataclass_fields__)
    return False


def guard_dead_row_sums(plan: P.KernelPlan) -> None:
    """Run each ``RowSum`` whose vector only ``FillVector``, ``RowSum`` and ``StoreVector``
    statements use, every store under the same ``when``, under that ``when`` too (in place,
    in every list that holds it)."""
    stmts = [st for lst in _lists(plan) for st in lst]
    for rs in {id(st): st for st in stmts if isinstance(st, P.RowSum)}.values():
        users = [st for st in stmts if _mentions(st, rs.vec)]
        stores = [st for st in users if isinstance(st, P.StoreVector)]
        if not stores or any(
            not isinstance(st, (P.RowSum, P.FillVector, P.StoreVector)) for st in users
        ):
            continue
        conds = {cexpr(st.when) if st.when is not None else None for st in stores}
        if len(conds) != 1 or None in conds:
            continue
        when = stores[0].when
        active = when if is_true(rs.active) else N.IBin("&&", rs.active, when)
        new = replace(rs, active=active)
        for lst in _lists(plan):
            lst[:] = [new if st is rs else st for st in lst]


def _row_ops_of(st, v: str) -> tuple[bool, bool]:
    """(reads, writes) per-row vector ``v``: a ``RowOp`` writes its first operand (a ``copy``
    its second) and reads the others; except for ``fill`` and ``copy`` its first counts as read
    too (true of the accumulating leaves, conservative for the rest)."""
    names = [n for k, n in st.args if k == "row"] if isinstance(st, P.RowOp) else []
    if v not in names:
        return False, False
    dst = st.args[1] if st.fn == "copy" else st.args[0]
    writes = dst == ("row", v)
    reads = any(a == ("row", v) for a in st.args if a != dst or st.fn not in ("fill", "copy"))
    return reads, writes


# row leaves whose result is the same on the 4 lanes of a quad when their per-row operands are
# (a row sum is too, unless deferred: the candidates are excluded by name)
_UNIFORM = frozenset(
    {"fill", "copy", "warpgroup_row_max", "exp2_diff", "scale_rows", "div_rows", "row_log_sum_exp"}
)


def _quad_uniform(flat: list, v: str, sums: set[str]) -> bool:
    """Whether every write of per-row vector ``v`` leaves the 4 lanes of a quad equal: ``v`` is
    no row sum that may be deferred, and each write is a row leaf of ``_UNIFORM`` (a copy not
    of such a sum)."""
    if v in sums:
        return False
    for st, _ in flat:
        if not _mentions(st, v):
            continue
        if not isinstance(st, P.RowOp):
            return False
        _, writes = _row_ops_of(st, v)
        if writes and (st.fn not in _UNIFORM or st.fn == "copy" and st.args[0][1] in sums):
            return False
    return True


def defer_row_sums(plan: P.KernelPlan) -> None:
    """Keep each eligible row sum as per-lane parts (``RowOp.partial``) and sum them across the
    quad once, right before the statement that first reads the vector (``RowOp.reduce``).
    Eligible: the vector's first statement is a zero ``fill``; up to its first read only
    ``warpgroup_row_sum`` into it and ``scale_rows`` of it by another per-row vector whose
    lanes are equal across the quad (every write of it a row leaf, none a possibly deferred
    sum) touch it; that read is a row leaf outside every main loop (so it runs once per tile),
    and nothing writes the vector after it.  Any other use (a store of the vector, a read in a
    main loop, a write after the read) keeps the per-step reduction.  A finite scale keeps
    each lane's part finite; an infinite one would turn a lane's zero part into NaN where the
    reduced sum was infinite (FlashAttention's rescale factor lies in [0, 1]).
    The consumers' sections give the program order; the rewritten statements replace the old
    ones in every list of the plan (a statement may sit in two).  In place."""
    code = plan.consumer
    secs = code.sections()
    in_loop = {id(sec) for sec in code.loops}
    flat = [(st, id(sec) in in_loop) for sec in secs for st in sec if not isinstance(st, P.Sync)]
    if any(isinstance(st, P.RowOp) and (st.partial or st.reduce) for st, _ in flat):
        return  # already rewritten: a second pass would reduce the parts twice
    sums = {
        st.args[0][1] for st, _ in flat if isinstance(st, P.RowOp) and st.fn == "warpgroup_row_sum"
    }
    new: dict[int, P.RowOp] = {}
    for v in sorted(sums):
        users = [(st, loop) for st, loop in flat if _mentions(st, v)]
        first, *rest = users
        if not (
            isinstance(first[0], P.RowOp)
            and first[0].fn == "fill"
            and is_zero(first[0].value, exact=False)
        ):
            continue
        adds, read = [], None
        for st, loop in rest:
            reads, writes = _row_ops_of(st, v) if isinstance(st, P.RowOp) else (True, True)
            if read is None:
                if (
                    isinstance(st, P.RowOp)
                    and st.fn == "warpgroup_row_sum"
                    and st.args[0] == ("row", v)
                ):
                    adds.append(st)
                elif (
                    isinstance(st, P.RowOp)
                    and st.fn == "scale_rows"
                    and st.args[0] == ("row", v)
                    and st.args[1][0] == "row"
                    and _quad_uniform(flat, st.args[1][1], sums)
                ):
                    continue
                elif isinstance(st, P.RowOp) and reads and not writes and not loop:
                    read = st
                else:
                    break
            elif writes:
                break
        else:
            if read is None or not adds:
                continue
            for st in adds:  # a sum into v is no other vector's statement
                new[id(st)] = replace(st, partial=True)
            new[id(read)] = replace(
                new.get(id(read), read), reduce=new.get(id(read), read).reduce + (v,)
            )
    if new:
        for lst in _lists(plan):
            lst[:] = [new.get(id(st), st) for st in lst]
