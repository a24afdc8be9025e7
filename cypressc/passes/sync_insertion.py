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
  named barrier (ids allocated in program order from 1; 0 is ``__syncthreads``);
* a TMA store → a bulk ``commit_group``, and ``wait_group 0`` at the end of the block;
* edges with no hazard, point-wise ones inside a thread, and edges implied by a path of
  synchronized ones → nothing.

Anything else is refused (E050) rather than left unsynchronized.  The result sets
``Module.synchronized``; :mod:`cypressc.ir.sync_verify` then checks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from cypressc.diagnostics import CypressError, Loc
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.hazards import Dep, Leaf, Program, implied, instances
from cypressc.ir.shapes import static
from cypressc.ir.subst import subst_expr, walk_ops

__all__ = ["SyncInsertion", "sync_insertion"]

_BEFORE = {S.MBarrier: 0, S.WaitGroup: 1, "proxy": 2, S.SyncWarp: 3, S.BarSync: 4, S.Wait: 5,
           S.ArriveExpectTx: 6, "wgmma": 7}
_AFTER = {S.CommitGroup: 0, S.WaitGroup: 1, S.SyncWarp: 2, S.Arrive: 3}
_BEFORE[S.Arrive] = 3.5  # a stage released before a thread op: after the wait_group that retired its readers


class _Refuse(Exception):
    pass


@dataclass
class _Ins:
    """A sync op waiting to be placed: merged with others of the same ``key`` at one anchor."""

    prio: int
    key: tuple
    build: Callable[["_Ins"], object]
    edges: list = field(default_factory=list)
    pending: int = 0


def _count(dims: tuple[N.Dim, ...]) -> int:
    n = instances(dims)
    if n is None:
        raise _Refuse("a run-time number of warpgroups, warps or threads")
    return n


class SyncInsertion:
    """The ``sync-insertion`` pass (paper §4.2.6) as an object: ``SyncInsertion()(module)``
    runs it on any module after warp specialization (hand-written IR included).

    ``mma_in_flight`` is the mapping's P: wgmma groups left in flight before a stage is
    released (at most ``stages - 1``: a deeper one would stall the producer forever).
    Raises :class:`CypressError` E050 for an edge it cannot synchronize yet.
    """

    name = "sync-insertion"
    section = "§4.2.6"

    def __init__(self, mma_in_flight: int = 1, warp_threads: int = 32, warpgroup_warps: int = 4) -> None:
        self.mma_in_flight, self.warp_threads, self.warpgroup_warps = mma_in_flight, warp_threads, warpgroup_warps

    @classmethod
    def from_context(cls, ctx) -> "SyncInsertion":
        """The knobs of the mapping's BLOCK instance and the machine's warp geometry."""
        block = ctx.tree.block_node()
        p = block.instance.mma_in_flight if block is not None else None
        lim = ctx.tree.machine.limits
        return cls(1 if p is None else p, lim.get("warp_threads", 32), lim.get("warpgroup_warps", 4))

    def __call__(self, m: N.Module, ctx=None) -> N.Module:
        block = ctx.tree.block_node() if ctx is not None else None
        loc = (ctx.tree.mapping.instance_loc(block.instance.instance, "instance") if block
               else Loc(ctx.mapping_path if ctx is not None else m.name))
        try:
            out = _Insert(m, self).run()
        except _Refuse as r:
            raise CypressError("E050", f"the CUDA backend cannot synchronize this program yet: {r}", loc,
                               hint="the IR passes before sync-insertion and `cypressc explain` still work; "
                               "see docs/language.md for the kernel shapes the backend generates") from None
        return _barrier_bytes(out, loc)


def _barrier_bytes(m: N.Module, loc: Loc) -> N.Module:
    """Grow the shared memory by the mbarriers beyond what resource allocation reserved
    (one full/empty pair per stage; separate channels need more); E046 past the limit."""
    need = 8 * sum(o.stages for o in walk_ops(m.body) if isinstance(o, S.MBarrier))
    have = m.attrs.get("barrier_bytes")
    if have is None or need <= have:
        return m
    total = m.attrs["smem_bytes"] + need - have
    limit = m.attrs.get("smem_limit")
    if limit is not None and total > limit:
        raise CypressError("E046", f"shared memory does not fit: the mbarriers of the pipeline's channels "
                           f"need {need} bytes, {total} in all, the limit is {limit}", loc,
                           hint="lower `pipeline:` or the tile sizes")
    return replace(m, attrs={**m.attrs, "smem_bytes": total, "barrier_bytes": need})


def sync_insertion(m: N.Module, ctx) -> N.Module:
    """The registered pass function: :class:`SyncInsertion` with the mapping's knobs."""
    return SyncInsertion.from_context(ctx)(m, ctx)


class _Insert:
    def __init__(self, m: N.Module, cfg: SyncInsertion) -> None:
        self.m, self.cfg = m, cfg
        self.prog = Program(m, cfg.warp_threads, cfg.warpgroup_warps)
        if self.prog.pfor:
            raise _Refuse("a parallel loop inside the block program")
        self.slots: dict[tuple[int, str], list[_Ins]] = {}
        self.bars: dict[str, S.BarIdx] = {}
        self.covered: list[Dep] = []
        self.next_id = 1
        self.groups: dict[str, tuple[int, int]] = {}  # wgmma event -> (id of its block, group index)
        self.commits: dict[int, list[int]] = {}  # id(block) -> seq of each commit's last wgmma
        self.blocks: dict[int, N.Block] = {}
        self.seqs = {lf.seq: lf for lf in self.prog.leaves.values()}
        self.ops = {id(lf.op): lf.op for lf in self.prog.leaves.values()}
        self.ops.update({id(lp): lp for lp, _, _ in self.prog.loops.values()})

    # -- placement ------------------------------------------------------------------------
    def put(self, anchor, side: str, prio, key: tuple, build, edges=(), pending: int = 0) -> None:
        """Place ``build(ins)`` before / after ``anchor`` (or at the ``end`` of a block),
        ordered there by ``prio`` (a sync op type, ``"proxy"`` or ``"wgmma"`` for fences);
        ops of one ``key`` merge their edges, and a wait_group keeps the smallest N."""
        order = prio if isinstance(prio, int) else (_BEFORE if side == "before" else _AFTER)[prio]
        slot = self.slots.setdefault((id(anchor), side), [])
        for ins in slot:
            if ins.key == key:
                ins.edges += [e for e in edges if e not in ins.edges]
                ins.pending = min(ins.pending, pending)
                return
        slot.append(_Ins(order, key, build, list(edges), pending))

    def anchor(self, d: Dep) -> tuple[object, str]:
        """Where the waiting side of ``d`` goes: before the consumer, or before the loop it
        enters."""
        c = self.prog.leaves[d.dst]
        if d.via == "entry":
            return self.prog.loops[d.loop][0], "before"
        return c.op, "before"

    # -- the pass -------------------------------------------------------------------------
    def run(self) -> N.Module:
        self._commits(self.m.body)
        deps = self.prog.deps()
        full: dict[str, list[Dep]] = {}
        empty: dict[str, list[Dep]] = {}
        later = []
        for d in deps:
            needs = self.prog.needs(d)
            if "implied" in needs:
                later.append(d)
                continue
            if "full" in needs:
                full.setdefault(d.src, []).append(d)
            elif "empty" in needs:
                empty.setdefault(d.dst, []).append(d)
            else:
                self._direct(d, needs)
            self.covered.append(d)
        self._channels(full, empty)
        for d in later:
            if not implied(d, self.covered):
                names = f"%{d.src} -> %{d.dst}"
                raise _Refuse(f"the {d.hazard.upper()} edge {names} on %{d.other} is not a TMA channel, a "
                              "stage release or thread-level synchronization inside one role")
            self.covered.append(d)
        body, _ = _prune(self._rebuild(self.m.body), {})
        return replace(self.m, body=body, synchronized=True)

    def _commits(self, b: N.Block) -> None:
        """One ``commit_group`` after each run of wgmmas of a role (thread code of the role ends
        a run; TMA copies, ops of other roles and scalar ops do not)."""
        self.blocks[id(b)] = b
        runs: dict[str, list[Leaf]] = {}
        seqs: list[int] = []

        def close(role: str) -> None:
            run = runs.pop(role, [])
            if run:
                last = run[-1]
                seqs.append(last.seq)
                for lf in run:
                    self.groups[lf.op.ev] = (id(b), len(seqs) - 1)
                self.put(last.op, "after", S.CommitGroup, ("commit", role),
                         lambda ins, ev=tuple(x.op.ev for x in run), lf=last: S.CommitGroup(
                             "wgmma", lf.role, ev, self.prog.role_dims(lf.role)))

        for op in b.ops:
            lf = self.prog.leaves.get(getattr(op, "ev", ""))
            if lf is not None and lf.kind == "wgmma":
                runs.setdefault(lf.role, []).append(lf)
            elif lf is not None and lf.kind == "thread":  # TMA issues leave the group open
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

    def _direct(self, d: Dep, needs: tuple[str, ...]) -> None:
        p, c = self.prog.leaves[d.src], self.prog.leaves.get(d.dst)
        e = d.edge()
        if "bulk" in needs:
            self.put(p.op, "after", S.CommitGroup, ("bulk", p.role),
                     lambda ins: S.CommitGroup("bulk", p.role, (p.op.ev,), p.op.dims))
            top = p.loops[0] if p.loops else p.op
            blk = next(b for b in self.blocks.values() if any(o is top for o in b.ops))
            self.put(blk, "end", 0, ("bulkwait", p.role),
                     lambda ins: S.WaitGroup("bulk", 0, p.role, tuple(ins.edges), p.op.dims), [e])
            return
        if "wait_group" in needs:
            self._wait_group(d, p, c, e)
        where, side = self.anchor(d)
        if "fence_wgmma" in needs and c.kind == "wgmma":
            # right before the wgmma, also for an edge into its loop: the fence of the accumulator
            # carried across iterations stands there and realizes both (one fence, not two)
            where, side = c.op, "before"
        if "fence_wgmma" in needs:
            self.put(where, side, "wgmma", ("fence", "wgmma", c.role),
                     lambda ins: S.Fence("wgmma", c.role, tuple(ins.edges), c.op.dims), [e])
        if "proxy" in needs:
            self.put(where, side, "proxy", ("fence", "proxy", p.role),
                     lambda ins: S.Fence("proxy_async", p.role, tuple(ins.edges), p.op.dims), [e])
        if "syncwarp" in needs:
            self.put(where, side, S.SyncWarp, ("syncwarp", p.role),
                     lambda ins: S.SyncWarp(p.role, tuple(ins.edges), p.op.dims), [e])
        if "bar_sync" in needs:
            warps = self.prog.warps(d)
            if warps is None:
                raise _Refuse(f"a named barrier over a run-time number of threads (%{d.src} -> %{d.dst})")
            dims = max(p.op.dims, c.op.dims, key=len)
            per_wg = "WARPGROUP" not in d.scope and any(x.proc == "WARPGROUP" for x in dims)
            self.put(where, side, S.BarSync, ("bar", p.role, d.scope),
                     lambda ins: self._bar_sync(ins, p.role, dims, per_wg, 32 * warps), [e])

    def _bar_sync(self, ins: _Ins, role: str, dims, per_wg: bool, threads: int) -> S.BarSync:
        base, n = self.next_id, 1
        ident: N.IExpr = N.IConst(base)
        if per_wg:
            n = _count(tuple(d for d in dims if d.proc == "WARPGROUP"))
            ident = N.ibin("+", N.IConst(base), N.IProc("WARPGROUP"))
        self.next_id += n
        if self.next_id > 16:
            raise _Refuse("more than 15 named barriers")
        return S.BarSync(ident, threads, role, tuple(ins.edges), dims)

    def _wait_group(self, d: Dep, p: Leaf, c: Leaf, e: S.Edge) -> None:
        if p.op.ev not in self.groups:
            raise _Refuse(f"wgmma %{p.op.ev} is in no commit group")
        bid, g = self.groups[p.op.ev]
        commits = self.commits[bid]
        if d.via == "after":
            lp = self.prog.loops[d.loop][0]
            if p.loops[-1] is not lp:
                raise _Refuse(f"a wgmma in a loop nested in loop %{d.loop}, read after it")
            where, side, n = lp, "after", self._after_group(p)
        elif d.via == "entry":
            lp = self.prog.loops[d.loop][0]
            where, side = lp, "before"
            n = sum(1 for s in commits[g + 1:] if s < self.prog.loops[d.loop][2])
        elif d.via == "carried":
            where, side = c.op, "before"
            n = self._after_group(p) + (d.distance - 1) * len(commits) + sum(1 for s in commits if s < c.seq)
        else:
            where, side = c.op, "before"
            n = sum(1 for s in commits[g + 1:] if s < c.seq)
        self.put(where, side, S.WaitGroup, ("wait_group", p.role),
                 lambda ins: S.WaitGroup("wgmma", ins.pending, p.role, tuple(ins.edges), self.prog.role_dims(p.role)),
                 [e], pending=n)

    # -- TMA channels -----------------------------------------------------------------------
    def _channels(self, full: dict[str, list[Dep]], empty: dict[str, list[Dep]]) -> None:
        """Group the TMA copies into channels: one loop, stage index, role and shape, the same
        wait point per consumer role and the same release point per reader role — sharing a
        barrier then never makes an op wait longer or a stage come back later."""
        groups: dict[tuple, list[Leaf]] = {}
        for ev in sorted(set(full) | set(empty), key=lambda x: self.prog.leaves[x].seq):
            lf = self.prog.leaves[ev]
            if len(lf.loops) > 1:
                raise _Refuse(f"TMA copy %{ev} in a nested loop")
            stage, depth = self.prog.stage(lf)
            waits = self._wait_points(lf, full.get(ev, []))
            release = self._release_points(lf, empty.get(ev, []), depth)
            key = (id(lf.block), lf.loops, lf.role, lf.op.dims, stage, depth, waits,
                   tuple(sorted((r, v[0], v[1], v[7]) for r, v in release.items())))
            groups.setdefault(key, []).append(lf)
        for (_, _, _, _, stage, depth, _, _), copies in groups.items():
            self._channel(copies, stage, depth, full, empty)

    def _wait_points(self, lf: Leaf, deps: list[Dep]) -> tuple:
        """(role, id of the op the wait goes before) per consumer role."""
        first: dict[str, tuple[int, object]] = {}
        for d in deps:
            c = self.prog.leaves[d.dst]
            if d.via == "after":
                if any(self.prog.leaves[x.dst].role == c.role and x.via == "same" for x in deps):
                    continue  # the role waited for the last phase inside the loop
                raise _Refuse(f"%{d.dst} reads TMA copy %{d.src} only after its loop")
            if d.via == "carried":
                raise _Refuse(f"%{d.dst} reads TMA copy %{d.src} of an earlier iteration")
            where, _ = self.anchor(d)
            seq = c.seq if where is c.op else self.prog.loops[d.loop][2]
            if c.role not in first or seq < first[c.role][0]:
                first[c.role] = (seq, where)
        return tuple(sorted((r, id(w)) for r, (_, w) in first.items()))

    def _release_points(self, lf: Leaf, deps: list[Dep], depth: int) -> dict[str, tuple]:
        """Per reader role: (steps the release lags, id of the op it follows, wait_group N,
        arrival dims, edges, that op, whether a wgmma read the stage)."""
        out: dict[str, tuple] = {}
        for role in sorted({self.prog.leaves[d.src].role for d in deps}):
            mine = [d for d in deps if self.prog.leaves[d.src].role == role]
            readers = [self.prog.leaves[d.src] for d in mine]
            if any(d.distance != depth for d in mine) or any(r.loops != lf.loops for r in readers):
                raise _Refuse(f"stage buffer of TMA copy %{lf.op.ev} reused at a distance other than its "
                              f"{depth} stage(s)")
            if any(r.kind not in ("wgmma", "thread") for r in readers):
                raise _Refuse(f"stage of TMA copy %{lf.op.ev} read by a TMA store")
            mma = [r for r in readers if r.kind == "wgmma"]
            lag = min(self.cfg.mma_in_flight, depth - 1) if mma else 0
            commits = self.commits[id(lf.block)]
            g = max((self.groups[r.op.ev][1] for r in mma), default=-1)
            early = self._retired_in_step(mma, g, readers) if mma else None
            side = "after"
            if early is not None:  # thread code of this step waits for the readers' groups anyway
                lag, at, side = 0, early.seq, "before"
                n = sum(1 for s in commits[g + 1:] if s < early.seq)
            else:
                if lag:  # a later step's last commit: its wait_group retires this step's groups
                    at = commits[-1]
                else:
                    at = max([r.seq for r in readers if r.kind == "thread"] + ([commits[g]] if mma else []))
                n = (sum(1 for s in commits if s <= at) - 1 - g + lag * len(commits)) if mma else 0
            anchor = self.seqs[at]
            unit = "WARP" if any(r.kind == "thread" for r in readers) else "WARPGROUP"
            out[role] = (lag, id(anchor.op), n, self._arrivals(role, unit), tuple(d.edge() for d in mine),
                         anchor, bool(mma), side)
        return out

    def _retired_in_step(self, mma: list[Leaf], g: int, readers: list[Leaf]) -> Leaf | None:
        """The first thread op of the step that waits (``wait_group``, a same-step flow edge)
        for the last group of the wgmmas reading a stage, after every thread reader of it:
        the stage is free right there, ``mma_in_flight`` does not hold it back (FlashAttention's
        K stage, free once S = Q·Kᵀ retired for the softmax)."""
        last = [r for r in mma if self.groups[r.op.ev][1] == g]
        cands = [self.prog.leaves[d.dst] for d in self.covered
                 if d.via == "same" and d.hazard == "raw" and d.src in {r.op.ev for r in last}
                 and d.dst in self.prog.leaves and self.prog.leaves[d.dst].kind == "thread"
                 and "wait_group" in self.prog.needs(d)]
        cands = [c for c in cands if c.role == mma[0].role and c.block is mma[0].block
                 and all(r.seq < c.seq for r in readers if r.kind == "thread")]
        return min(cands, key=lambda c: c.seq, default=None)

    def _arrivals(self, role: str, unit: str) -> tuple[N.Dim, ...]:
        """The role's dimensions down to ``unit``: one arrival per warpgroup (Tensor Core
        readers retire per warpgroup) or per warp (thread code, gathered by syncwarp)."""
        dims = self.prog.role_dims(role)
        depth = {"BLOCK": 0, "WARPGROUP": 1, "WARP": 2, "THREAD": 3}
        out = tuple(d for d in dims if depth.get(d.proc, 3) <= depth[unit])
        if unit == "WARP" and not any(d.proc == "WARP" for d in out):
            threads = next((static(d.extent) for d in dims if d.proc == "THREAD"), None)
            warps = self.cfg.warpgroup_warps if threads is None else -(-threads // self.cfg.warp_threads)
            out = out + (N.Dim(N.IConst(warps), "WARP"),)
        return out

    def _channel(self, copies: list[Leaf], stage: N.IExpr, depth: int, full, empty) -> None:
        """The full (and, with readers to release, empty) barrier of one channel."""
        first = copies[0]
        release = self._release_points(first, [d for c in copies for d in empty.get(c.op.ev, [])], depth)
        lp = first.loops[-1] if first.loops else None
        roots = "_".join(dict.fromkeys(self.prog.sym.root(c.op.dst) for c in copies))
        fname, ename = f"full_{roots}", f"empty_{roots}"
        fdeps = [d for c in copies for d in full.get(c.op.ev, [])]
        edeps = [d for c in copies for d in empty.get(c.op.ev, [])]
        nbytes = [self.prog.nbytes(c.op.dst) for c in copies]
        if None in nbytes:
            raise _Refuse(f"TMA copy %{first.op.ev} of a tile with a run-time shape")
        evs = tuple(c.op.ev for c in copies)
        decl = lp if lp is not None else first.op
        fe, ee = tuple(d.edge() for d in fdeps), tuple(d.edge() for d in edeps)
        wait_roles = sorted({self.prog.leaves[d.dst].role for d in fdeps})
        bdims = tuple(d for d in first.op.dims if d.proc == "BLOCK")
        self.put(decl, "before", S.MBarrier, ("mbar", fname),
                 lambda ins: S.MBarrier(fname, "full", depth, _count(first.op.dims), first.role,
                                        ",".join(wait_roles) or first.role, evs, fe, bdims))
        k = N.IVar(lp.var) if lp is not None else None
        phase = N.ibin("//", N.ibin("-", k, lp.lo), N.IConst(depth)) if lp is not None else N.IConst(0)
        for c in copies:
            self.bars[c.op.ev] = S.BarIdx(fname, stage)
        if edeps:
            count = sum(_count(r[3]) for r in release.values())
            self.put(decl, "before", S.MBarrier, ("mbar", ename),
                     lambda ins: S.MBarrier(ename, "empty", depth, count, ",".join(sorted(release)), first.role,
                                            evs, ee, bdims))
            self.put(first.op, "before", S.Wait, ("wait", ename),
                     lambda ins: S.Wait(ename, stage, N.ibin("%", N.ibin("+", phase, N.IConst(1)), N.IConst(2)),
                                        first.role, ee, first.op.dims))
        self.put(first.op, "before", S.ArriveExpectTx, ("atx", fname),
                 lambda ins: S.ArriveExpectTx(fname, stage, sum(nbytes), first.role, fe, first.op.dims))
        for role, w in self._wait_points(first, fdeps):
            self.put(self.ops[w], "before", S.Wait, ("wait", fname, role),
                     lambda ins, role=role: S.Wait(fname, stage, N.ibin("%", phase, N.IConst(2)), role,
                                                   tuple(d.edge() for d in fdeps
                                                         if self.prog.leaves[d.dst].role == role),
                                                   self.prog.role_dims(role)))
        for role, (lag, _, n, arr, edges, anchor, mma, side) in release.items():
            self._release(lp, stage, ename, role, lag, anchor, n, arr, edges, mma, side)

    def _release(self, lp: N.For, stage, ename: str, role: str, lag: int, anchor: Leaf, n: int, arr,
                 edges, mma: bool, side: str = "after") -> None:
        k = N.IVar(lp.var)
        rdims = self.prog.role_dims(role)
        warp = any(d.proc == "WARP" for d in arr)

        def at(where, side, it: N.IExpr, pending: int, when):
            if mma:
                self.put(where, side, S.WaitGroup, ("wait_group", role),
                         lambda ins: S.WaitGroup("wgmma", ins.pending, role, tuple(ins.edges), rdims),
                         edges, pending=pending)
            if warp:
                self.put(where, side, S.SyncWarp, ("syncwarp", role),
                         lambda ins: S.SyncWarp(role, tuple(ins.edges), rdims, when), edges)
            st = subst_expr(stage, {lp.var: it})
            self.put(where, side, S.Arrive, ("arrive", ename, role, st),
                     lambda ins: S.Arrive(ename, st, role, when, tuple(ins.edges), arr), edges)

        if lag == 0:
            at(anchor.op, side, k, n, None)
            return
        at(anchor.op, "after", N.ibin("-", k, N.IConst(lag)), n,
           S.Guard(k, N.ibin("+", lp.lo, N.IConst(lag))))
        for j in range(lag, 0, -1):  # the drain: the last `lag` stages, once every group retired
            it = N.IBin("-", lp.hi, N.IConst(j))  # unfolded: it names the loop's bound
            at(lp, "after", it, 0, S.Guard(it, lp.lo))

    # -- rebuilding the blocks ----------------------------------------------------------------
    def _emit(self, anchor, side: str) -> list:
        slot = sorted(self.slots.get((id(anchor), side), []), key=lambda i: i.prio)
        return [ins.build(ins) for ins in slot]

    def _rebuild(self, b: N.Block) -> N.Block:
        ops: list = []
        for op in b.ops:
            ops += self._emit(op, "before")
            if isinstance(op, N.Copy) and op.ev in self.bars:
                new = replace(op, bar=self.bars[op.ev])
            elif isinstance(op, (N.For, N.PFor)):
                new = replace(op, body=self._rebuild(op.body))
            else:
                new = op
            ops.append(new)
            ops += self._emit(op, "after")
        ops += self._emit(b, "end")
        return N.Block(tuple(ops), b.yields)


_MANY = 1 << 16  # "any number of groups may be in flight"


def _flow(b: N.Block, state: dict) -> dict:
    """Groups possibly in flight per (role, unit) after ``b`` (loops: any trip count)."""
    return _prune(b, state)[1]


def _join(a: dict, b: dict) -> dict:
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in set(a) | set(b)}


def _loop_entry(body: N.Block, before: dict) -> dict:
    """The state at the top of a loop body: before the loop, or after any iteration."""
    entry = dict(before)
    for _ in range(4):
        nxt = _join(before, _flow(body, entry))
        if nxt == entry:
            return entry
        entry = nxt
    return {k: (v if v == before.get(k, 0) else _MANY) for k, v in entry.items()}


def _prune(b: N.Block, state: dict) -> tuple[N.Block, dict]:
    """Drop each ``wait_group N`` that at most N groups can reach (an earlier wait already
    retired what it would): e.g. the wait after a loop whose every step ends waiting for 0."""
    ops = []
    state = dict(state)
    for op in b.ops:
        if isinstance(op, S.CommitGroup):
            key = (op.role, op.unit)
            state[key] = min(state.get(key, 0) + 1, _MANY)
        elif isinstance(op, S.WaitGroup):
            key = (op.role, op.unit)
            if state.get(key, 0) <= op.pending:
                continue
            state[key] = op.pending
        elif isinstance(op, (N.For, N.PFor)):
            body, out = _prune(op.body, _loop_entry(op.body, state))
            op = replace(op, body=body)
            state = _join(state, out)
        ops.append(op)
    return N.Block(tuple(ops), b.yields), state
