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

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.hazard_deps import Dep, Leaf
from cypressc.ir.kinds import BarrierKind, GroupUnit, Role
from cypressc.ir.subst import subst_expr
from cypressc.lang.kinds import Proc
from cypressc.passes.sync_placement import Placement, Side
from cypressc.passes.sync_placement import Refuse as _Refuse
from cypressc.passes.sync_placement import count_instances as _count
from cypressc.passes.sync_releases import ReleasePoints
from cypressc.passes.sync_tile_channels import TileChannels

__all__ = ["TmaChannels"]


class TmaChannels(TileChannels, ReleasePoints, Placement):
    """The channel half of the sync-insertion pass: groups the TMA copies that need a full
    or empty barrier into channels and places their mbarrier ops.  The pass object sets
    what these methods read besides :class:`Placement`'s: ``cfg`` (its
    :class:`~cypressc.passes.sync_insertion.SyncInsertion` knobs), ``groups`` and ``commits``
    (the wgmma commit groups), ``covered`` (edges already synchronized), ``seqs`` and
    ``ops`` (leaves by program position, ops by id).

    Channels of copies outside the main loop and the readers' wait and release points
    are its parts in :mod:`cypressc.passes.sync_tile_channels` and
    :mod:`cypressc.passes.sync_releases`."""

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
        bdims = tuple(d for d in first.op.dims if d.proc == Proc.BLOCK)
        self.put(
            decl,
            Side.BEFORE,
            S.MBarrier,
            ("mbar", fname),
            lambda ins: S.MBarrier(
                fname,
                BarrierKind.FULL,
                depth,
                _count(first.op.dims),
                (first.role,),
                tuple(wait_roles) or (first.role,),
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
                Side.BEFORE,
                S.MBarrier,
                ("mbar", ename),
                lambda ins: S.MBarrier(
                    ename,
                    BarrierKind.EMPTY,
                    depth,
                    count,
                    tuple(sorted(release)),
                    (first.role,),
                    evs,
                    ee,
                    bdims,
                ),
            )
            we = tuple(d.edge() for d in edeps + rdeps)
            self.put(
                first.op,
                Side.BEFORE,
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
            Side.BEFORE,
            S.ArriveExpectTx,
            ("atx", fname),
            lambda ins: S.ArriveExpectTx(fname, stage, sum(nbytes), first.role, own, first.op.dims),
        )
        for role, w in self._wait_points(first, fdeps):
            self.put(
                self.ops[w],
                Side.BEFORE,
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
                Side.BEFORE,
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
            Side.BEFORE,
            S.ArriveExpectTx,
            ("atx", fname, stage),
            lambda ins: S.ArriveExpectTx(
                fname, stage, nbytes, m.role, tuple(d.edge() for d in fdeps), m.op.dims
            ),
        )
        for role, w in self._wait_points(m, fdeps):
            self.put(
                self.ops[w],
                Side.BEFORE,
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
        role: Role,
        lag: int,
        anchor: Leaf,
        n: int,
        arr,
        edges,
        mma: bool,
        side: Side = Side.AFTER,
    ) -> None:
        k = N.IVar(lp.var)
        rdims = self.prog.role_dims(role)
        warp = any(d.proc == Proc.WARP for d in arr)

        def at(where, side, it: N.IExpr, pending: int, when):
            if mma:
                self.put(
                    where,
                    side,
                    S.WaitGroup,
                    ("wait_group", role),
                    lambda ins: S.WaitGroup(
                        GroupUnit.WGMMA, ins.pending, role, tuple(ins.edges), rdims
                    ),
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
            Side.AFTER,
            N.ibin("-", k, N.IConst(lag)),
            n,
            S.Guard(k, N.ibin("+", lp.lo, N.IConst(lag))),
        )
        for j in range(lag, 0, -1):  # the drain: the last `lag` stages, once every group retired
            it = N.IBin("-", lp.hi, N.IConst(j))  # unfolded: it names the loop's bound
            at(lp, Side.AFTER, it, 0, S.Guard(it, lp.lo))
