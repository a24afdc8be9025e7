"""Pass 6, ``sync-insertion``: every event edge becomes explicit synchronization (Cypress
paper §4.2.6, the synchronization half of CUDA lowering).

The paper lowers "events produced by TMA copies … into shared memory barrier arrivals
that the TMA triggers", Tensor Core events onto the Tensor Core's synchronization,
events crossing warp roles onto shared-memory barriers, broadcasts over THREAD onto
``__syncwarp`` and over WARP/WARPGROUP onto named barriers, and point-wise indexed
events onto nothing.  This pass does exactly that, in the IR: it reads the hazards of
:class:`cypressc.ir.hazards.Program` (edges and their endpoints only) and places the ops
of :mod:`cypressc.ir.sync` next to them:

* a TMA copy read by other ops → a *full* mbarrier (``arrive_expect_tx`` with the tile
  bytes before the copy, ``wait`` on parity ``((k - lo) / D) % 2`` before the first
  reader of each role); copies of one loop step share a channel when their stage index,
  role and wait points are equal and their stages are released at the same point;
* the write-after-read back edge from the readers of stage ``k`` to the copy of stage
  ``k + D`` → an *empty* mbarrier: the copy's role waits on it, each reader role arrives
  once per warpgroup (Tensor Core readers) or once per warp after ``__syncwarp`` (thread
  code read the stage), ``P = mma_in_flight`` steps later after ``wait_group`` retired
  the reading wgmma group, with the last ``P`` releases drained after the loop — or, when
  thread code of the same step already waits for that group (a ``wait_group`` of a
  same-step flow edge, after every thread reader), right after that wait, in its own step;
* a wgmma result (or operand) touched by thread code → ``commit_group`` after each run
  of wgmmas and ``wait_group<N>`` before the access, N = the groups committed in between;
* registers written by thread code and read by a wgmma → ``wgmma.fence``; shared memory
  written by threads and read by a TMA store or wgmma → ``fence.proxy.async``;
* a hazard spanning the threads of one warp → ``syncwarp``; warps or warpgroups → a
  named barrier (ids allocated in program order from 1 to 7; 0 is ``__syncthreads``);
* a TMA store → a bulk ``commit_group``, and ``wait_group 0`` at the end of the block;
* the reads of a TMA copy outside the main loop (FlashAttention's Q panel), against the
  block's next tile loading the same buffer (``via = "tile"``) → an *empty* mbarrier of one
  stage: the copy's role waits on it (parity ``(0 + 1) % 2``: the tile's first wait passes),
  each reader role arrives once per tile where all its reads are over (after the main loop
  when one is inside it; after ``wait_group`` retired a reading wgmma);
* the reads of a tensor whose bytes a later TMA copy of the same tile fills (resource
  allocation's sharing: FlashAttention-3's peeled K tile under its last V tile) → a *free*
  empty mbarrier of one stage (``same_tile``): each reader role arrives once its reads of
  the tile are over, the copy waits for this tile's phase (parity 0);
* a wgmma reading a shared tensor that thread code writes (a constant table filled before
  the main loop) → its group retired by the ``wait_group 0`` after its loop and a named
  barrier of readers and writers at the end of the tile (``via = "tile"``: the block's next
  tile writes the tensor again);
* with the mapping's ``pingpong``, the ``turn`` edges between the consumer warpgroups' runs
  of wgmma issues → ``turn take`` / ``turn pass`` named barriers
  (:mod:`cypressc.passes.sync_turns`);
* edges with no hazard, point-wise ones inside a thread, and edges implied by a path of
  synchronized ones → nothing.

Anything else is refused (E050) rather than left unsynchronized.  The result sets
``Module.synchronized``; :mod:`cypressc.ir.sync_verify` then checks it.

The TMA channels are built in :mod:`cypressc.passes.sync_channels`, every op is placed by
:mod:`cypressc.passes.sync_placement`, and :mod:`cypressc.passes.sync_prune` drops the
``wait_group`` ops an earlier wait made redundant and folds a ``fence wgmma`` that only wgmma
issues separate from the previous one into it.
"""

from __future__ import annotations

import re
from dataclasses import replace

from cypressc.diagnostics import CypressError, Loc
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.hazard_deps import Dep, Leaf
from cypressc.ir.hazards import Program
from cypressc.ir.kinds import FenceKind, GroupUnit, Need, OpKind, Role, Via
from cypressc.ir.printer import event_names
from cypressc.ir.subst import walk_ops
from cypressc.ir.target import Target
from cypressc.lang.kinds import Proc
from cypressc.passes.base import ModulePass
from cypressc.passes.sync_channels import TmaChannels
from cypressc.passes.sync_placement import Ins as _Ins
from cypressc.passes.sync_placement import Refuse as _Refuse
from cypressc.passes.sync_placement import Side
from cypressc.passes.sync_placement import count_instances as _count
from cypressc.passes.sync_prune import fold_far_barriers, merge_wgmma_fences, prune_wait_groups
from cypressc.passes.sync_turns import place_turns

__all__ = ["SyncInsertion", "sync_insertion"]

INF = float("inf")


class SyncInsertion(ModulePass):
    """The ``sync-insertion`` pass (paper §4.2.6) as an object: ``SyncInsertion()(module)``
    runs it on any module after warp specialization (hand-written IR included).

    ``mma_in_flight`` is the mapping's P: wgmma groups left in flight before a stage is
    released (at most ``stages - 1``: a deeper one would stall the producer forever).
    ``pingpong``: the consumer warpgroups take turns on the Tensor Core
    (:mod:`cypressc.passes.sync_turns`).
    Raises :class:`CypressError` E050 for an edge it cannot synchronize yet.
    """

    name = "sync-insertion"
    section = "§4.2.6"

    def __init__(
        self,
        mma_in_flight: int = 1,
        warp_threads: int = 32,
        warpgroup_warps: int = 4,
        pingpong: bool = False,
    ) -> None:
        self.mma_in_flight, self.warp_threads, self.warpgroup_warps = (
            mma_in_flight,
            warp_threads,
            warpgroup_warps,
        )
        self.pingpong = pingpong

    @classmethod
    def from_target(cls, target: Target) -> "SyncInsertion":
        """The BLOCK knobs ``mma_in_flight`` and ``pingpong`` and the machine's warp geometry."""
        lim = target.machine.limits
        p = target.block.mma_in_flight
        return cls(
            1 if p is None else p,
            lim.get("warp_threads", 32),
            lim.get("warpgroup_warps", 4),
            bool(target.block.pingpong),
        )

    @classmethod
    def for_module(cls, m: N.Module) -> "SyncInsertion":
        return cls.from_target(m.target or Target.default(m.name))

    def apply(self, m: N.Module) -> N.Module:
        return self(m)

    def __call__(self, m: N.Module) -> N.Module:
        loc = (m.target or Target.default(m.name)).loc
        try:
            out = _Insert(m, self).run()
        except _Refuse as r:
            names = event_names(m)  # the %eN names `cypressc explain` prints, not internal ids
            why = re.sub(r"%(ev#\d+)", lambda e: names.get(e.group(1), e.group(0)), str(r))
            raise CypressError(
                "E050",
                f"the CUDA backend cannot synchronize this program yet: {why}",
                loc,
                hint="the IR passes before sync-insertion and `cypressc explain` still work; "
                "see docs/language.md for the kernel shapes the backend generates",
            ) from None
        return _barrier_bytes(out, loc)


def _barrier_bytes(m: N.Module, loc: Loc) -> N.Module:
    """Grow the shared memory by the mbarriers beyond what resource allocation reserved
    (one full/empty pair per stage; separate channels need more); E046 past the limit."""
    need = 8 * sum(o.stages for o in walk_ops(m.body) if isinstance(o, S.MBarrier))
    res = m.resources
    if res is None or need <= res.barrier_bytes:  # hand-written IR: no shared-memory plan to grow
        return m
    total = res.smem_bytes + need - res.barrier_bytes
    limit = res.smem_limit
    if total > limit:
        raise CypressError(
            "E046",
            f"shared memory does not fit: the mbarriers of the pipeline's channels "
            f"need {need} bytes, {total} in all, the limit is {limit}",
            loc,
            hint="lower `pipeline:` or the tile sizes",
        )
    return replace(m, resources=replace(res, smem_bytes=total, barrier_bytes=need))


def sync_insertion(m: N.Module) -> N.Module:
    """:class:`SyncInsertion` with the knobs of ``m.target`` (the mapping's)."""
    return SyncInsertion.from_target(m.target or Target.default(m.name))(m)


class _Insert(TmaChannels):
    """One run of the pass on one module: the direct sync ops (wgmma groups, fences, named
    barriers, syncwarp, bulk stores) here, the TMA channels in :class:`TmaChannels`, their
    placement in :class:`~cypressc.passes.sync_placement.Placement`."""

    def __init__(self, m: N.Module, cfg: SyncInsertion) -> None:
        super().__init__()
        self.m, self.cfg = m, cfg
        self.prog = Program(m, cfg.warp_threads, cfg.warpgroup_warps)
        if self.prog.pfor:
            raise _Refuse("a parallel loop inside the block program")
        self.covered: list[Dep] = []
        self.next_id = 1
        self.groups: dict[
            str, tuple[int, int]
        ] = {}  # wgmma event -> (id of its block, group index)
        self.commits: dict[int, list[int]] = {}  # id(block) -> seq of each commit's last wgmma
        self.blocks: dict[int, N.Block] = {}
        self.seqs = {lf.seq: lf for lf in self.prog.leaves.values()}
        self.ops = {id(lf.op): lf.op for lf in self.prog.leaves.values()}
        self.ops.update({id(lp): lp for lp, _, _ in self.prog.loops.values()})

    # -- the pass -------------------------------------------------------------------------
    def run(self) -> N.Module:
        deps = self.prog.deps()
        # the first thread op of the same step that waits for each wgmma (a wait_group edge):
        # wgmmas whose results are needed at different points get separate commit groups, so
        # the earlier wait leaves the later group in flight (FlashAttention-3's wait_group 1)
        self.first_use: dict[str, int] = {}
        for d in deps:
            c = self.prog.leaves.get(d.dst)
            if (
                d.via == Via.SAME
                and c is not None
                and c.kind == OpKind.THREAD
                and Need.WAIT_GROUP in self.prog.needs(d)
            ):
                self.first_use[d.src] = min(self.first_use.get(d.src, INF), c.seq)
        self._commits(self.m.body)
        full: dict[str, list[Dep]] = {}
        empty: dict[str, list[Dep]] = {}
        tile: dict[str, list[Dep]] = {}  # a copy outside the main loop -> its readers (next tile)
        freed: dict[str, list[Dep]] = {}  # a copy into shared bytes -> the earlier tensor's readers
        ring: dict[
            str, list[Dep]
        ] = {}  # a copy into a stage ring with members -> readers of the ring
        later = []
        for d in deps:
            needs = self.prog.needs(d)
            if Need.IMPLIED in needs:
                later.append(d)
                continue
            if Need.FULL in needs:
                full.setdefault(d.src, []).append(d)
            elif Need.EMPTY in needs and d.via == Via.RING:
                ring.setdefault(d.dst, []).append(d)
            elif Need.EMPTY in needs and d.via == Via.TILE:
                tile.setdefault(d.dst, []).append(d)
            elif Need.EMPTY in needs and d.via in (Via.SAME, Via.AFTER):
                freed.setdefault(d.dst, []).append(d)
            elif Need.EMPTY in needs:
                empty.setdefault(d.dst, []).append(d)
            else:
                self._direct(d, needs)
            self.covered.append(d)
        self._channels(full, empty, tile, ring)
        for ev, ds in sorted(freed.items(), key=lambda x: self.prog.leaves[x[0]].seq):
            self._freed_channel(self.prog.leaves[ev], ds)
        for d in later:
            if not self.prog.is_implied(d, self.covered):
                names = f"%{d.src} -> %{d.dst}"
                on = (
                    f"%{d.other}"
                    if d.tensor == d.other
                    else f"%{d.tensor} (sharing its bytes with %{d.other})"
                )
                raise _Refuse(
                    f"the {d.hazard.upper()} edge {names} on {on} is not a TMA channel, a "
                    "stage release or thread-level synchronization inside one role"
                )
            self.covered.append(d)
        body, _ = prune_wait_groups(self._rebuild(self.m.body), {})
        body = fold_far_barriers(merge_wgmma_fences(body))
        if self.cfg.pingpong:
            body, self.next_id = place_turns(body, self.prog, self.next_id)
        return replace(self.m, body=body, synchronized=True)

    def _commits(self, b: N.Block) -> None:
        """One ``commit_group`` after each run of wgmmas of a role (thread code of the role ends
        a run; TMA copies, ops of other roles and scalar ops do not)."""
        self.blocks[id(b)] = b
        runs: dict[Role, list[Leaf]] = {}
        seqs: list[int] = []

        def close(role: Role) -> None:
            run = runs.pop(role, [])
            if run:
                last = run[-1]
                seqs.append(last.seq)
                for lf in run:
                    self.groups[lf.op.ev] = (id(b), len(seqs) - 1)
                self.put(
                    last.op,
                    Side.AFTER,
                    S.CommitGroup,
                    ("commit", role),
                    lambda ins, ev=tuple(x.op.ev for x in run), lf=last: S.CommitGroup(
                        GroupUnit.WGMMA, lf.role, ev, self.prog.role_dims(lf.role)
                    ),
                )

        for op in b.ops:
            lf = self.prog.leaves.get(getattr(op, "ev", ""))
            if lf is not None and lf.kind == OpKind.WGMMA:
                run = runs.get(lf.role, [])
                if run and min(self.first_use.get(x.op.ev, INF) for x in run) < self.first_use.get(
                    lf.op.ev, INF
                ):
                    close(
                        lf.role
                    )  # thread code needs the run so far before this wgmma: a group of its own
                runs.setdefault(lf.role, []).append(lf)
            elif lf is not None and lf.kind == OpKind.THREAD:  # TMA issues leave the group open
                close(lf.role)
            elif isinstance(op, (N.For, N.PFor)):
                for role in list(runs):
                    close(role)
                self._commits(op.body)
        for role in list(runs):
            close(role)
        self.commits[id(b)] = seqs

    def _after_group(self, lf: Leaf) -> int:
        """Commits in ``lf``'s block after the one closing its group."""
        bid, g = self.groups[lf.op.ev]
        return len(self.commits[bid]) - 1 - g

    def _direct(self, d: Dep, needs: tuple[Need, ...]) -> None:
        p, c = self.prog.leaves[d.src], self.prog.leaves.get(d.dst)
        e = d.edge()
        if Need.BULK in needs:
            self.put(
                p.op,
                Side.AFTER,
                S.CommitGroup,
                (GroupUnit.BULK, p.role, p.op.dims),
                lambda ins: S.CommitGroup(GroupUnit.BULK, p.role, (p.op.ev,), p.op.dims),
            )
            top = p.loops[0] if p.loops else p.op
            blk = next(b for b in self.blocks.values() if any(o is top for o in b.ops))
            self.put(
                blk,
                Side.END,
                0,
                ("bulkwait", p.role, p.op.dims),
                lambda ins: S.WaitGroup(GroupUnit.BULK, 0, p.role, tuple(ins.edges), p.op.dims),
                [e],
            )
            return
        if d.via == Via.TILE:
            self._tile(d, needs, p, c, e)
            return
        if Need.WAIT_GROUP in needs:
            self._wait_group(d, p, c, e)
        where, side = self.anchor(d)
        if Need.BULK_READ in needs:
            self.put(
                where,
                side,
                S.WaitGroup,
                ("wait_group", GroupUnit.BULK, p.role, p.op.dims),
                lambda ins: S.WaitGroup(
                    GroupUnit.BULK, ins.pending, p.role, tuple(ins.edges), p.op.dims
                ),
                [e],
                pending=self._bulk_pending(d, p, c),
            )
        if Need.FENCE_WGMMA in needs and c.kind == OpKind.WGMMA:
            # right before the wgmma, also for an edge into its loop: the fence of the accumulator
            # carried across iterations stands there and realizes both (one fence, not two)
            where, side = c.op, Side.BEFORE
        if Need.FENCE_WGMMA in needs:
            self.put(
                where,
                side,
                FenceKind.WGMMA,
                ("fence", FenceKind.WGMMA, c.role),
                lambda ins: S.Fence(FenceKind.WGMMA, c.role, tuple(ins.edges), c.op.dims),
                [e],
            )
        if Need.PROXY in needs:
            self.put(
                where,
                side,
                FenceKind.PROXY_ASYNC,
                ("fence", FenceKind.PROXY_ASYNC, p.role),
                lambda ins: S.Fence(FenceKind.PROXY_ASYNC, p.role, tuple(ins.edges), p.op.dims),
                [e],
            )
        self._meet(d, needs, p, c, e, where, side)

    def _meet(
        self,
        d: Dep,
        needs: tuple[Need, ...],
        p: Leaf,
        c: Leaf,
        e: S.Edge,
        where,
        side: Side,
        prio=None,
        tag: tuple = (),
    ) -> None:
        """The broadcast ``d`` needs at ``where``/``side``: a ``syncwarp`` over one warp's
        threads, or a named barrier over warps or warpgroups (one id per warpgroup when the
        hazard stays inside each).  ``prio``: the op's order in an ``end`` slot; ``tag`` keeps
        its barrier apart from the same edge's other ones."""
        if Need.SYNCWARP in needs:
            self.put(
                where,
                side,
                S.SyncWarp if prio is None else prio,
                ("syncwarp", p.role, *tag),
                lambda ins: S.SyncWarp(p.role, tuple(ins.edges), p.op.dims),
                [e],
            )
        if Need.BAR_SYNC in needs:
            warps = self.prog.warps(d)
            if warps is None:
                raise _Refuse(
                    f"a named barrier over a run-time number of threads (%{d.src} -> %{d.dst})"
                )
            dims = max(p.op.dims, c.op.dims, key=len)
            per_wg = Proc.WARPGROUP not in d.scope and any(x.proc == Proc.WARPGROUP for x in dims)
            self.put(
                where,
                side,
                S.BarSync if prio is None else prio,
                ("bar", p.role, d.scope, *tag),
                lambda ins: self._bar_sync(ins, p.role, dims, per_wg, 32 * warps),
                [e],
            )

    def _tile(self, d: Dep, needs: tuple[Need, ...], p: Leaf, c: Leaf, e: S.Edge) -> None:
        """A read (a wgmma's, or thread code's) of a thread-written shared tensor before the
        next tile's writes (``via = "tile"``): a wgmma's group retires by the ``wait_group 0``
        after its loop (or at the end of the tile), and readers and writers meet at a named
        barrier at the end of the tile (one per warpgroup when the hazard stays inside each), so
        no thread writes the tensor again while another thread or wgmma may still read it."""
        top = p.loops[0] if p.loops else p.op
        blk = next(b for b in self.blocks.values() if any(o is top for o in b.ops))
        if Need.WAIT_GROUP in needs:
            if p.op.ev not in self.groups:
                raise _Refuse(f"wgmma %{p.op.ev} is in no commit group")
            where, side = (p.loops[-1], Side.AFTER) if p.loops else (blk, Side.END)
            if p.loops and p.loops[-1] is not top:
                raise _Refuse(
                    f"a wgmma in a nested loop reading %{d.other}, which the next tile's threads write"
                )
            self.put(
                where,
                side,
                S.WaitGroup,
                ("wait_group", p.role),
                lambda ins: S.WaitGroup(
                    GroupUnit.WGMMA,
                    ins.pending,
                    p.role,
                    tuple(ins.edges),
                    self.prog.role_dims(p.role),
                ),
                [e],
                pending=0,
            )
        self._meet(d, needs, p, c, e, blk, Side.END, prio=2, tag=(Via.TILE,))

    def _bulk_pending(self, d: Dep, p: Leaf, c: Leaf) -> int:
        """The bulk groups a ``wait_group bulk N`` before ``c`` may leave in flight and still
        retire TMA store ``p``'s, ``d.distance`` iterations of ``d``'s loop earlier: the stores
        ``p``'s issuing thread committed between them (one group each).  0 (wait for all) when
        a store of the role in that loop is in a nested loop or issued by another thread, where
        that count is not this thread's static one."""
        lp = self.prog.loops[d.loop][0]
        stores = [
            lf
            for lf in self.prog.leaves.values()
            if lf.kind == OpKind.TMA_STORE and lf.role == p.role and lp in lf.loops
        ]
        if any(lf.loops[-1] is not lp or lf.op.dims != p.op.dims for lf in stores):
            return 0
        after = sum(1 for lf in stores if lf.seq > p.seq)
        before = sum(1 for lf in stores if lf.seq < c.seq)
        return after + (d.distance - 1) * len(stores) + before

    def _bar_sync(self, ins: _Ins, role: Role, dims, per_wg: bool, threads: int) -> S.BarSync:
        base, n = self.next_id, 1
        ident: N.IExpr = N.IConst(base)
        if per_wg:
            n = _count(tuple(d for d in dims if d.proc == Proc.WARPGROUP))
            ident = N.ibin("+", N.IConst(base), N.IProc(Proc.WARPGROUP))
        self.next_id += n
        if self.next_id > S.NAMED_BARRIERS + 1:
            raise _Refuse(f"more than {S.NAMED_BARRIERS} named barriers")
        return S.BarSync(ident, threads, role, tuple(ins.edges), dims)

    def _wait_group(self, d: Dep, p: Leaf, c: Leaf, e: S.Edge) -> None:
        if p.op.ev not in self.groups:
            raise _Refuse(f"wgmma %{p.op.ev} is in no commit group")
        bid, g = self.groups[p.op.ev]
        commits = self.commits[bid]
        if d.via == Via.AFTER:
            lp = self.prog.loops[d.loop][0]
            if p.loops[-1] is not lp:
                raise _Refuse(f"a wgmma in a loop nested in loop %{d.loop}, read after it")
            where, side, n = lp, Side.AFTER, self._after_group(p)
        elif d.via == Via.ENTRY:
            lp = self.prog.loops[d.loop][0]
            where, side = lp, Side.BEFORE
            n = sum(1 for s in commits[g + 1 :] if s < self.prog.loops[d.loop][2])
        elif d.via == Via.CARRIED:
            where, side = c.op, Side.BEFORE
            n = (
                self._after_group(p)
                + (d.distance - 1) * len(commits)
                + sum(1 for s in commits if s < c.seq)
            )
        else:
            where, side = c.op, Side.BEFORE
            n = sum(1 for s in commits[g + 1 :] if s < c.seq)
        self.put(
            where,
            side,
            S.WaitGroup,
            ("wait_group", p.role),
            lambda ins: S.WaitGroup(
                GroupUnit.WGMMA, ins.pending, p.role, tuple(ins.edges), self.prog.role_dims(p.role)
            ),
            [e],
            pending=n,
        )
