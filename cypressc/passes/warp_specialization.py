"""Pass 5, ``warp-specialization`` with pipelining (Cypress paper §4.2.5, Fig. 12).

Partitions the dependence graph of the block's code between a DMA **producer**
warpgroup and the compute **consumer** warpgroups: every GLOBAL→SHARED copy goes to
the producer, everything else to the consumers.  Each edge from a producer copy to a
consumer op becomes a *full* channel (the consumer waits for the copy's bytes); each
stage buffer read by consumers gets a backward *empty* edge (the producer may refill
stage ``k mod D`` once the consumers of iteration ``k - D`` are done) — Tawa's
``aref`` put/get/consumed.

A loop mapped with ``pipeline: D`` is pipelined: each SHARED tensor allocated in its
body gains a leading stage dimension of extent D, hoisted before the loop, and the
body indexes stage ``k mod D`` (``partition_by_slices``).  A tile outside the loop that joins
its stage ring (:mod:`cypressc.passes.rings`: FlashAttention-3's peeled K[0] and last V) takes a
ring position instead of a buffer: ``(lo + j) mod D`` before the loop, ``(hi + a + j) mod D``
after it, and the loop's steps ``(k + a) mod D`` (``a``: the members before the loop); the
loop records the positions its members take per tile (``ring_extra``).  Sequential semantics are
kept in the IR (iteration k+1 still starts after iteration k); the overlap the
channels allow is realized by the CUDA lowering.

Results: ``module.roles`` (event → producer/consumer) and ``module.schedule``
(:class:`~cypressc.ir.results.Schedule`): ``channels`` (producer event → consumer events:
each is a full barrier forward and, on the stage buffers, an empty barrier backward),
``stages`` (buffer → D), ``warpspecialize``.
"""

from __future__ import annotations

from dataclasses import replace

from cypressc.ir import nodes as N
from cypressc.ir.analysis import Symbols, ref_for
from cypressc.ir.kinds import Role
from cypressc.ir.subst import map_views, walk_ops
from cypressc.ir.target import Target
from cypressc.lang.kinds import Mem, PartKind
from cypressc.passes.base import ModulePass
from cypressc.passes.rings import Join, ring_extra, ring_joins

__all__ = ["warp_specialization"]


def _stage_loop(m: N.Module, lp: N.For, joins: dict[str, Join]) -> tuple[N.Module, dict[str, int]]:
    d = lp.pipeline
    bufs = [o for o in lp.body.ops if isinstance(o, N.Alloc) and o.mem == Mem.SHARED]
    if not bufs or d <= 1:
        return m, {}
    names = {b.name for b in bufs}
    staged = [replace(b, shape=(N.IConst(d),) + b.shape, layout=None) for b in bufs]
    parts = [
        N.Partition(
            f"{b.name}#stage", N.TRef(b.name), PartKind.SLICES, (N.IConst(0),), b.shape, b.dims
        )
        for b in bufs
    ]
    mine = {n: j for n, j in joins.items() if j.loop == lp.ev}
    # a ring with members before the loop: step k takes ring position k + (their count)
    pre = {b.name: sum(j.ring == b.name and j.side == "pre" for j in mine.values()) for b in bufs}
    k = N.IVar(lp.var)
    idx = {
        n: N.ibin("%", N.ibin("+", k, N.IConst(a)) if a else k, N.IConst(d)) for n, a in pre.items()
    }
    # a member's position, unfolded: it names the loop's bound (the CUDA lowering counts from there)
    pos = {
        n: N.IBin(
            "%",
            N.IBin(
                "+",
                lp.lo if j.side == "pre" else lp.hi,
                N.IConst(j.index + (j.pre if j.side == "post" else 0)),
            ),
            N.IConst(d),
        )
        for n, j in mine.items()
    }

    def inner(v: N.View) -> N.View:
        if isinstance(v, N.TRef) and v.name in names:
            return N.Piece(f"{v.name}#stage", (idx[v.name],))
        return v

    def outer(v: N.View) -> N.View:
        if isinstance(v, N.TRef) and v.name in mine:
            return N.Piece(f"{mine[v.name].ring}#stage", (pos[v.name],))
        return v

    body = N.Block(tuple(map_views(o, inner) for o in lp.body.ops if o not in bufs), lp.body.yields)
    new_lp = replace(lp, body=body, ring_extra=ring_extra(joins, lp.ev))
    first = next(
        (
            o
            for o in walk_ops(m.body)
            if isinstance(o, N.Alloc) and o.name in mine and mine[o.name].side == "pre"
        ),
        None,
    )

    def place(b: N.Block) -> N.Block:
        ops: list[N.Op] = []
        for o in b.ops:
            if o is lp:
                ops += ([] if first is not None else staged + parts) + [new_lp]
                continue
            if o is first:  # the ring is declared before its first member
                ops += staged + parts
                continue
            if isinstance(o, N.Alloc) and o.name in mine:
                continue
            if isinstance(o, (N.For, N.PFor)):
                o = replace(o, body=place(o.body))
            if (
                isinstance(o, N.Copy)
                and isinstance(o.dst, N.TRef)
                and o.dst.name in mine
                and mine[o.dst.name].side == "post"
            ):
                # its bytes are the ring's: it comes after the loop's reads of them (event order;
                # sync-insertion's ring edges, not this one, synchronize it)
                o = replace(o, pre=o.pre + (ref_for(lp.ev, lp.dims, o.dims),))
            ops.append(map_views(o, outer) if mine else o)
        return N.Block(tuple(ops), b.yields)

    return replace(m, body=place(m.body)), {b.name: d for b in bufs}


def warp_specialization(m: N.Module) -> N.Module:
    """Assign producer/consumer roles, derive channels, and pipeline loops (paper §4.2.5), as
    the BLOCK knobs ``warpspecialize`` and ``persistent`` of ``m.target`` say."""
    knobs = (m.target or Target.default(m.name)).block
    ws, persistent = bool(knobs.warpspecialize), bool(knobs.persistent)
    stages: dict[str, int] = {}
    joins = ring_joins(m, ws)
    # staging one loop rebuilds the blocks around it (new loop objects): find each by its event
    for ev in [o.ev for o in walk_ops(m.body) if isinstance(o, N.For) and o.pipeline]:
        lp = next(o for o in walk_ops(m.body) if isinstance(o, N.For) and o.ev == ev)
        m, st = _stage_loop(m, lp, joins)
        stages.update(st)
    sym = Symbols(m)
    roles: dict[str, str] = {}
    for o in walk_ops(m.body):
        if (
            isinstance(o, N.Copy)
            and sym.mem(o.src) == Mem.GLOBAL
            and sym.mem(o.dst) == Mem.SHARED
            and ws
        ):
            roles[o.ev] = Role.PRODUCER
        elif isinstance(o, N.AsyncOp) and not isinstance(o, (N.For, N.PFor)):
            roles[o.ev] = Role.CONSUMER
    channels: dict[str, tuple[str, ...]] = {}
    for o in walk_ops(m.body):
        if isinstance(o, (N.Copy, N.Call)) and roles.get(o.ev) == Role.CONSUMER:
            for r in o.pre:
                if roles.get(r.name) == Role.PRODUCER:
                    channels[r.name] = channels.get(r.name, ()) + (o.ev,)
    return replace(
        m, schedule=N.Schedule(channels, stages, ws, persistent), roles=tuple(roles.items())
    )


class WarpSpecialization(ModulePass):
    """The pass object of :func:`warp_specialization`."""

    name, section = "warp-specialization", "§4.2.5"

    def apply(self, m: N.Module) -> N.Module:
        return warp_specialization(m)
