"""Where the readers of a TMA channel's stage wait and release it (Cypress paper §4.2.6):
the wait point of each consumer role, and per reader role the op the empty-barrier arrival
follows, how many steps it lags (``mma_in_flight``), the ``wait_group`` N that retires the
reading wgmmas there, and the arrival dimensions (once per warpgroup for Tensor Core
readers, once per warp after ``__syncwarp`` for thread code).

:class:`ReleasePoints` is a part of :class:`cypressc.passes.sync_channels.TmaChannels`.
"""

from __future__ import annotations

from dataclasses import dataclass

from cypressc.ir import nodes as N
from cypressc.ir.hazard_deps import Dep, Leaf
from cypressc.ir.kinds import Hazard, Need, OpKind, Role, Via
from cypressc.ir.shapes import static
from cypressc.lang.kinds import Proc
from cypressc.passes.sync_placement import Refuse as _Refuse
from cypressc.passes.sync_placement import Side

__all__ = ["ReleasePoints", "ReleasePoint"]


@dataclass(frozen=True)
class ReleasePoint:
    """Where one reader role releases its stage of a TMA channel's empty barrier
    (:meth:`ReleasePoints._release_points`)."""

    lag: int  # main-loop steps the release lags the reads (0: in the reads' own step)
    anchor: Leaf  # the op the release is placed at
    pending: int  # the wait_group N that retires the reading wgmma groups there
    arrivals: tuple[N.Dim, ...]  # the role's dims down to one arrival per warpgroup or warp
    edges: tuple  # the write-after-read edges it releases
    mma: bool  # whether a wgmma read the stage
    side: Side  # before or after the anchor

    @property
    def place(self) -> tuple:
        """What copies sharing a channel must release alike: the lag, the anchor op, the side."""
        return (self.lag, id(self.anchor.op), self.side)


class ReleasePoints:
    """Wait and release points of a channel's readers (a part of
    :class:`cypressc.passes.sync_channels.TmaChannels`)."""

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

    def _wait_points(self, lf: Leaf, deps: list[Dep]) -> tuple:
        """(role, id of the op the wait goes before) per consumer role."""
        first: dict[Role, tuple[int, object]] = {}
        for d in deps:
            c = self.prog.leaves[d.dst]
            if d.via == Via.AFTER:
                if any(self.prog.leaves[x.dst].role == c.role and x.via == Via.SAME for x in deps):
                    continue  # the role waited for the last phase inside the loop
                raise _Refuse(f"%{d.dst} reads TMA copy %{d.src} only after its loop")
            if d.via == Via.CARRIED:
                raise _Refuse(f"%{d.dst} reads TMA copy %{d.src} of an earlier iteration")
            where, _ = self.anchor(d)
            seq = c.seq if where is c.op else self.prog.loops[d.loop][2]
            if c.role not in first or seq < first[c.role][0]:
                first[c.role] = (seq, where)
        return tuple(sorted((r, id(w)) for r, (_, w) in first.items()))

    def _release_points(self, lf: Leaf, deps: list[Dep], depth: int) -> dict[Role, ReleasePoint]:
        """Per reader role: where it releases the stage of copy ``lf`` (``deps``: the edges
        from its reads to the copy ``depth`` steps later)."""
        out: dict[Role, ReleasePoint] = {}
        for role in sorted({self.prog.leaves[d.src].role for d in deps}):
            mine = [d for d in deps if self.prog.leaves[d.src].role == role]
            readers = [self.prog.leaves[d.src] for d in mine]
            if any(d.distance != depth for d in mine) or any(r.loops != lf.loops for r in readers):
                raise _Refuse(
                    f"stage buffer of TMA copy %{lf.op.ev} reused at a distance other than its "
                    f"{depth} stage(s)"
                )
            if any(r.kind not in (OpKind.WGMMA, OpKind.THREAD) for r in readers):
                raise _Refuse(f"stage of TMA copy %{lf.op.ev} read by a TMA store")
            mma = [r for r in readers if r.kind == OpKind.WGMMA]
            lag = min(self.cfg.mma_in_flight, depth - 1) if mma else 0
            commits = self.commits[id(lf.block)]
            g = max((self.groups[r.op.ev][1] for r in mma), default=-1)
            early = self._retired_in_step(mma, g, readers) if mma else None
            side = Side.AFTER
            if early is not None:  # thread code of this step waits for the readers' groups anyway
                lag, at, side = 0, early.seq, Side.BEFORE
                n = sum(1 for s in commits[g + 1 :] if s < early.seq)
            else:
                if lag:  # a later step's last commit: its wait_group retires this step's groups
                    at = commits[-1]
                else:
                    at = max(
                        [r.seq for r in readers if r.kind == OpKind.THREAD]
                        + ([commits[g]] if mma else [])
                    )
                n = (sum(1 for s in commits if s <= at) - 1 - g + lag * len(commits)) if mma else 0
            anchor = self.seqs[at]
            unit = Proc.WARP if any(r.kind == OpKind.THREAD for r in readers) else Proc.WARPGROUP
            out[role] = ReleasePoint(
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
            if d.via == Via.SAME
            and d.hazard == Hazard.RAW
            and d.src in {r.op.ev for r in last}
            and d.dst in self.prog.leaves
            and self.prog.leaves[d.dst].kind == OpKind.THREAD
            and Need.WAIT_GROUP in self.prog.needs(d)
        ]
        cands = [
            c
            for c in cands
            if c.role == mma[0].role
            and c.block is mma[0].block
            and all(r.seq < c.seq for r in readers if r.kind == OpKind.THREAD)
        ]
        return min(cands, key=lambda c: c.seq, default=None)

    def _arrivals(self, role: Role, unit: Proc) -> tuple[N.Dim, ...]:
        """The role's dimensions down to ``unit``: one arrival per warpgroup (Tensor Core
        readers retire per warpgroup) or per warp (thread code, gathered by syncwarp)."""
        dims = self.prog.role_dims(role)
        depth = {Proc.BLOCK: 0, Proc.WARPGROUP: 1, Proc.WARP: 2, Proc.THREAD: 3}
        out = tuple(d for d in dims if depth.get(d.proc, 3) <= depth[unit])
        if unit == Proc.WARP and not any(d.proc == Proc.WARP for d in out):
            threads = next((static(d.extent) for d in dims if d.proc == Proc.THREAD), None)
            warps = (
                self.cfg.warpgroup_warps
                if threads is None
                else -(-threads // self.cfg.warp_threads)
            )
            out = out + (N.Dim(N.IConst(warps), Proc.WARP),)
        return out
