"""The hazards of a stage ring with members outside its loop (Cypress paper §4.2.5's
pipelining, with warp specialization's ring joins, :mod:`cypressc.passes.rings`):
FlashAttention-3's peeled K tile in the key loop's K ring.  Which ring positions a leaf
can touch, the WAR dependences between the ring's readers and the copies that refill it
(``via = "ring"``), and which event edges cross position classes (no hazard).

:class:`RingHazards` is a part of :class:`cypressc.ir.hazards.Program`: it reads the
program's ``leaves``, ``loops``, ``stages`` and ``sym``.
"""

from __future__ import annotations

from cypressc.ir import nodes as N
from cypressc.ir.hazard_deps import Dep, Leaf
from cypressc.ir.kinds import Hazard, OpKind, Via
from cypressc.lang.kinds import Mem

__all__ = ["RingHazards"]


class RingHazards:
    """Stage rings with members (a mixin of :class:`cypressc.ir.hazards.Program`)."""

    # -- stage rings with members outside their loop (warp specialization's ring joins) ------
    def ring_member(self, lf: Leaf) -> bool:
        """A TMA copy outside every loop into a stage ring (a peeled step's tile that joined
        the loop's ring, :mod:`cypressc.passes.rings`)."""
        return (
            lf.kind == OpKind.TMA_LOAD and not lf.loops and self.sym.root(lf.op.dst) in self.stages
        )

    def rings(self) -> dict[str, list[Leaf]]:
        """Stage ring (root) -> its member copies outside the loop, in program order."""
        if self._rings is None:
            self._rings = {}
            for lf in sorted(self.leaves.values(), key=lambda x: x.seq):
                if self.ring_member(lf):
                    self._rings.setdefault(self.sym.root(lf.op.dst), []).append(lf)
        return self._rings

    def ring_loop(self, root: str) -> N.For | None:
        """The loop whose steps fill stage ring ``root``."""
        return next(
            (
                lf.loops[0]
                for lf in self.leaves.values()
                if lf.kind == OpKind.TMA_LOAD and lf.loops and self.sym.root(lf.op.dst) == root
            ),
            None,
        )

    def _ring_class(self, lf: Leaf, root: str) -> str:
        """Which ring positions a leaf touching ring ``root`` can touch: ``loop`` (a step's),
        ``pre`` / ``post`` (a member's, before / after the loop)."""
        if lf.loops:
            return "loop"
        lp = self.ring_loop(root)
        return "pre" if lp is None or lf.seq < self.loops[lp.ev][2] else "post"

    def _ring_deps(self) -> list[Dep]:
        """WAR hazards of a stage ring with members: a read of one ring position and the copy
        that next fills its stage, D positions on (in this tile or, past the last positions, the
        next).  Which reader and copy those are depends on the trip count, so every pair of a
        reader and a copy of the ring with a member among them gets one (``via = "ring"``):
        the ring's empty mbarrier realizes them all, each copy waiting for the phase of its
        position and each reader releasing the stage it read."""
        out = []
        for root in self.rings():
            lp = self.ring_loop(root)
            depth = self.stages[root]
            copies = [
                c
                for c in self.leaves.values()
                if c.kind == OpKind.TMA_LOAD and self.sym.root(c.op.dst) == root
            ]
            for p in self.leaves.values():
                if p.kind == OpKind.TMA_LOAD or not self._reads(p, root):
                    continue
                for c in copies:
                    if p.loops and c.loops:
                        continue  # the loop's own ring: carried edges
                    out.append(
                        Dep(
                            p.op.ev,
                            c.op.ev,
                            Via.RING,
                            lp.ev if lp is not None else "",
                            depth,
                            Hazard.WAR,
                            root,
                            root,
                            Mem.SHARED,
                            self._scope(p, c, (), root, root),
                        )
                    )
        return out

    def _across_ring(self, d: Dep) -> bool:
        """An event edge between ops of different position classes of a ring with members (a
        member's and the loop's, or before and after the loop): its positions differ, so the
        edge is no hazard, and the ring's WAR hazards are :meth:`_ring_deps`'."""
        if d.tensor != d.other or d.tensor not in self.rings() or not d.dst:
            return False
        return self._ring_class(self.leaves[d.src], d.tensor) != self._ring_class(
            self.leaves[d.dst], d.tensor
        )
