"""The TMA channels of ``sync-insertion`` (paper §4.2.6): full and empty mbarriers.

A TMA copy read by other ops gets a *full* mbarrier: ``arrive_expect_tx`` with the tile
bytes before the copy, a ``wait`` on parity ``((k - lo) / D) % 2`` before the first reader
of each role.  The write-after-read back edge from the readers of stage ``k`` to the copy
of stage ``k + D`` gets an *empty* mbarrier: the copy's role waits on it, each reader role
arrives once per warpgroup (Tensor Core readers) or once per warp after ``__syncwarp``
(thread code), ``P = mma_in_flight`` steps later after ``wait_group`` retired the reading
wgmma group (the last ``P`` releases drained after the loop), or right after a same-step
``wait_group`` thread code needs anyway.  Copies of one loop step share a channel when
sharing never makes an op wait longer or a stage come back later.  A copy outside the main
loop gets a one-stage empty barrier for the next tile (``_tile_channel``) and, when it fills
bytes an earlier tensor of the tile shares, one for this tile (``_freed_channel``).
"""

from __future__ import annotations

from dataclasses import dataclass

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.hazards import Dep, Leaf
from cypressc.ir.shapes import static
from cypressc.ir.subst import subst_expr
from cypressc.passes.sync_placement import Placement
from cypressc.passes.sync_placement import Refuse as _Refuse
from cypressc.passes.sync_placement import count_instances as _count

__all__ = ["TmaChannels"]


@dataclass(frozen=True)
class _ReleasePoint:
    """Where one reader role releases its stage of a TMA channel's empty barrier
    (:meth:`TmaChannels._release_points`)."""

    lag: int  # main-loop steps the release lags the reads (0: in the reads' own step)
    anchor: Leaf  # the op the release is placed at
    pending: int  # the wait_group N that retires the reading wgmma groups there
    arrivals: tuple[N.Dim, ...]  # the role's dims down to one arrival per warpgroup or warp
    edges: tuple  # the write-after-read edges it releases
    mma: bool  # whether a wgmma read the stage
    side: str  # "before" or "after" the anchor

    @property
    def place(self) -> tuple:
        """What copies sharing a channel must release alike: the lag, the anchor op, the side."""
        return (self.lag, id(self.anchor.op), self.side)


class TmaChannels(Placement):
    """The channel half of the sync-insertion pass: groups the TMA copies that need a full
    or empty barrier into channels and places their mbarrier ops.  The pass object sets
    what these methods read besides :class:`Placement`'s: ``cfg`` (its
    :class:`~cypressc.passes.sync_insertion.SyncInsertion` knobs), ``groups`` and ``commits``
    (the wgmma commit groups), ``covered`` (edges already synchronized), ``seqs`` and
    ``ops`` (leaves by program position, ops by id)."""

    def _channels(
        self,
        full: dict[str, list[Dep]],
        empty: dict[str, list[Dep]],
        tile: dict[str, list[Dep]] | None = None,
        ring: dict[str, list[Dep]] | None = None,
    ) -> None:
        """Group the TMA copies into channels: one loop, stage index, role and shape, the same
        wait point per consumer role and the same release point per reader role (in the loop,
        and into the next tile for ``tile``'s copies outside it) — sharing a barrier then never
        makes an op wait longer or a stage come back later."""
        tile, ring = tile or {}, ring or {}
        members = {lf.op.ev for ms in self.prog.rings().values() for lf in ms}
        groups: dict[tuple, list[Leaf]] = {}
        for ev in sorted(
            set(full) | set(empty) | set(tile) | set(ring), key=lambda x: self.prog.leaves[x].seq
        ):
            lf = self.prog.leaves[ev]
            if ev in members:  # on its ring's channel (_channel)
                continue
            if len(lf.loops) > 1:
                raise _Refuse(f"TMA copy %{ev} in a nested loop")
            stage, depth = self.prog.stage(lf)
            waits = self._wait_points(lf, full.get(ev, []))
            release = self._release_points(lf, empty.get(ev, []), depth)
            nxt = self._tile_release(tile.get(ev, []))
            key = (
                id(lf.block),
                lf.loops,
                lf.role,
                lf.op.dims,
                stage,
                depth,
                waits,
                tuple(sorted((r, *v.place) for r, v in release.items())),
                tuple(
                    sorted(
                        (r, tuple((id(a), sd, n) for a, sd, n, _, _ in v[0]))
                        for r, v in nxt.items()
                    )
                ),
            )
            groups.setdefault(key, []).append(lf)
        for (_, _, _, _, stage, depth, _, _, _), copies in groups.items():
            self._channel(copies, stage, depth, full, empty, ring)
            deps = [d for c in copies for d in tile.get(c.op.ev, [])]
            if deps:
                self._tile_channel(copies, deps)

    def _tile_release(self, deps: list[Dep]) -> dict[str, tuple]:
        """Per reader role of a copy outside the main loop (its ``tile`` edges): where every
        read of the tile is over.  When the last reader is a wgmma in the main loop whose group
        thread code of its step waits for anyway (FlashAttention-3's S = Q·Kᵀ before the
        mask), right there in the loop's last step — and after the loop when it runs no step —
        so the next tile's copy starts while this tile still works; else after the last reader
        (after the commit of its wgmma group), or after the loop that holds it.  Returns
        (places: [(anchor op, side, the ``wait_group`` N retiring every reading wgmma there or
        None, the guard or None, whether a TMA store's bulk group retires there first)], the
        arrival dims, the edges)."""
        out: dict[str, tuple] = {}
        for role in sorted({self.prog.leaves[d.src].role for d in deps}):
            mine = [d for d in deps if self.prog.leaves[d.src].role == role]
            readers = [self.prog.leaves[d.src] for d in mine]
            mma = [r for r in readers if r.kind == "wgmma"]
            for r in mma:
                if r.op.ev not in self.groups:
                    raise _Refuse(f"wgmma %{r.op.ev} is in no commit group")
            stores = [r for r in readers if r.kind == "tma_store"]
            if stores:  # a TMA store of bytes the copy shares (read after every other access)
                out[role] = self._after_store(mine, readers, stores, mma)
                continue
            if any(r.kind not in ("wgmma", "thread") for r in readers):
                raise _Refuse(
                    f"TMA copy %{mine[0].dst} outside the main loop read by a "
                    f"{next(r.kind for r in readers if r.kind not in ('wgmma', 'thread'))}"
                )
            if any(len(r.loops) > 1 for r in readers):
                raise _Refuse(
                    f"TMA copy %{mine[0].dst} outside the main loop read in a nested loop"
                )
            unit = "WARP" if any(r.kind == "thread" for r in readers) else "WARPGROUP"
            places = self._in_last_step(readers, mma) or [self._after_reads(readers, mma)]
            out[role] = (places, self._arrivals(role, unit), tuple(d.edge() for d in mine))
        return out

    def _after_store(
        self, deps: list[Dep], readers: list[Leaf], stores: list[Leaf], mma: list[Leaf]
    ) -> tuple:
        """The release of a copy's bytes that a TMA store of this tile reads too (a staged
        output tile sharing them, resource allocation): after the last store's bulk group
        retires its reads of shared memory (``wait_group bulk 0``, each warpgroup's storing
        thread), where every other read of the tile is over."""
        last = max(stores, key=lambda r: r.seq)
        if any(r.kind == "thread" for r in readers):  # one thread per warpgroup releases
            raise _Refuse(
                f"TMA copy %{deps[0].dst} outside the main loop: thread code reads the bytes a "
                "TMA store of this tile reads too"
            )
        if last.loops or any(r.seq > last.seq for r in readers):
            raise _Refuse(
                f"TMA copy %{deps[0].dst} outside the main loop: a read of its bytes after "
                f"the TMA store %{last.op.ev} of them"
            )
        place = (last.op, "after", self._pending_before(mma, last.seq, last.op), None, True)
        return ([place], self._arrivals(last.role, "WARPGROUP"), tuple(d.edge() for d in deps))

    def _pending_before(self, mma: list[Leaf], rseq: int, anchor) -> int | None:
        """The ``wait_group`` N at a point after the wgmmas ``mma`` (program position ``rseq``,
        or right after loop ``anchor``) that retires all of them: the fewest groups committed
        after one of theirs on every path there (None: no wgmma)."""
        pending = None
        for r in mma:
            if r.loops:  # the loop's last step: the groups it commits after this one
                n = self._after_group(r) if r.loops[0] is anchor else 0
            else:  # commits of the tile after this one and no later than the release
                bid, g = self.groups[r.op.ev]
                n = sum(1 for s in self.commits[bid][g + 1 :] if s <= rseq)
            pending = n if pending is None else min(pending, n)
        return pending

    def _after_reads(self, readers: list[Leaf], mma: list[Leaf]) -> tuple:
        last = max(readers, key=lambda r: r.seq)
        if last.loops:
            anchor, rseq = last.loops[0], self.prog.loops[last.loops[0].ev][2]
        elif last.kind == "wgmma":  # after the commit that closes its group
            anchor = self.seqs[self.commits[id(last.block)][self.groups[last.op.ev][1]]].op
            rseq = self.prog.leaves[anchor.ev].seq
        else:
            anchor, rseq = last.op, last.seq
        return (anchor, "after", self._pending_before(mma, rseq, anchor), None, False)

    def _in_last_step(self, readers: list[Leaf], mma: list[Leaf]) -> list[tuple] | None:
        inner = [r for r in readers if r.loops]
        if (
            not inner
            or any(r.kind != "wgmma" for r in inner)
            or max(readers, key=lambda r: r.seq) not in inner
        ):
            return None  # thread code in the loop, or a read after it: released after the reads
        lp = inner[0].loops[0]
        g = max(self.groups[r.op.ev][1] for r in inner)
        early = self._retired_in_step(inner, g, inner)
        if early is None:
            return None
        commits = self.commits[id(early.block)]
        n = sum(1 for s in commits[g + 1 :] if s < early.seq)
        top = [r for r in mma if not r.loops]
        last_step = S.Guard(N.IVar(lp.var), N.IBin("-", lp.hi, N.IConst(1)))
        no_step = S.Guard(lp.lo, lp.hi)
        return [
            (early.op, "before", n, last_step, False),
            (lp, "after", self._pending_before(top, self.prog.loops[lp.ev][2], lp), no_step, False),
        ]

    def _tile_channel(self, copies: list[Leaf], deps: list[Dep]) -> None:
        """The *empty* barrier of a channel outside the main loop: its copies wait for the
        release of the block's previous tile (parity 1: a tile's first wait passes at once,
        as a persistent block's first tile), its readers release it once their reads of the
        tile are over (:meth:`_tile_release`)."""
        roots = "_".join(dict.fromkeys(self.prog.sym.root(c.op.dst) for c in copies))
        self._once_per_tile(copies, deps, self._tile_release(deps), f"empty_{roots}", 1)

    def _freed_channel(self, copy: Leaf, deps: list[Dep]) -> None:
        """The *empty* barrier of a copy outside the main loop into bytes that an earlier
        tensor of the tile shares (resource allocation; ``deps``: that tensor's readers, WAR):
        each reader role releases it once its reads of the tile are over (in the main loop's last
        step, after the reads, or after a TMA store's bulk group), and the copy waits for this
        tile's release (parity 0).  FlashAttention-3's last V tile in the
        bytes of the peeled K tile: its copy waits for S = Q·K[0]ᵀ to retire.  The releases are
        placed as :meth:`_tile_release` places them."""
        release = self._tile_release(
            deps
        )  # where this tile's reads are over, as for the next tile's
        tops = [
            (self.prog.loops[r.loops[0].ev][2], r.loops[0]) if r.loops else (r.seq, r.op)
            for r in (self.prog.leaves[d.src] for d in deps)
        ]
        decl = min(tops, key=lambda t: t[0])[1]  # declared before its first release
        self._once_per_tile(
            [copy], deps, release, f"free_{self.prog.sym.root(copy.op.dst)}", 0, decl
        )

    def _once_per_tile(
        self,
        copies: list[Leaf],
        deps: list[Dep],
        release: dict[str, tuple],
        ename: str,
        parity: int,
        decl: N.For | N.Copy | N.Call | None = None,
    ) -> None:
        """A one-stage empty mbarrier ``ename`` (declared before ``decl``, else the first copy)
        the copies wait on (``parity`` 1: the previous tile's release, 0: this tile's) and
        ``release``'s reader roles arrive on once per tile."""
        first = copies[0]
        evs = tuple(c.op.ev for c in copies)
        ee = tuple(d.edge() for d in deps)
        bdims = tuple(d for d in first.op.dims if d.proc == "BLOCK")
        count = sum(_count(r[1]) for r in release.values())
        self.put(
            decl if decl is not None else first.op,
            "before",
            S.MBarrier,
            ("mbar", ename),
            lambda ins: S.MBarrier(
                ename,
                "empty",
                1,
                count,
                ",".join(sorted(release)),
                first.role,
                evs,
                ee,
                bdims,
                same_tile=parity == 0,
            ),
        )
        self.put(
            first.op,
            "before",
            S.Wait,
            ("wait", ename),
            lambda ins: S.Wait(ename, N.IConst(0), N.IConst(parity), first.role, ee, first.op.dims),
        )
        self._put_releases(release, ename, N.IConst(0))

    def _put_releases(self, release: dict[str, tuple], ename: str, stage: N.IExpr) -> None:
        """Each reader role's release of stage ``stage`` of empty mbarrier ``ename`` at the
        places :meth:`_tile_release` found: the ``wait_group`` retiring its reads there (a
        TMA store's bulk group first), a ``syncwarp`` when warps arrive, the arrival."""
        for role, (places, arr, edges) in release.items():
            rdims = self.prog.role_dims(role)
            for anchor, side, pending, when, bulk in places:
                if bulk:  # the TMA store's group: its reads of shared memory retired
                    self.put(
                        anchor,
                        side,
                        S.WaitGroup,
                        ("wait_group", "bulk", role),
                        lambda ins, role=role, rdims=rdims: S.WaitGroup(
                            "bulk", 0, role, tuple(ins.edges), rdims
                        ),
                        edges,
                    )
                if pending is not None:
                    self.put(
                        anchor,
                        side,
                        S.WaitGroup,
                        ("wait_group", role),
                        lambda ins, role=role, rdims=rdims: S.WaitGroup(
                            "wgmma", ins.pending, role, tuple(ins.edges), rdims
                        ),
                        edges,
                        pending=pending,
                    )
                if any(d.proc == "WARP" for d in arr):
                    self.put(
                        anchor,
                        side,
                        S.SyncWarp,
                        ("syncwarp", role),
                        lambda ins, role=role, rdims=rdims, when=when: S.SyncWarp(
                            role, tuple(ins.edges), rdims, when
                        ),
                        edges,
                    )
                self.put(
                    anchor,
                    side,
                    S.Arrive,
                    ("arrive", ename, role, stage),
                    lambda ins, role=role, arr=arr, when=when: S.Arrive(
                        ename, stage, role, when, tuple(ins.edges), arr
                    ),
                    edges,
                )

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

    def _release_points(self, lf: Leaf, deps: list[Dep], depth: int) -> dict[str, _ReleasePoint]:
        """Per reader role: where it releases the stage of copy ``lf`` (``deps``: the edges
        from its reads to the copy ``depth`` steps later)."""
        out: dict[str, _ReleasePoint] = {}
        for role in sorted({self.prog.leaves[d.src].role for d in deps}):
            mine = [d for d in deps if self.prog.leaves[d.src].role == role]
            readers = [self.prog.leaves[d.src] for d in mine]
            if any(d.distance != depth for d in mine) or any(r.loops != lf.loops for r in readers):
                raise _Refuse(
                    f"stage buffer of TMA copy %{lf.op.ev} reused at a distance other than its "
                    f"{depth} stage(s)"
                )
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
                n = sum(1 for s in commits[g + 1 :] if s < early.seq)
            else:
                if lag:  # a later step's last commit: its wait_group retires this step's groups
                    at = commits[-1]
                else:
                    at = max(
                        [r.seq for r in readers if r.kind == "thread"]
                        + ([commits[g]] if mma else [])
                    )
                n = (sum(1 for s in commits if s <= at) - 1 - g + lag * len(commits)) if mma else 0
            anchor = self.seqs[at]
            unit = "WARP" if any(r.kind == "thread" for r in readers) else "WARPGROUP"
            out[role] = _ReleasePoint(
                lag,
                anchor,
                n,
                self._arrivals(role, unit),
                tuple(d.edge() for d in mine),
                bool(mma),
                side,
            )
        return out

    def _retired_in_step(self, mma: list[Leaf], g: int, readers: list[Leaf]) -> Leaf | None:
        """The first thread op of the step that waits (``wait_group``, a same-step flow edge)
        for the last group of the wgmmas reading a stage, after every thread reader of it:
        the stage is free right there, ``mma_in_flight`` does not hold it back (FlashAttention's
        K stage, free once S = Q·Kᵀ retired for the softmax)."""
        last = [r for r in mma if self.groups[r.op.ev][1] == g]
        cands = [
            self.prog.leaves[d.dst]
            for d in self.covered
            if d.via == "same"
            and d.hazard == "raw"
            and d.src in {r.op.ev for r in last}
            and d.dst in self.prog.leaves
            and self.prog.leaves[d.dst].kind == "thread"
            and "wait_group" in self.prog.needs(d)
        ]
        cands = [
            c
            for c in cands
            if c.role == mma[0].role
            and c.block is mma[0].block
            and all(r.seq < c.seq for r in readers if r.kind == "thread")
        ]
        return min(cands, key=lambda c: c.seq, default=None)

    def _arrivals(self, role: str, unit: str) -> tuple[N.Dim, ...]:
        """The role's dimensions down to ``unit``: one arrival per warpgroup (Tensor Core
        readers retire per warpgroup) or per warp (thread code, gathered by syncwarp)."""
        dims = self.prog.role_dims(role)
        depth = {"BLOCK": 0, "WARPGROUP": 1, "WARP": 2, "THREAD": 3}
        out = tuple(d for d in dims if depth.get(d.proc, 3) <= depth[unit])
        if unit == "WARP" and not any(d.proc == "WARP" for d in out):
            threads = next((static(d.extent) for d in dims if d.proc == "THREAD"), None)
            warps = (
                self.cfg.warpgroup_warps
                if threads is None
                else -(-threads // self.cfg.warp_threads)
            )
            out = out + (N.Dim(N.IConst(warps), "WARP"),)
        return out

    def _channel(
        self, copies: list[Leaf], stage: N.IExpr, depth: int, full, empty, ring=None
    ) -> None:
        """The full (and, with readers to release, empty) barrier of one channel; a stage ring's
        members outside the loop (:meth:`_member`) take positions on the same barriers."""
        ring = ring or {}
        first = copies[0]
        release = self._release_points(
            first, [d for c in copies for d in empty.get(c.op.ev, [])], depth
        )
        lp = first.loops[-1] if first.loops else None
        rootset = list(dict.fromkeys(self.prog.sym.root(c.op.dst) for c in copies))
        members = (
            [x for r in rootset for x in self.prog.rings().get(r, [])] if lp is not None else []
        )
        if members and len(rootset) > 1:
            raise _Refuse(
                f"the stage ring of TMA copy %{first.op.ev}, with copies outside its loop, shares a "
                "channel with another ring"
            )
        roots = "_".join(rootset)
        fname, ename = f"full_{roots}", f"empty_{roots}"
        fdeps = [d for c in copies for d in full.get(c.op.ev, [])]
        edeps = [d for c in copies for d in empty.get(c.op.ev, [])]
        rdeps = [
            d for c in copies for d in ring.get(c.op.ev, [])
        ]  # members' readers: the ring's WAR
        mfull = [d for c in members for d in full.get(c.op.ev, [])]
        mring = [d for c in members for d in ring.get(c.op.ev, [])]
        nbytes = [self.prog.nbytes(c.op.dst) for c in copies]
        if None in nbytes:
            raise _Refuse(f"TMA copy %{first.op.ev} of a tile with a run-time shape")
        evs = tuple(c.op.ev for c in copies) + tuple(c.op.ev for c in members)
        pre = [x for x in members if x.seq < self.prog.loops[lp.ev][2]] if lp is not None else []
        decl = (
            pre[0].op if pre else lp if lp is not None else first.op
        )  # declared before the ring's first use
        fe = tuple(d.edge() for d in fdeps + mfull)
        ee = tuple(dict.fromkeys(d.edge() for d in edeps + rdeps + mring))
        wait_roles = sorted({self.prog.leaves[d.dst].role for d in fdeps})
        bdims = tuple(d for d in first.op.dims if d.proc == "BLOCK")
        self.put(
            decl,
            "before",
            S.MBarrier,
            ("mbar", fname),
            lambda ins: S.MBarrier(
                fname,
                "full",
                depth,
                _count(first.op.dims),
                first.role,
                ",".join(wait_roles) or first.role,
                evs,
                fe,
                bdims,
            ),
        )
        k = N.IVar(lp.var) if lp is not None else None
        phase = (
            N.ibin("//", N.ibin("-", k, lp.lo), N.IConst(depth)) if lp is not None else N.IConst(0)
        )
        if members:  # step k takes ring position k + (the members before the loop)
            phase = N.ibin("//", stage.a, N.IConst(depth))
        for c in copies:
            self.bars[c.op.ev] = S.BarIdx(fname, stage)
        if edeps or rdeps or mring:
            if not release:
                raise _Refuse(
                    f"the stage ring of TMA copy %{first.op.ev} has members outside its loop but "
                    "no release inside it"
                )
            count = sum(_count(r.arrivals) for r in release.values())
            self.put(
                decl,
                "before",
                S.MBarrier,
                ("mbar", ename),
                lambda ins: S.MBarrier(
                    ename,
                    "empty",
                    depth,
                    count,
                    ",".join(sorted(release)),
                    first.role,
                    evs,
                    ee,
                    bdims,
                ),
            )
            we = tuple(d.edge() for d in edeps + rdeps)
            self.put(
                first.op,
                "before",
                S.Wait,
                ("wait", ename),
                lambda ins: S.Wait(
                    ename,
                    stage,
                    N.ibin("%", N.ibin("+", phase, N.IConst(1)), N.IConst(2)),
                    first.role,
                    we,
                    first.op.dims,
                ),
            )
            for x in members:
                self._member(x, fname, ename, depth, count, full.get(x.op.ev, []), ring)
        own = tuple(d.edge() for d in fdeps)
        self.put(
            first.op,
            "before",
            S.ArriveExpectTx,
            ("atx", fname),
            lambda ins: S.ArriveExpectTx(fname, stage, sum(nbytes), first.role, own, first.op.dims),
        )
        for role, w in self._wait_points(first, fdeps):
            self.put(
                self.ops[w],
                "before",
                S.Wait,
                ("wait", fname, role),
                lambda ins, role=role: S.Wait(
                    fname,
                    stage,
                    N.ibin("%", phase, N.IConst(2)),
                    role,
                    tuple(d.edge() for d in fdeps if self.prog.leaves[d.dst].role == role),
                    self.prog.role_dims(role),
                ),
            )
        for role, r in release.items():
            self._release(
                lp,
                stage,
                ename,
                role,
                r.lag,
                r.anchor,
                r.pending,
                r.arrivals,
                r.edges,
                r.mma,
                r.side,
            )

    def _member(
        self,
        m: Leaf,
        fname: str,
        ename: str,
        depth: int,
        count: int,
        fdeps: list[Dep],
        ring: dict[str, list[Dep]],
    ) -> None:
        """A ring member's copy (a tile outside the loop at ring position ``pos``: its stage
        ``pos % D``, :mod:`cypressc.passes.rings`) on the ring's barriers: it waits on the empty
        barrier for the phase of its position (``(pos // D + 1) % 2``: its first fill passes at
        once) when an earlier read of the stage is a hazard (``ring`` edges into it), announces
        its bytes on the full barrier; each reader role waits for that phase before its first
        read and releases the stage where its reads are over (:meth:`_tile_release`'s places);
        the release must arrive as often as the loop's (``count``)."""
        stage, _ = self.prog.stage(m)
        if not (isinstance(stage, N.IBin) and stage.op == "%"):
            raise _Refuse(f"TMA copy %{m.op.ev} into a stage ring at no ring position")
        phase = N.IBin("//", stage.a, N.IConst(depth))  # unfolded: it names the loop's bound
        self.bars[m.op.ev] = S.BarIdx(fname, stage)
        into = ring.get(m.op.ev, [])
        if into:
            self.put(
                m.op,
                "before",
                S.Wait,
                ("wait", ename, stage),
                lambda ins: S.Wait(
                    ename,
                    stage,
                    N.IBin("%", N.IBin("+", phase, N.IConst(1)), N.IConst(2)),
                    m.role,
                    tuple(d.edge() for d in into),
                    m.op.dims,
                ),
            )
        nbytes = self.prog.nbytes(m.op.dst)
        if nbytes is None:
            raise _Refuse(f"TMA copy %{m.op.ev} of a tile with a run-time shape")
        self.put(
            m.op,
            "before",
            S.ArriveExpectTx,
            ("atx", fname, stage),
            lambda ins: S.ArriveExpectTx(
                fname, stage, nbytes, m.role, tuple(d.edge() for d in fdeps), m.op.dims
            ),
        )
        for role, w in self._wait_points(m, fdeps):
            self.put(
                self.ops[w],
                "before",
                S.Wait,
                ("wait", fname, role, stage),
                lambda ins, role=role: S.Wait(
                    fname,
                    stage,
                    N.IBin("%", phase, N.IConst(2)),
                    role,
                    tuple(d.edge() for d in fdeps if self.prog.leaves[d.dst].role == role),
                    self.prog.role_dims(role),
                ),
            )
        readers = {d.dst for d in fdeps}
        release = self._tile_release([d for ds in ring.values() for d in ds if d.src in readers])
        if sum(_count(r[1]) for r in release.values()) != count:
            raise _Refuse(
                f"the readers of TMA copy %{m.op.ev} release its ring stage with other arrivals "
                "than the loop's"
            )
        self._put_releases(release, ename, stage)

    def _release(
        self,
        lp: N.For,
        stage,
        ename: str,
        role: str,
        lag: int,
        anchor: Leaf,
        n: int,
        arr,
        edges,
        mma: bool,
        side: str = "after",
    ) -> None:
        k = N.IVar(lp.var)
        rdims = self.prog.role_dims(role)
        warp = any(d.proc == "WARP" for d in arr)

        def at(where, side, it: N.IExpr, pending: int, when):
            if mma:
                self.put(
                    where,
                    side,
                    S.WaitGroup,
                    ("wait_group", role),
                    lambda ins: S.WaitGroup("wgmma", ins.pending, role, tuple(ins.edges), rdims),
                    edges,
                    pending=pending,
                )
            if warp:
                self.put(
                    where,
                    side,
                    S.SyncWarp,
                    ("syncwarp", role),
                    lambda ins: S.SyncWarp(role, tuple(ins.edges), rdims, when),
                    edges,
                )
            st = subst_expr(stage, {lp.var: it})
            self.put(
                where,
                side,
                S.Arrive,
                ("arrive", ename, role, st),
                lambda ins: S.Arrive(ename, st, role, when, tuple(ins.edges), arr),
                edges,
            )

        if lag == 0:
            at(anchor.op, side, k, n, None)
            return
        at(
            anchor.op,
            "after",
            N.ibin("-", k, N.IConst(lag)),
            n,
            S.Guard(k, N.ibin("+", lp.lo, N.IConst(lag))),
        )
        for j in range(lag, 0, -1):  # the drain: the last `lag` stages, once every group retired
            it = N.IBin("-", lp.hi, N.IConst(j))  # unfolded: it names the loop's bound
            at(lp, "after", it, 0, S.Guard(it, lp.lo))
