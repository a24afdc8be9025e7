"""Which views of a module's leaves may touch the same elements (Cypress paper §4.2.6:
an event edge protects a hazard only when its two ops touch overlapping data): overlap of
two views across loop iterations (an SMT query, :func:`cypressc.ir.intsets.may_meet`),
whether a writer's instances cover a view whole, and the partition facts both need.

:class:`ViewQueries` is a part of :class:`cypressc.ir.hazards.Program`: it reads the
program's ``sym``, ``lets``, ``space``, ``alias``, ``warp_threads`` and ``warpgroup_warps``.
"""

from __future__ import annotations

from collections.abc import Mapping

from cypressc.ir import nodes as N
from cypressc.ir.analysis import free_vars_through, proc_names
from cypressc.ir.hazard_deps import Leaf
from cypressc.ir.intsets import may_meet
from cypressc.ir.shapes import static
from cypressc.lang.kinds import PartKind, Proc

__all__ = ["ViewQueries"]


class ViewQueries:
    """Overlap and coverage of views (a mixin of :class:`cypressc.ir.hazards.Program`)."""

    # -- views ------------------------------------------------------------------------------
    def _chain(self, v: N.View) -> list[tuple[str, tuple]]:
        return [(p.partition, p.idx) for p in reversed(self.sym.chain(v))]

    def _unshared(self, p: Leaf | None, c: Leaf | None) -> frozenset[str]:
        """Loop variables bound by a loop only one of ``p`` and ``c`` runs in: on the two
        sides of an overlap query they are independent iterations."""
        if p is None or c is None:
            return frozenset()
        lp, lc = set(map(id, p.loops + p.hosts)), set(map(id, c.loops + c.hosts))
        return frozenset(
            x.var for x in p.loops + p.hosts + c.loops + c.hosts if (id(x) in lp) != (id(x) in lc)
        )

    def _variant(
        self, part: N.Partition, private: frozenset[str], shift: Mapping[str, int]
    ) -> bool:
        """Whether a partition's tiling (block extents, piece shape) may differ between the
        two sides of a query: its pieces at different indices then need not be disjoint."""
        moving = private | set(shift)
        exprs = [x for x in (*part.params, *part.piece_shape) if not isinstance(x, str)]
        return any(free_vars_through(e, self.lets) & moving for e in exprs)

    def overlap(
        self,
        va: N.View,
        vb: N.View,
        p: Leaf | None = None,
        c: Leaf | None = None,
        shift: Mapping[str, int] | None = None,
    ) -> bool:
        """Whether ``va`` (touched by ``p``) and ``vb`` (by ``c``, ``shift``-ed iterations later:
        loop variable -> distance) may share elements: same tensor (or tensors sharing bytes)
        and no execution in which every blocks/slices index on their common partition chain
        is equal is proven impossible (:func:`cypressc.ir.intsets.may_meet`, an SMT query over
        the loop ranges and sizes).  Indices naming a processor are left unconstrained: the
        two accesses may run on different instances."""
        shift = shift or {}
        ra, rb = self.sym.root(va), self.sym.root(vb)
        if ra != rb:
            return frozenset((ra, rb)) in self.alias
        private = self._unshared(p, c)
        pairs = []
        for (pa, ia), (pb, ib) in zip(self._chain(va), self._chain(vb)):
            if pa != pb:
                break
            part = self.sym.parts[pa]
            if part.kind not in (PartKind.BLOCKS, PartKind.SLICES):
                continue
            if self._variant(part, private, shift):
                break
            pairs += [(x, y) for x, y in zip(ia, ib) if not (proc_names(x) or proc_names(y))]
        return may_meet(pairs, self.space, private=private, shift=shift)

    def covers(self, w: Leaf, wv: N.View, v: N.View) -> bool:
        """Whether every instance of ``w`` together writes all of ``v``: ``wv``'s piece chain,
        less its outermost levels indexed by ``w``'s own processor indices, is ``v``'s chain
        or a prefix of it (structurally equal indices: equal values in one environment).  A
        level counts as written whole only when its indices are distinct processor indices
        of ``w`` and each processor's static extent reaches the level's static piece count
        on its axis; otherwise the answer is no (keep the edge)."""
        cw, cv = self._chain(wv), self._chain(v)
        ext = {}
        for d in w.op.dims:  # a level's grid dimensions in order: BLOCK x, y, z
            ext[(d.proc, sum(1 for k in ext if k[0] == d.proc))] = static(d.extent)
        while cw:
            part, idx = cw[-1]
            keys = [(i.proc, i.dim) for i in idx if isinstance(i, N.IProc)]
            counts = self._piece_counts(part)
            if (
                len(keys) != len(idx)
                or len(set(keys)) != len(keys)
                or counts is None
                or any((ext.get(k) or 0) < n for k, n in zip(keys, counts))
            ):
                break
            cw.pop()
        return self.sym.root(wv) == self.sym.root(v) and cv[: len(cw)] == cw

    def _piece_counts(self, name: str) -> list[int] | None:
        """How many pieces a partition has along each index (None when not static)."""
        part = self.sym.parts[name]
        if part.kind == PartKind.BLOCKS:
            shape = [static(x) for x in self.sym.shape(part.base)]
            blocks = [static(b) for b in part.params]
            if None in shape or None in blocks or 0 in blocks or len(blocks) != len(shape):
                return None
            return [-(-n // b) for n, b in zip(shape, blocks)]
        if part.kind == PartKind.MMA:
            return {Proc.THREAD: [self.warp_threads], Proc.WARP: [self.warpgroup_warps]}.get(
                part.params[1]
            )
        return None

    def _private(self, root: str) -> set[str]:
        return {d.proc for d in self.sym.allocs[root].dims}
