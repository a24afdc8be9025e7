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
from cypressc.ir.shapes import static

__all__ = ["Realization"]


class Realization:
    """What realizes each dependence (a mixin of :class:`cypressc.ir.hazards.Program`)."""

    # -- what realizes a dependence ------------------------------------------------------------
    def extents(self, *leaves: Leaf) -> dict[str, int | None]:
        ext: dict[str, int | None] = {}
        for lf in leaves:
            for d in lf.op.dims:
                ext.setdefault(d.proc, static(d.extent))
        return ext

    def needs(self, d: Dep) -> tuple[str, ...]:
        """What realizes ``d``: ``full`` / ``empty`` mbarrier, ``chain`` (wgmmas on one
        accumulator retire in order: nothing), ``wait_group``, ``fence_wgmma``, ``proxy``
        (fence.proxy.async), ``syncwarp`` / ``bar_sync`` (a broadcast over threads / warps),
        ``bulk`` (a TMA store's group), ``none`` (program order in one thread), or
        ``implied``: only through other synchronized edges."""
        p = self.leaves[d.src]
        if d.hazard == "end":
            return ("bulk",)
        c = self.leaves[d.dst]
        if d.via == "ring":  # the ring's empty mbarrier: readers release, the next fill waits
            return ("empty",)
        if d.via == "tile" and c.kind == "tma_load":
            if d.hazard == "waw":  # thread code writing bytes the copy shares: a TMA store of them
                return ("implied",)  # reads after the writes, and the copy waits for that read
            return ("implied",) if self._earlier_load(d) is not None else ("empty",)
        if d.via == "tile":
            retire = ("wait_group",) if p.kind == "wgmma" else ()
            return (retire + ((self.barrier(d),) if d.scope else ())) or ("none",)
        if p.kind == "tma_load":
            return ("full",) if d.hazard == "raw" and c.kind != "tma_load" else ("implied",)
        if c.kind == "tma_load":
            if (
                d.hazard == "war"
                and d.tensor != d.other
                and d.via in ("same", "after")
                and p.role != c.role
            ):
                return ("empty",)  # bytes shared with an earlier tensor: its readers free them
            return ("empty",) if d.hazard == "war" and d.via == "carried" else ("implied",)
        if p.role != c.role or p.kind == "tma_store":
            return ("implied",)
        out: list[str] = []
        if p.kind == "wgmma":
            if c.kind == "wgmma" and d.tensor == d.other == self._acc(p) == self._acc(c):
                # in one iteration the accumulator stays in the wgmmas' registers; across a loop's
                # back edge the C++ compiler may move it (phi copies), a register access that
                # PTX orders before the next wgmma only through wgmma.fence
                return ("fence_wgmma",) if d.via == "carried" else ("chain",)
            out.append("wait_group")
        elif c.kind == "wgmma" and d.mem == "REGISTER":
            out.append("fence_wgmma")
        if (
            d.mem != "REGISTER"
            and d.hazard in ("raw", "waw")
            and p.kind == "thread"
            and c.kind in ("tma_store", "wgmma")
        ):
            out.append("proxy")
        if d.scope:
            out.append(self.barrier(d))
        return tuple(out) or ("none",)

    def _acc(self, lf: Leaf) -> str | None:
        a = lf.op.args[1] if isinstance(lf.op, N.Call) and len(lf.op.args) > 1 else None
        return self.sym.root(a) if isinstance(a, (N.TRef, N.Piece)) else None

    def barrier(self, d: Dep) -> str:
        """``syncwarp`` when the hazard spans only the threads of one warp, else ``bar_sync``."""
        ext = self.extents(self.leaves[d.src], self.leaves[d.dst])
        if d.scope == ("THREAD",) and (
            "WARP" in ext or (ext.get("THREAD") or 1 << 30) <= self.warp_threads
        ):
            return "syncwarp"
        return "bar_sync"

    def warps(self, d: Dep) -> int | None:
        """Warps a named barrier for ``d`` spans (None: a run-time extent)."""
        ext = self.extents(self.leaves[d.src], self.leaves[d.dst])
        if any(ext.get(lv, 1) is None for lv in LEVELS):
            return None
        per_wg = ext.get("WARP") or (
            -(-ext["THREAD"] // self.warp_threads) if "THREAD" in ext else self.warpgroup_warps
        )
        if "WARPGROUP" in d.scope:
            return ext.get("WARPGROUP", 1) * per_wg
        return per_wg if ("WARP" in d.scope or "WARP" not in ext) else 1
