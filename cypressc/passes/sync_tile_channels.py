"""The one-stage empty barriers of TMA copies outside the main loop (Cypress paper §4.2.6):
the next tile's copy waits for this tile's readers (``_tile_channel``: a persistent block,
FlashAttention's Q panel), and a copy into bytes an earlier tensor of the tile shares waits
for that tensor's readers (``_freed_channel``); where each reader role's reads of the tile
are over (after the retiring ``wait_group``, a TMA store's bulk group, a ``syncwarp``) and
the arrivals placed there.

:class:`TileChannels` is a part of :class:`cypressc.passes.sync_channels.TmaChannels`.
"""

from __future__ import annotations

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.hazard_deps import Dep, Leaf
from cypressc.ir.kinds import BarrierKind, GroupUnit, OpKind, Role
from cypressc.lang.kinds import Proc
from cypressc.passes.sync_placement import Refuse as _Refuse
from cypressc.passes.sync_placement import Side
from cypressc.passes.sync_placement import count_instances as _count

__all__ = ["TileChannels"]


class TileChannels:
    """Channels of copies outside the main loop (a part of
    :class:`cypressc.passes.sync_channels.TmaChannels`)."""

    def _tile_release(self, deps: list[Dep]) -> dict[Role, tuple]:
        """Per reader role of a copy outside the main loop (its ``tile`` edges): where every
        read of the tile is over.  When the last reader is a wgmma in the main loop whose group
        thread code of its step waits for anyway (FlashAttention-3's S = Q·Kᵀ before the
        mask), right there in the loop's last step — and after the loop when it runs no step —
        so the next tile's copy starts while this tile still works; else after the last reader
        (after the commit of its wgmma group), or after the loop that holds it.  Returns
        (places: [(anchor op, side, the ``wait_group`` N retiring every reading wgmma there or
        None, the guard or None, whether a TMA store's bulk group retires there first)], the
        arrival dims, the edges)."""
        out: dict[Role, tuple] = {}
        for role in sorted({self.prog.leaves[d.src].role for d in deps}):
            mine = [d for d in deps if self.prog.leaves[d.src].role == role]
            readers = [self.prog.leaves[d.src] for d in mine]
            mma = [r for r in readers if r.kind == OpKind.WGMMA]
            for r in mma:
                if r.op.ev not in self.groups:
                    raise _Refuse(f"wgmma %{r.op.ev} is in no commit group")
            stores = [r for r in readers if r.kind == OpKind.TMA_STORE]
            if stores:  # a TMA store of bytes the copy shares (read after every other access)
                out[role] = self._after_store(mine, readers, stores, mma)
                continue
            if any(r.kind not in (OpKind.WGMMA, OpKind.THREAD) for r in readers):
                raise _Refuse(
                    f"TMA copy %{mine[0].dst} outside the main loop read by a "
                    f"{next(r.kind for r in readers if r.kind not in (OpKind.WGMMA, OpKind.THREAD))}"
                )
            if any(len(r.loops) > 1 for r in readers):
                raise _Refuse(
                    f"TMA copy %{mine[0].dst} outside the main loop read in a nested loop"
                )
            unit = Proc.WARP if any(r.kind == OpKind.THREAD for r in readers) else Proc.WARPGROUP
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
        if any(r.kind == OpKind.THREAD for r in readers):  # one thread per warpgroup releases
            raise _Refuse(
                f"TMA copy %{deps[0].dst} outside the main loop: thread code reads the bytes a "
                "TMA store of this tile reads too"
            )
        if last.loops or any(r.seq > last.seq for r in readers):
            raise _Refuse(
                f"TMA copy %{deps[0].dst} outside the main loop: a read of its bytes after "
                f"the TMA store %{last.op.ev} of them"
            )
        place = (last.op, Side.AFTER, self._pending_before(mma, last.seq, last.op), None, True)
        return ([place], self._arrivals(last.role, Proc.WARPGROUP), tuple(d.edge() for d in deps))

    def _after_reads(self, readers: list[Leaf], mma: list[Leaf]) -> tuple:
        last = max(readers, key=lambda r: r.seq)
        if last.loops:
            anchor, rseq = last.loops[0], self.prog.loops[last.loops[0].ev][2]
        elif last.kind == OpKind.WGMMA:  # after the commit that closes its group
            anchor = self.seqs[self.commits[id(last.block)][self.groups[last.op.ev][1]]].op
            rseq = self.prog.leaves[anchor.ev].seq
        else:
            anchor, rseq = last.op, last.seq
        return (anchor, Side.AFTER, self._pending_before(mma, rseq, anchor), None, False)

    def _in_last_step(self, readers: list[Leaf], mma: list[Leaf]) -> list[tuple] | None:
        inner = [r for r in readers if r.loops]
        if (
            not inner
            or any(r.kind != OpKind.WGMMA for r in inner)
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
            (early.op, Side.BEFORE, n, last_step, False),
            (
                lp,
                Side.AFTER,
                self._pending_before(top, self.prog.loops[lp.ev][2], lp),
                no_step,
                False,
            ),
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
        release: dict[Role, tuple],
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
        bdims = tuple(d for d in first.op.dims if d.proc == Proc.BLOCK)
        count = sum(_count(r[1]) for r in release.values())
        self.put(
            decl if decl is not None else first.op,
            Side.BEFORE,
            S.MBarrier,
            ("mbar", ename),
            lambda ins: S.MBarrier(
                ename,
                BarrierKind.EMPTY,
                1,
                count,
                tuple(sorted(release)),
                (first.role,),
                evs,
                ee,
                bdims,
                same_tile=parity == 0,
            ),
        )
        self.put(
            first.op,
            Side.BEFORE,
            S.Wait,
            ("wait", ename),
            lambda ins: S.Wait(ename, N.IConst(0), N.IConst(parity), first.role, ee, first.op.dims),
        )
        self._put_releases(release, ename, N.IConst(0))

    def _put_releases(self, release: dict[Role, tuple], ename: str, stage: N.IExpr) -> None:
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
                        ("wait_group", GroupUnit.BULK, role),
                        lambda ins, role=role, rdims=rdims: S.WaitGroup(
                            GroupUnit.BULK, 0, role, tuple(ins.edges), rdims
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
                            GroupUnit.WGMMA, ins.pending, role, tuple(ins.edges), rdims
                        ),
                        edges,
                        pending=pending,
                    )
                if any(d.proc == Proc.WARP for d in arr):
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
