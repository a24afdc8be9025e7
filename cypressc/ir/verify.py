"""The IR verifier, run after every pass (DESIGN §4): names defined before use, event
references indexed with one entry per array dimension, every view's tensor and
partition in scope, leaf calls with the registered arity, a reduction copy (``copy.add``)
between views of one shape into f32; once ``sync-insertion`` has
run (``Module.synchronized``), the synchronization checks of :mod:`cypressc.ir.sync_verify`."""

from __future__ import annotations

from cypressc.diagnostics import VerifyError
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.kinds import BarrierKind
from cypressc.ir.analysis import Symbols, block_dims, element_origin
from cypressc.ir.subst import walk_ops
from cypressc.ir.target import cluster_shape
from cypressc.ir.sync import SYNC_OPS
from cypressc.ir.sync_verify import verify_sync
from cypressc.lang.intrinsics import leaf_of

__all__ = ["verify", "VerifyError"]


def _ev_rank(op) -> int:
    return len(op.dims) + (1 if isinstance(op, N.PFor) else 0)


def verify(m: N.Module) -> None:
    """Raise :class:`VerifyError` if ``m`` is malformed."""
    scope: list[dict[str, object]] = [{a.name: a for a in m.params}]
    names = set(m.scalars) | set(m.floats)

    def lookup(name: str):
        for s in reversed(scope):
            if name in s:
                return s[name]
        return None

    def check_view(v: N.View, where: str) -> None:
        if isinstance(v, N.TRef):
            if not isinstance(lookup(v.name), N.Alloc):
                raise VerifyError(f"{where}: tensor %{v.name} is not defined here")
        else:
            p = lookup(v.partition)
            if not isinstance(p, N.Partition):
                raise VerifyError(f"{where}: partition %{v.partition} is not defined here")

    def check_refs(refs, where: str) -> None:
        for r in refs:
            op = lookup(r.name)
            if op is None or not isinstance(op, N.AsyncOp):
                raise VerifyError(f"{where}: event %{r.name} is not defined before its use")
            if r.idx and len(r.idx) != _ev_rank(op):
                raise VerifyError(
                    f"{where}: event %{r.name} has {_ev_rank(op)} dimension(s), "
                    f"indexed with {len(r.idx)}"
                )

    def alloc_of(v: N.View) -> N.Alloc:
        while isinstance(v, N.Piece):
            v = lookup(v.partition).base  # type: ignore[union-attr]
        return lookup(v.name)  # type: ignore[return-value]

    def shape_of(v: N.View) -> tuple:
        if isinstance(v, N.TRef):
            return lookup(v.name).shape  # type: ignore[union-attr]
        return lookup(v.partition).piece_shape  # type: ignore[union-attr]

    def check_reduce(op: N.Copy, where: str) -> None:
        # a reduction adds elementwise: both sides hold the same elements; f32 for now
        # (an atomic add of 16-bit values, or a bf16 TMA reduce-add, comes later)
        if op.reduce != "add":
            raise VerifyError(f"{where}: unknown reduction copy.{op.reduce}")
        if shape_of(op.src) != shape_of(op.dst):
            raise VerifyError(f"{where}: copy.add between views of different shapes")
        if alloc_of(op.dst).dtype != "f32":
            raise VerifyError(f"{where}: copy.add into {alloc_of(op.dst).dtype} (only f32 for now)")

    def block(b: N.Block) -> None:
        scope.append({})
        for op in b.ops:
            if isinstance(op, SYNC_OPS):  # checked by verify_sync below
                continue
            where = getattr(op, "ev", None) or getattr(op, "name", "?")
            if isinstance(op, N.Alloc) and op.layout is not None:
                check_view(op.layout, where)
            if isinstance(op, N.Partition):
                check_view(op.base, where)
            if isinstance(op, N.Copy):
                check_view(op.src, where)
                check_view(op.dst, where)
                check_refs(op.pre, where)
                if op.reduce is not None:
                    check_reduce(op, where)
                elif op.ordered:
                    raise VerifyError(f"{where}: an ordered copy that is not a reduction")
            if isinstance(op, N.Call):
                try:
                    arity = len(leaf_of(op).operands)
                except KeyError:
                    arity = -1
                if len(op.args) != arity:
                    raise VerifyError(f"{where}: bad leaf call {op.fn}")
                for a in op.args:
                    if isinstance(a, (N.TRef, N.Piece)):
                        check_view(a, where)
                check_refs(op.pre, where)
            if isinstance(op, (N.For, N.PFor)):
                check_refs(op.pre, where)
                scope.append({op.var: op})
                names.add(op.var)
                block(op.body)
                scope.pop()
            name = getattr(op, "name", None) or getattr(op, "ev")
            if name in scope[-1]:
                raise VerifyError(f"%{name} is defined twice")
            scope[-1][name] = op
        check_refs(b.yields, "yield")
        scope.pop()

    block(m.body)
    _verify_multicast(m)
    if m.synchronized:
        verify_sync(m)


def _verify_multicast(m: N.Module) -> None:
    """A ``multicast`` copy (:mod:`cypressc.passes.cluster_multicast`) reads the same tile in
    the blocks it is shared by: its tile names none of the grid dimensions it is multicast
    along (through the module's Lets), the target's cluster spans them, it completes on an
    mbarrier, the loops around it run the same steps in every block, and every release of
    its stages is ``arrive.cluster``; an ``arrive.cluster`` needs a multicast copy.
    VerifyError otherwise: hand-written IR could claim a tile shared that is not (the other
    block would compute with this block's tile) or release a shared stage in one block only
    (the issuing block would overwrite it while the other still reads it)."""
    copies = [o for o in walk_ops(m.body) if isinstance(o, N.Copy) and o.multicast]
    cluster_arrives = [o for o in walk_ops(m.body) if isinstance(o, S.Arrive) and o.cluster]
    if not copies:
        if cluster_arrives:
            raise VerifyError(
                f"arrive.cluster on %{cluster_arrives[0].bar} without a multicast copy"
            )
        return
    shape = cluster_shape(m)
    # a stage a multicast copy fills is released in every block: each arrive on its empty
    # barrier is arrive.cluster (a local one would let the issuing block overwrite it early)
    shared = {o.ev for o in copies}
    empties = {
        o.name
        for o in walk_ops(m.body)
        if isinstance(o, S.MBarrier) and o.kind == BarrierKind.EMPTY and shared & set(o.channel)
    }
    for o in walk_ops(m.body):
        if isinstance(o, S.Arrive) and o.bar in empties and not o.cluster:
            raise VerifyError(
                f"a local arrive on %{o.bar}, which releases stages a multicast copy fills"
            )
    lets = {o.name: o.value for o in walk_ops(m.body) if isinstance(o, N.Let)}
    _same_steps(m, shared, lets)
    sym = Symbols(m)
    for o in copies:
        if o.bar is None:
            raise VerifyError(f"{o.ev}: a multicast copy that completes on no mbarrier")
        if shape is None or any(d >= len(shape) or shape[d] < 2 for d in o.multicast):
            raise VerifyError(f"{o.ev}: multicast along a grid dimension the cluster does not span")
        _, org, _, _ = element_origin(sym, o.src)
        along = set(o.multicast) & set().union(*(block_dims(x, lets) for x in org))
        if along:
            raise VerifyError(
                f"{o.ev}: multicast along block_id.{'xyz'[min(along)]}, but its tile depends on it"
            )


def _same_steps(m: N.Module, shared: set[str], lets: dict[str, N.IExpr]) -> None:
    """The loops around a multicast copy run the same steps in every block (bounds that name
    no ``block_id``, through ``lets``): the blocks of a cluster meet on its stages step by
    step."""

    def walk(b: N.Block, loops: tuple) -> None:
        for o in b.ops:
            if isinstance(o, N.Copy) and o.ev in shared:
                for lp in loops:
                    if block_dims(lp.lo, lets) | block_dims(lp.hi, lets):
                        raise VerifyError(
                            f"{o.ev}: multicast in loop %{lp.var}, whose steps differ per block"
                        )
            if isinstance(o, (N.For, N.PFor)):
                walk(o.body, loops + (o,))

    walk(m.body, ())
