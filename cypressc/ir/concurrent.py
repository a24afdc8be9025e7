"""A concurrent interpreter for the synchronized IR (issue #10 item 3; paper §4.2.6).

After ``sync-insertion`` every event edge is an explicit sync op (:mod:`cypressc.ir.sync`).
:func:`run_block` executes one thread block of such a module the way the GPU would:
each *role instance* — the producer, and each consumer warpgroup (``WARPGROUP`` index) —
is its own thread of control (a Python generator that yields at every sync op and
asynchronous issue), and a seeded scheduler interleaves them at random.  The warps and
lanes of one warpgroup run in lockstep (an op ``per [(2, WARPGROUP), (4, WARP), ...]``
runs all of that warpgroup's instances at once; an op without a ``WARPGROUP`` dimension
in a consumer is executed by warpgroup 0, the elected one).

Hardware semantics modelled (PTX ISA, mbarrier / wgmma / cp.async.bulk):

* an mbarrier stage completes a phase once ``count`` arrivals were made and its pending
  transaction bytes are back to zero; ``wait parity p`` blocks until the phase of parity
  ``p`` has completed; barriers are initialised once per block;
* a TMA load (``copy ... on %bar[s]``) completes at a random later scheduler step: only
  then is its destination written and its bytes subtracted from the barrier;
* a wgmma is issued asynchronously; its accumulator update lands when a ``wait_group``
  retires its (committed) group; TMA stores (``bulk`` groups) complete at a random later
  step (under odd seeds only once no thread can run: as late as the hardware may), ``wait_group
  bulk N`` blocks until every group but the N most recent has completed (groups may complete
  out of order);
* ``bar_sync id, threads`` blocks until ``threads / 128`` warpgroups arrived, and releases
  the finished reads of each to the others (as an mbarrier arrival does);
  ``syncwarp`` is a no-op (lanes run in lockstep); fences clear the proxy/register marks
  below.

Findings (:class:`Finding`), first one wins: **deadlock** (no thread can run, nothing in
flight; every thread's position), **race** — a shared stage read before the TMA writing
it completed or before the reader observed the full-barrier phase it completed; a TMA
issued into a stage, or thread code writing shared memory, whose earlier reader is
still in flight or whose release (an arrival, a named barrier) the writer has not observed; a register accumulator touched while a wgmma on
it is in flight; a wgmma on registers written by threads without ``fence wgmma``; a TMA
store or a wgmma reading shared memory written by threads without ``fence proxy_async``; the block
exiting with a TMA store in flight — and **mismatch** (values differ from the sequential
interpreter, :mod:`cypressc.ir.interp`, which supplies the value semantics of copies and
leaf calls here).

This module walks the program per thread and schedules; what each op does is in
:mod:`cypressc.ir.concurrent_ops`, the block's state and the race checks in
:mod:`cypressc.ir.concurrent_state`.
"""

from __future__ import annotations

import itertools
import random

import numpy as np

from cypressc.ir import interp as I
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.analysis import Symbols, dim_procs
from cypressc.ir.clocks import HappensBefore
from cypressc.ir.concurrent_ops import OpSemantics
from cypressc.ir.concurrent_state import (
    BLOCK,
    WG,
    Bar,
    Finding,
    Region,
    ScheduleFailure,
    Thread,
    alias_groups,
    op_label,
)
from cypressc.ir.interp_views import _Scope
from cypressc.ir.kinds import Role
from cypressc.ir.printer import _Printer
from cypressc.ir.target import cluster_blocks, cluster_shape

__all__ = [
    "Finding",
    "ScheduleFailure",
    "run_block",
    "run_cluster",
    "cluster_tiles",
    "block_ops",
    "op_label",
    "pipeline_ring",
    "tile_trips",
    "ring_steps",
]


def block_ops(b: N.Block):
    """Every op of ``b``, pre-order, loop bodies included."""
    for op in b.ops:
        yield op
        if isinstance(op, (N.For, N.PFor)):
            yield from block_ops(op.body)


def pipeline_ring(m: N.Module) -> int:
    """Steps after which every mbarrier of ``m`` is back at its stage 0 and parity 0."""
    return 2 * max([o.stages for o in block_ops(m.body) if isinstance(o, S.MBarrier)] + [1])


def tile_trips(m: N.Module, vi: I._Interp, env: dict) -> list[int]:
    """The trip count of each block-level loop of ``m`` in the tile at block indices ``env``
    (``vi``: an interpreter at the sizes, its root scope holding the block program's lets)."""
    return [
        int(vi.expr(op.hi, vi.root, env)) - int(vi.expr(op.lo, vi.root, env))
        for op in block_ops(m.body)
        if isinstance(op, N.For) and any(d.proc == BLOCK for d in op.dims)
    ]


def ring_steps(m: N.Module, vi: I._Interp, env: dict) -> list[int]:
    """The stage-ring positions each block-level loop of ``m`` advances in the tile at
    ``env``: its trip count plus the positions its ring members outside it take
    (``ring_extra``, :mod:`cypressc.passes.rings`)."""
    loops = [
        op
        for op in block_ops(m.body)
        if isinstance(op, N.For) and any(d.proc == BLOCK for d in op.dims)
    ]
    return [n + op.ring_extra for n, op in zip(tile_trips(m, vi, env), loops)]


class _Concurrent(OpSemantics):
    """One block of a synchronized module under one seeded schedule: the role instances as
    generators walking the program (:meth:`walk`), the ops' semantics and race checks in
    :class:`~cypressc.ir.concurrent_ops.OpSemantics`, the scheduler in :meth:`run`."""

    def __init__(
        self,
        m: N.Module,
        sizes,
        arrays,
        tiles: list[dict],
        seed: int,
        values: bool,
        happens_before: bool = False,
        rank: tuple[int, ...] | None = None,
    ) -> None:
        self.m, self.values, self.rng = m, values, random.Random(seed)
        # a block of a cluster (run_cluster): its rank per grid dimension; its mbarriers are
        # keyed by it too, so that an observation of one block's barrier never stands for
        # another's; ``cluster`` (all blocks, rank order) is set by run_cluster
        self.rank = rank
        self.cluster: list[_Concurrent] = [self]
        self.scope_paths: dict[int, tuple] = {}
        self.late_bulk = seed % 2 == 1
        self.vi = I._Interp(m, sizes, arrays, None)  # value semantics (views, leaf calls)
        self.sym = Symbols(m)
        self.alias = alias_groups(m)
        pr = _Printer(None, m.body)  # the event names `explain` prints (%e1, %e2, ...)
        self.names = {ev: pr.ev(ev) for ev in list(pr.names)}
        self.roles: dict[str, Role] = m.role_map()
        self.tiles = [dict(e) for e in tiles]  # the block indices of the tiles, run in order
        # a persistent block passes the next tile's first turn after this tile's last run
        self.carry = S.carried_turns(m.body.ops) if len(self.tiles) > 1 else None
        self.env0 = self.tiles[0]
        # the IR's parity of these is the tile's own, flipped on odd tiles (the kernel's `tphase`)
        self.tile_bars = S.once_per_tile(m.body)
        self.bars: dict[tuple, Bar] = {}
        self.regions: dict[tuple, Region] = {}
        self.reg_pending: dict[tuple, int] = {}
        self.inflight: list[tuple] = []  # (kind, thread, payload) async completions
        self.named: dict[int, set] = {}
        self.named_gen: dict[int, int] = {}
        self.turns: dict[int, list[int]] = {}
        self.scopes: dict[tuple, _Scope] = {}
        self._define(self.vi.root, m.body)
        nwg = 1
        for op in block_ops(m.body):
            for d in getattr(op, "dims", ()):
                if d.proc == WG:
                    nwg = max(nwg, int(self.vi.expr(d.extent, self.vi.root, self.env0)))
        producer = any(r == Role.PRODUCER for r in self.roles.values()) or any(
            getattr(o, "role", "") == Role.PRODUCER for o in block_ops(m.body)
        )
        who = "" if rank is None else f"block {rank} "
        self.threads = ([Thread(f"{who}producer", Role.PRODUCER, 0)] if producer else []) + [
            Thread(f"{who}consumer wg{w}", Role.CONSUMER, w) for w in range(nwg)
        ]
        self.hb = HappensBefore(self) if happens_before else None

    # -- walking the program, per thread --------------------------------------------
    def scope_for(self, parent: _Scope, key: tuple, block: N.Block, var: str | None, k) -> _Scope:
        sc = self.scopes.get((parent.uid,) + key)
        if sc is None:
            sc = _Scope(parent)
            if var is not None:
                sc.vars[var] = k
            self._define(sc, block)
            self.scopes[(parent.uid,) + key] = sc
            self.scope_paths[sc.uid] = self.scope_paths.get(parent.uid, ()) + (
                (key, block, var, k),
            )
        return sc

    def scope_like(self, other: _Concurrent, sc: _Scope) -> _Scope:
        """This block's scope at the loop position of ``other``'s scope ``sc`` (a multicast
        copy of ``other`` lands in this block's storage of the same iteration)."""
        out = self.vi.root
        for key, block, var, k in other.scope_paths.get(sc.uid, ()):
            out = self.scope_for(out, key, block, var, k)
        return out

    def bar_key(self, name: str, stage: int) -> tuple:
        """The key of stage ``stage`` of mbarrier ``name`` of this block (a block of a
        cluster: with its rank)."""
        return (name, stage) if self.rank is None else (name, stage, self.rank)

    @staticmethod
    def _define(sc: _Scope, block: N.Block) -> None:
        for op in block.ops:
            name = getattr(op, "name", None) or getattr(op, "ev", None)
            if name and not isinstance(op, S.SYNC_OPS):
                sc.defs[name] = op

    def role_of(self, op) -> str:
        if isinstance(op, S.SYNC_OPS):
            return op.role
        return self.roles.get(op.ev, Role.CONSUMER)

    def walk_tiles(self, t: Thread):
        """The thread's program once per tile of the block (a persistent block's tiles: the
        barriers, shared buffers and registers carry over)."""
        for i in range(len(self.tiles)):
            t.tile = i
            yield from self.walk(
                t, self.m.body, self.vi.root, f"tile {i}: " if len(self.tiles) > 1 else ""
            )

    def walk(self, t: Thread, b: N.Block, scope: _Scope, where: str):
        env0 = self.tiles[t.tile]
        for op in b.ops:
            if isinstance(op, (N.Alloc, N.Let, N.Partition)):
                continue
            if isinstance(op, S.MBarrier):
                st = op.stages
                for s in range(st):
                    self.bars.setdefault(self.bar_key(op.name, s), Bar(op.count))
                continue
            if isinstance(op, (N.For, N.PFor)):
                lo = int(self.vi.expr(op.lo, scope, env0))
                hi = int(self.vi.expr(op.hi, scope, env0))
                for k in range(lo, hi):
                    sc = self.scope_for(scope, (op.ev, k), op.body, op.var, k)
                    yield from self.walk(t, op.body, sc, f"{where}%{op.var}={k} ")
                continue
            if self.role_of(op) != t.role:
                continue
            carried = self.carry is not None and b is self.m.body
            if carried and op is self.carry[0] and t.tile > 0:
                continue  # passed right after the tile before's last run (S.carried_turns)
            envs = self.instances(t, op, scope)
            if envs:
                t.pos = f"{op_label(op, self.names)} ({where.strip() or 'outside loops'})"
                yield  # every sync op and async issue is a scheduling point
                yield from self.execute(t, op, scope, envs)
            if carried and op is self.carry[1] and t.tile < len(self.tiles) - 1:
                first = self.carry[
                    0
                ]  # the next tile's first turn, as the persistent kernel passes it
                envs = self.instances(t, first, scope)
                if envs:
                    t.pos = f"{op_label(first, self.names)} ({where}the next tile's first turn)"
                    yield
                    yield from self.execute(t, first, scope, envs)

    def instances(self, t: Thread, op, scope) -> list[dict]:
        dims = getattr(op, "dims", ())
        procs = dim_procs(dims)
        if t.role == Role.CONSUMER and not any(d.proc == WG for d in dims) and t.wg != 0:
            return []  # per-block op of the consumers: warpgroup 0 is the elected one
        free, fixed = [], dict(self.tiles[t.tile])
        for p, d in zip(procs, dims):
            if p.proc == BLOCK:
                continue
            if p.proc == WG:
                fixed[p] = t.wg
            else:
                free.append((p, range(int(self.vi.expr(d.extent, scope, fixed)))))
        when = getattr(op, "when", None)  # a guard over loop variables (and the warpgroup index)
        if when is not None and self.vi.expr(when.a, scope, fixed) < self.vi.expr(
            when.b, scope, fixed
        ):
            return []
        out = []
        combos = itertools.product(*[r for _, r in free])
        if not self.values and not isinstance(op, (S.Arrive, S.ArriveExpectTx, N.Copy)):
            combos = itertools.islice(combos, 1)  # the checks only need one instance's view
        for combo in combos:
            e = dict(fixed)
            e.update({p: i for (p, _), i in zip(free, combo)})
            out.append(e)
        return out

    def check_positions_carry(self) -> None:
        """Tiles run back to back on one pipeline only where each block-level loop's trip
        count (with its ring members' positions, :func:`ring_steps`) is a multiple of twice
        every barrier's stage count (stage and parity then
        restart where the IR's per-tile positions do); ValueError otherwise."""
        ring = pipeline_ring(self.m)
        for env in self.tiles:
            for n in ring_steps(self.m, self.vi, env):
                if n % ring:
                    raise ValueError(
                        f"a main loop steps {n} ring position(s) in a tile, not a multiple of {ring}: "
                        "the tiles of one block would not restart the pipeline positions"
                    )

    # -- the scheduler ----------------------------------------------------------------
    def run(self) -> None:
        """Run the threads of every block of the cluster (one block: this one) under one
        seeded scheduler, with their asynchronous completions, until all end or none can."""
        owner = {id(t): c for c in self.cluster for t in c.threads}
        threads = [t for c in self.cluster for t in c.threads]
        for t in threads:
            t.gen = owner[id(t)].walk_tiles(t)
        while True:
            runnable = [t for t in threads if not t.done and (t.ready is None or t.ready())]
            # half the schedules keep TMA stores in flight while any thread can run (as long
            # as the hardware may): a write that does not wait for a store's read then races
            late = self.late_bulk and runnable
            choices = [("t", t) for t in runnable] + [
                ("a", a) for a in self.inflight if not (late and a[0] == "bulk")
            ]
            if not choices:
                live = [t for t in threads if not t.done]
                if not live:
                    left = {b: st[0] for c in self.cluster for b, st in c.turns.items() if st[0]}
                    if left:  # a persistent block's next tile would find these phases half-full
                        self.fail(
                            "deadlock",
                            "end",
                            "the block ends with arrivals on turn barrier(s) "
                            + ", ".join(f"{b} ({n} warpgroup(s))" for b, n in sorted(left.items())),
                        )
                    return
                pos = "; ".join(f"{t.name} blocked at {t.pos}" for t in live)
                self.fail("deadlock", live[0].pos.split(" (")[0], f"no thread can run: {pos}")
            kind, x = choices[self.rng.randrange(len(choices))]
            if kind == "a":
                self.inflight.remove(x)
                self.complete(x[0], x[1], x[2])
                continue
            x.ready = None
            try:
                next(x.gen)
            except StopIteration:
                x.done = True
                if x.open_mma or x.mma_groups:
                    self.fail("race", "end", f"{x.name} exits with wgmma groups that never retired")
                if any(not j["done"] for g in x.bulk_groups + [x.open_bulk] for j in g):
                    self.fail(
                        "race", "end", f"{x.name} exits while a TMA store still reads shared memory"
                    )


def run_cluster(
    m: N.Module,
    sizes: dict[str, int],
    arrays: dict[str, np.ndarray],
    tiles: list[list[dict]],
    seed: int,
    values: bool = True,
) -> Finding | None:
    """Run one thread-block cluster of the synchronized module ``m`` (its target's
    ``cluster`` shape; :mod:`cypressc.passes.cluster_multicast`) under the random schedule
    ``seed``, in place on ``arrays``: each block as :func:`run_block` runs one, all under one
    scheduler.  ``tiles``: the cluster's tiles in order, each a list of its blocks' indices
    (``IProc`` → index) in rank order (row-major over the grid dimensions, the last one
    fastest, as the kernel ranks them): block ``r`` of the cluster runs the ``r``-th block of
    every tile, as the kernel's cluster walk does.

    Cross-block semantics (PTX ``.multicast::cluster``, ``mbarrier.arrive.shared::cluster``):
    a ``multicast`` copy is issued by the first block of its group only, lands in every block
    of the group (its storage, its regions' race checks) and completes on each one's barrier;
    ``arrive.cluster`` arrives on the stage of every block; every block's mbarriers are
    initialized before any thread runs (the kernel's cluster sync after initialization).  A
    block's barriers are its own (an observation of one never stands for another's).  Returns
    the first deadlock or race :class:`Finding`, or None; ValueError for tiles that do not
    match the cluster's shape."""
    shape = cluster_shape(m)
    if not shape or not tiles or any(len(tl) != len(tiles[0]) for tl in tiles):
        raise ValueError("run_cluster: a module with a cluster, and the same blocks per tile")
    n = cluster_blocks(m)
    if len(tiles[0]) != n:
        raise ValueError(f"run_cluster: {len(tiles[0])} blocks per tile for a cluster of {n}")
    ranks = list(itertools.product(*(range(x) for x in shape)))
    try:
        blocks = [
            _Concurrent(m, sizes, arrays, [tl[r] for tl in tiles], seed, values, rank=rk)
            for r, rk in enumerate(ranks)
        ]
        inflight: list[tuple] = []
        for b in blocks:
            b.cluster, b.inflight, b.rng = blocks, inflight, blocks[0].rng
            for op in block_ops(m.body):  # initialized, then the cluster syncs
                if isinstance(op, S.MBarrier):
                    for s in range(op.stages):
                        b.bars.setdefault(b.bar_key(op.name, s), Bar(op.count))
            if len(tiles) > 1:
                b.check_positions_carry()
        blocks[0].run()
    except ScheduleFailure as f:
        return f.finding
    return None


def cluster_tiles(m: N.Module, blocks: list[dict]) -> list[list[dict]]:
    """``blocks`` (a grid's block indices, :func:`cypressc.ir.schedule_check.grid_blocks`)
    grouped into the tiles of ``m``'s clusters, each tile's blocks in rank order; ValueError
    where the grid is not a whole number of clusters along a dimension (the kernel runs the
    blocks past the edge on zero-filled tiles; the interpreter has no such blocks)."""
    shape = cluster_shape(m)
    procs = sorted({p for b in blocks for p in b}, key=lambda p: p.dim)
    ext = {p: max(b[p] for b in blocks) + 1 for p in procs}
    if any(ext[p] % shape[p.dim] for p in procs):
        raise ValueError("the grid is not a whole number of clusters at these sizes")
    out: dict[tuple, list] = {}
    for b in sorted(blocks, key=lambda b: tuple(b[p] for p in procs)):
        tile = tuple(b[p] // shape[p.dim] for p in procs)
        out.setdefault(tile, []).append(b)
    return list(out.values())


def run_block(
    m: N.Module,
    sizes: dict[str, int],
    arrays: dict[str, np.ndarray],
    block: dict | list[dict],
    seed: int,
    values: bool = True,
    happens_before: bool = False,
) -> Finding | None:
    """Run one block (``block``: ``IProc`` → index, see
    :func:`cypressc.ir.schedule_check.grid_blocks`) of the
    synchronized module ``m`` under the random schedule ``seed``, in place on ``arrays``.
    A list of blocks runs them as the tiles of one persistent block, in order: one set of
    mbarriers, shared buffers and registers, a tile's roles starting the next tile while
    the others still run the last one (what the kernel of a ``persistent`` mapping does;
    with ping-pong, the next tile's first turn is passed right after the last warpgroup's
    last run, :func:`cypressc.ir.sync.carried_turns`); each block-level loop must then
    step a whole number of wraps of every barrier's stages per tile (the kernel's pipeline
    positions run on across tiles, the IR's restart), else ValueError.

    Returns the first deadlock or race :class:`Finding`, or None.  With ``values=False``
    copies and leaf calls are not evaluated (only the synchronization is checked); with
    ``happens_before`` every pair of conflicting accesses must also be ordered by a chain of
    synchronization (:mod:`cypressc.ir.happens_before`).  A module whose copies are
    ``multicast`` (a cluster, :mod:`cypressc.passes.cluster_multicast`) is a ValueError: its
    blocks run together, :func:`run_cluster`.
    """
    tiles = block if isinstance(block, list) else [block]
    if any(isinstance(o, N.Copy) and o.multicast for o in block_ops(m.body)):
        # one block's view cannot run another block's multicast copies or arrivals
        raise ValueError(
            "run_block runs one block; this module's copies are multicast across a cluster "
            "(cluster-multicast): run it with run_cluster"
        )
    try:
        c = _Concurrent(m, sizes, arrays, tiles, seed, values, happens_before)
        if len(tiles) > 1:
            c.check_positions_carry()
        c.run()
    except ScheduleFailure as f:
        return f.finding
    return None
