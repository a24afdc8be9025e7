"""What realizes a dependence (Cypress paper §4.2.6), by the kinds of its endpoints (a TMA
copy, a Tensor Core call, thread code), never by program shape: an mbarrier (full or
empty), ``wait_group``, ``wgmma.fence``, a proxy fence, a warp or named barrier and the
warps it spans, or nothing (program order, or implied by other synchronized edges).

:class:`Realization` is a part of :class:`cypressc.ir.hazards.Program`: it reads the
program's ``leaves``, ``sym`` and ``warp_threads`` / ``warpgroup_warps``.
"""

from __future__ import annotations

from cypressc.ir import nodes as N
from cypressc.ir.hazard_deps import LEVELS, Dep, Leaf
from cypressc.ir.kinds import Hazard, Need, OpKind, Via
from cypressc.ir.shapes import static
from cypressc.lang.kinds import Mem, Proc

__all__ = ["Realization"]


class Realization:
    """What realizes each dependence (a mixin of :class:`cypressc.ir.hazards.Program`)."""

    # -- what realizes a dependence ------------------------------------------------------------
    def extents(self, *leaves: Leaf) -> dict[Proc, int | None]:
        ext: dict[Proc, int | None] = {}
        for lf in leaves:
            for d in lf.op.dims:
                ext.setdefault(d.proc, static(d.extent))
        return ext

    def needs(self, d: Dep) -> tuple[Need, ...]:
        """What realizes ``d``: ``full`` / ``empty`` mbarrier, ``chain`` (wgmmas on one
        accumulator retire in order: nothing), ``wait_group``, ``fence_wgmma``, ``proxy``
        (fence.proxy.async), ``syncwarp`` / ``bar_sync`` (a broadcast over threads / warps),
        ``bulk`` (a TMA store's group), ``none`` (program order in one thread), or
        ``implied``: only through other synchronized edges.

        Memoized per dependence: the program does not change once built, and sync insertion
        and the verifier ask again for the same edges (FlashAttention-3: 675 edges, 31711
        questions)."""
        got = self._needs.get(d)
        if got is None:
            got = self._needs[d] = self._realize(d)
        return got

    def _realize(self, d: Dep) -> tuple[Need, ...]:
        p = self.leaves[d.src]
        if d.hazard == Hazard.END:
            return (Need.BULK,)
        c = self.leaves[d.dst]
        if d.via == Via.RING:  # the ring's empty mbarrier: readers release, the next fill waits
            return (Need.EMPTY,)
        if d.via == Via.TILE and c.kind == OpKind.TMA_LOAD:
            if (
                d.hazard == Hazard.WAW
            ):  # thread code writing bytes the copy shares: a TMA store of them
                return (Need.IMPLIED,)  # reads after the writes, and the copy waits for that read
            return (Need.IMPLIED,) if self._earlier_load(d) is not None else (Need.EMPTY,)
        if d.via == Via.TILE:
            retire = (Need.WAIT_GROUP,) if p.kind == OpKind.WGMMA else ()
            return (retire + ((self.barrier(d),) if d.scope else ())) or (Need.NONE,)
        if p.kind == OpKind.TMA_LOAD:
            return (
                (Need.FULL,)
                if d.hazard == Hazard.RAW and c.kind != OpKind.TMA_LOAD
                else (Need.IMPLIED,)
            )
        if c.kind == OpKind.TMA_LOAD:
            if (
                d.hazard == Hazard.WAR
                and d.tensor != d.other
                and d.via in (Via.SAME, Via.AFTER)
                and p.role != c.role
            ):
                return (Need.EMPTY,)  # bytes shared with an earlier tensor: its readers free them
            return (
                (Need.EMPTY,)
                if d.hazard == Hazard.WAR and d.via == Via.CARRIED
                else (Need.IMPLIED,)
            )
        if (
            p.kind == OpKind.TMA_STORE
            and c.kind == OpKind.THREAD
            and p.role == c.role
            and d.hazard == Hazard.WAR
            and d.via == Via.CARRIED
        ):
            # a later iteration's threads write the shared tile a TMA store (or reduce-add) of
            # an earlier one reads: the issuing thread retires the store's bulk group's reads
            # (cp.async.bulk.wait_group.read), then a barrier hands that on to the writers
            return (Need.BULK_READ,) + ((self.barrier(d),) if d.scope else ())
        if p.role != c.role or p.kind == OpKind.TMA_STORE:
            return (Need.IMPLIED,)
        out: list[Need] = []
        if p.kind == OpKind.WGMMA:
            if c.kind == OpKind.WGMMA and d.tensor == d.other == self._acc(p) == self._acc(c):
                # in one iteration the accumulator stays in the wgmmas' registers; across a loop's
                # back edge the C++ compiler may move it (phi copies), a register access that
                # PTX orders before the next wgmma only through wgmma.fence
                return (Need.FENCE_WGMMA,) if d.via == Via.CARRIED else (Need.CHAIN,)
            out.append(Need.WAIT_GROUP)
        elif c.kind == OpKind.WGMMA and d.mem == Mem.REGISTER:
            out.append(Need.FENCE_WGMMA)
        if (
            d.mem != Mem.REGISTER
            and d.hazard in (Hazard.RAW, Hazard.WAW)
            and p.kind == OpKind.THREAD
            and c.kind in (OpKind.TMA_STORE, OpKind.WGMMA)
        ):
            out.append(Need.PROXY)
        if d.scope:
            out.append(self.barrier(d))
        return tuple(out) or (Need.NONE,)

    def _acc(self, lf: Leaf) -> str | None:
        a = lf.op.args[1] if isinstance(lf.op, N.Call) and len(lf.op.args) > 1 else None
        return self.sym.root(a) if isinstance(a, (N.TRef, N.Piece)) else None

    def barrier(self, d: Dep) -> Need:
        """``syncwarp`` when the hazard spans only the threads of one warp, else ``bar_sync``."""
        ext = self.extents(self.leaves[d.src], self.leaves[d.dst])
        if d.scope == (Proc.THREAD,) and (
            Proc.WARP in ext or (ext.get(Proc.THREAD) or 1 << 30) <= self.warp_threads
        ):
            return Need.SYNCWARP
        return Need.BAR_SYNC

    def warps(self, d: Dep) -> int | None:
        """Warps a named barrier for ``d`` spans (None: a run-time extent)."""
        ext = self.extents(self.leaves[d.src], self.leaves[d.dst])
        if any(ext.get(lv, 1) is None for lv in LEVELS):
            return None
        per_wg = ext.get(Proc.WARP) or (
            -(-ext[Proc.THREAD] // self.warp_threads)
            if Proc.THREAD in ext
            else self.warpgroup_warps
        )
        if Proc.WARPGROUP in d.scope:
            return ext.get(Proc.WARPGROUP, 1) * per_wg
        return per_wg if (Proc.WARP in d.scope or Proc.WARP not in ext) else 1
