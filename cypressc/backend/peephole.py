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

The rewrites match the leaves' declared kinds (:class:`~cypressc.lang.intrinsics.IntrinsicKind`:
a row sum, a row scale, a fill) and operand rules, never their names, and a statement's uses
of a register value are the fields that hold register values (:func:`register_names`).
"""

from __future__ import annotations

from dataclasses import replace

from cypressc.backend import plan as P
from cypressc.backend.cexpr import is_true, is_zero
from cypressc.ir import nodes as N
from cypressc.lang.intrinsics import IntrinsicKind as K
from cypressc.lang.kinds import OperandKind

__all__ = ["fold_zero_fills", "guard_dead_row_sums", "defer_row_sums", "register_names"]


def register_names(st) -> frozenset[str]:
    """The register fragments and vectors plan statement ``st`` reads or writes, by the fields
    that hold them (a ``Sync``: those whose accesses it orders, its ``accs`` and its edges'
    tensors).  Names elsewhere in a statement (buffers, tensors, maps, events, the variables
    of its expressions) are no use of a register value, whatever they spell."""
    if isinstance(st, P.RowOp):
        return frozenset(n for _, n in st.args) | frozenset(st.reduce)
    if isinstance(st, P.Sync):
        return frozenset(st.accs) | frozenset(e.tensor for e in getattr(st.op, "edges", ()))
    if isinstance(st, P.External):
        return frozenset({st.acc} | {a.name for a in st.args if a.kind == "frag"})
    fields = _REGISTER_FIELDS.get(type(st), ())
    return frozenset(v for f in fields if (v := getattr(st, f)) is not None)


# the fields of each plan statement that name a register fragment or vector
_REGISTER_FIELDS: dict[type, tuple[str, ...]] = {
    P.Convert: ("src", "dst"),
    P.Mma: ("acc", "a_frag"),
    P.Fill: ("acc",),
    P.Add: ("acc", "other"),
    P.Scale: ("acc",),
    P.StoreDirect: ("acc",),
    P.LoadDirect: ("acc",),
    P.StageWrite: ("acc",),
    P.TmaStore: ("acc",),
    P.FillVector: ("vec",),
    P.RowSum: ("vec",),
    P.StoreVector: ("vec",),
    P.RowStore: ("vec",),
}


def _touches(st, name: str) -> bool:
    """Whether a compute statement reads or writes register fragment ``name`` (sync
    statements only order the compiler's accesses, they do not touch values)."""
    return not isinstance(st, P.Sync) and name in register_names(st)


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


def guard_dead_row_sums(plan: P.KernelPlan) -> None:
    """Run each ``RowSum`` whose vector only ``FillVector``, ``RowSum`` and ``StoreVector``
    statements use, every store under the same ``when``, under that ``when`` too (in place,
    in every list that holds it)."""
    stmts = [st for lst in _lists(plan) for st in lst]
    for rs in {id(st): st for st in stmts if isinstance(st, P.RowSum)}.values():
        users = [st for st in stmts if rs.vec in register_names(st)]
        stores = [st for st in users if isinstance(st, P.StoreVector)]
        if not stores or any(
            not isinstance(st, (P.RowSum, P.FillVector, P.StoreVector)) for st in users
        ):
            continue
        conds = {st.when for st in stores}  # IR expressions: equal when equal in structure
        if len(conds) != 1 or None in conds:
            continue
        when = stores[0].when
        active = when if is_true(rs.active) else N.IBin("&&", rs.active, when)
        new = replace(rs, active=active)
        for lst in _lists(plan):
            lst[:] = [new if st is rs else st for st in lst]


def _row_ops_of(st, v: str) -> tuple[bool, bool]:
    """(reads, writes) per-row vector ``v``, by the leaf's operand rules (``RowOp.args`` are
    its operands that are no scalar, in order)."""
    if not isinstance(st, P.RowOp):
        return False, False
    rules = [r for r in st.leaf.operands if r.kind != OperandKind.SCALAR]
    mine = [r for r, a in zip(rules, st.args) if a == ("row", v)]
    return any(r.reads for r in mine), any(r.writes for r in mine)


def _quad_uniform(flat: list, v: str, sums: set[str]) -> bool:
    """Whether every write of per-row vector ``v`` leaves the 4 lanes of a quad equal: ``v`` is
    no row sum that may be deferred, and each write is by a row leaf whose kind is
    ``quad_uniform`` reading no such sum."""
    if v in sums:
        return False
    for st, _ in flat:
        if v not in register_names(st):
            continue
        if not isinstance(st, P.RowOp):
            return False
        _, writes = _row_ops_of(st, v)
        reads_sum = any(_row_ops_of(st, u)[0] for u in sums)
        if writes and (not st.leaf.kind.quad_uniform or reads_sum):
            return False
    return True


def defer_row_sums(plan: P.KernelPlan) -> None:
    """Keep each eligible row sum as per-lane parts (``RowOp.partial``) and sum them across the
    quad once, right before the statement that first reads the vector (``RowOp.reduce``).
    The candidates are the vectors a ``ROW_SUM`` row leaf adds into (:class:`IntrinsicKind`:
    the leaves match by kind, not by name).  Eligible: the vector's first statement is a zero
    ``FILL``; up to its first read only ``ROW_SUM`` leaves into it and ``ROW_SCALE`` leaves of
    it by another per-row vector whose lanes are equal across the quad (every write of it a
    row leaf of a ``quad_uniform`` kind reading no possibly deferred sum) touch it; that read is a row leaf outside every main loop (so it runs once per tile),
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
        st.args[0][1] for st, _ in flat if isinstance(st, P.RowOp) and st.leaf.kind is K.ROW_SUM
    }
    new: dict[int, P.RowOp] = {}
    for v in sorted(sums):
        users = [(st, loop) for st, loop in flat if v in register_names(st)]
        first, *rest = users
        if not (
            isinstance(first[0], P.RowOp)
            and first[0].leaf.kind is K.FILL
            and is_zero(first[0].value, exact=False)
        ):
            continue
        adds, read = [], None
        for st, loop in rest:
            reads, writes = _row_ops_of(st, v) if isinstance(st, P.RowOp) else (True, True)
            if read is None:
                if (
                    isinstance(st, P.RowOp)
                    and st.leaf.kind is K.ROW_SUM
                    and st.args[0] == ("row", v)
                ):
                    adds.append(st)
                elif (
                    isinstance(st, P.RowOp)
                    and st.leaf.kind is K.ROW_SCALE
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
