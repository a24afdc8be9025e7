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
body indexes stage ``k mod D`` (``partition_by_slices``).  Sequential semantics are
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
from cypressc.ir.analysis import Symbols
from cypressc.ir.subst import map_views, walk_ops

__all__ = ["warp_specialization"]


def _stage_loop(m: N.Module, lp: N.For) -> tuple[N.Module, dict[str, int]]:
    d = lp.pipeline
    bufs = [o for o in lp.body.ops if isinstance(o, N.Alloc) and o.mem == "SHARED"]
    if not bufs or d <= 1:
        return m, {}
    names = {b.name for b in bufs}
    staged = [replace(b, shape=(N.IConst(d),) + b.shape, layout=None) for b in bufs]
    parts = [N.Partition(f"{b.name}#stage", N.TRef(b.name), "slices", (N.IConst(0),), b.shape, b.dims)
             for b in bufs]
    idx = N.ibin("%", N.IVar(lp.var), N.IConst(d))

    def fn(v: N.View) -> N.View:
        if isinstance(v, N.TRef) and v.name in names:
            return N.Piece(f"{v.name}#stage", (idx,))
        return v

    body = N.Block(tuple(map_views(o, fn) for o in lp.body.ops if o not in bufs), lp.body.yields)
    new_lp = replace(lp, body=body)

    def place(b: N.Block) -> N.Block:
        ops: list[N.Op] = []
        for o in b.ops:
            if o is lp:
                ops += staged + parts + [new_lp]
                continue
            if isinstance(o, (N.For, N.PFor)):
                o = replace(o, body=place(o.body))
            ops.append(o)
        return N.Block(tuple(ops), b.yields)

    return replace(m, body=place(m.body)), {b.name: d for b in bufs}


def warp_specialization(m: N.Module, ctx) -> N.Module:
    """Assign producer/consumer roles, derive channels, and pipeline loops (paper §4.2.5)."""
    block = ctx.tree.block_node()
    ws = bool(block is not None and block.instance.warpspecialize)
    persistent = bool(block is not None and block.instance.persistent)
    stages: dict[str, int] = {}
    # staging one loop rebuilds the blocks around it (new loop objects): find each by its event
    for ev in [o.ev for o in walk_ops(m.body) if isinstance(o, N.For) and o.pipeline]:
        lp = next(o for o in walk_ops(m.body) if isinstance(o, N.For) and o.ev == ev)
        m, st = _stage_loop(m, lp)
        stages.update(st)
    sym = Symbols(m)
    roles: dict[str, str] = {}
    for o in walk_ops(m.body):
        if isinstance(o, N.Copy) and sym.mem(o.src) == "GLOBAL" and sym.mem(o.dst) == "SHARED" and ws:
            roles[o.ev] = "producer"
        elif isinstance(o, N.AsyncOp) and not isinstance(o, (N.For, N.PFor)):
            roles[o.ev] = "consumer"
    channels: dict[str, tuple[str, ...]] = {}
    for o in walk_ops(m.body):
        if isinstance(o, (N.Copy, N.Call)) and roles.get(o.ev) == "consumer":
            for r in o.pre:
                if roles.get(r.name) == "producer":
                    channels[r.name] = channels.get(r.name, ()) + (o.ev,)
    return replace(m, schedule=N.Schedule(channels, stages, ws, persistent), roles=tuple(roles.items()))
