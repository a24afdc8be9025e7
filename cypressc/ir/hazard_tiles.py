"""The hazards with no event edge (Cypress paper §4.2.6): those into the block's next tile
(``via = "tile"``: a persistent block, or a HOST loop around the blocks) and those of
tensors that resource allocation let share bytes (``module.resources.war``: a TMA copy,
thread code or a wgmma writing bytes an earlier tensor of the tile used), and when a
``tile`` edge is implied by the synchronized ones.

:class:`TileHazards` is a part of :class:`cypressc.ir.hazards.Program`: it reads the
program's ``m``, ``leaves``, ``alias`` and ``sym``.
"""

from __future__ import annotations

from cypressc.ir.analysis import views_of
from cypressc.ir.hazard_deps import LEVELS, Dep, Leaf, implied
from cypressc.ir.kinds import Hazard, Need, OpKind, Via
from cypressc.lang.kinds import Mem

__all__ = ["TileHazards"]


class TileHazards:
    """Next-tile and byte-sharing hazards (a mixin of :class:`cypressc.ir.hazards.Program`)."""

    def _tile_deps(self, inside: list[Dep]) -> list[Dep]:
        """WAR hazards into the next tile of the same block: a wgmma or thread code of this
        tile reads a shared tensor that thread code writes (a table the threads fill before the
        main loop), and the block's next tile (a persistent block's, or the next iteration of a
        HOST loop around the blocks) writes it again.  Threads of other warpgroups may read what
        each writes, so every reading wgmma's group must retire and readers and writers meet
        before any writes (``via = "tile"``; the event IR of one tile has no edge for it).  The
        processors it spans are those of the tile's own flow edges from that writer to that
        reader (``inside``: the same elements, the other way round): a point-wise hand-off
        needs nothing; with no such edge, every level the reader runs on."""
        out = []
        for p in self.leaves.values():
            if p.kind not in (OpKind.WGMMA, OpKind.THREAD):
                continue
            for v, r, _ in views_of(p.op):
                root = self.sym.root(v)
                if not r or self.sym.allocs[root].mem != Mem.SHARED:
                    continue
                for c in self.leaves.values():
                    if c.kind == OpKind.THREAD and any(
                        w and self.sym.root(x) == root for x, _, w in views_of(c.op)
                    ):
                        flows = [
                            x.scope
                            for x in inside
                            if (x.src, x.dst, x.hazard) == (c.op.ev, p.op.ev, Hazard.RAW)
                            and x.other == root
                        ]
                        scope = (
                            tuple(lv for lv in LEVELS if any(lv in f for f in flows))
                            if flows
                            else self._scope(p, c, (), root, root)
                        )
                        out.append(
                            Dep(
                                p.op.ev,
                                c.op.ev,
                                Via.TILE,
                                "",
                                1,
                                Hazard.WAR,
                                root,
                                root,
                                Mem.SHARED,
                                scope,
                            )
                        )
        if self.m.schedule is not None and self.m.schedule.persistent:
            out += self._tile_loads()
        return out

    def _tile_loads(self) -> list[Dep]:
        """WAR hazards into the next tile from the readers of a TMA copy outside the main loop
        (FlashAttention's Q panel, a peeled step's K tile) in a persistent block: its next tile
        loads into the same buffer, so every read of this tile must be over first (``via =
        "tile"``, realized by an *empty* mbarrier the readers release once per tile).  The
        readers (WAR) and writers (WAW) of a tensor sharing the copy's bytes
        (``module.resources.war``: FlashAttention-3's peeled K tile, whose next copy waits for
        the readers of the last V tile in its bytes) get such edges too; the writers' are
        implied through a TMA store that reads after them."""
        out = []
        for c in self.leaves.values():
            if (
                c.kind != OpKind.TMA_LOAD or c.loops or self.ring_member(c)
            ):  # a ring's next tile: _ring_deps
                continue
            root = self.sym.root(c.op.dst)
            # a tensor that shares the copy's bytes (resource allocation: used after it in the
            # tile) is read and written there too: the next copy also comes after those accesses
            shared = [root] + self._sharing(root)
            for p in self.leaves.values():
                if p is c or p.kind == OpKind.TMA_LOAD:
                    continue
                for t in shared:
                    if self._reads(p, t):
                        out.append(
                            Dep(
                                p.op.ev,
                                c.op.ev,
                                Via.TILE,
                                "",
                                1,
                                Hazard.WAR,
                                t,
                                root,
                                Mem.SHARED,
                                (),
                            )
                        )
                    elif t != root and self._writes(p, t):
                        out.append(
                            Dep(
                                p.op.ev,
                                c.op.ev,
                                Via.TILE,
                                "",
                                1,
                                Hazard.WAW,
                                t,
                                root,
                                Mem.SHARED,
                                (),
                            )
                        )
        return out

    def _sharing(self, root: str) -> list[str]:
        """The tensors resource allocation let share ``root``'s bytes, by name."""
        return sorted(next(iter(a - {root})) for a in self.alias if root in a)

    def _alias_loads(self) -> list[Dep]:
        """WAR hazards into a TMA copy from the earlier readers, in the same tile, of a tensor that
        shares its bytes (``module.resources.war``: FlashAttention-3's
        peeled K tile under its last V tile).  The copy's source is GLOBAL, so no event edge
        leads to it from those readers; the edge is the sharing's, not the program's."""
        out = []
        for c in self.leaves.values():
            if c.kind != OpKind.TMA_LOAD:
                continue
            root = self.sym.root(c.op.dst)
            for other in self._sharing(root):
                for p in self.leaves.values():
                    if (
                        p.kind == OpKind.TMA_LOAD
                        or p.seq > c.seq
                        or p.hosts != c.hosts
                        or not self._reads(p, other)
                    ):
                        continue
                    if (
                        c.loops
                    ):  # a copy in a loop after the reader (their live ranges are apart): the
                        # reader is done before the loop starts; only a path of synchronized edges
                        # can realize that, else sync-insertion refuses
                        if any(x is c.loops[0] for x in p.loops):
                            continue
                        via, lp = Via.ENTRY, c.loops[0]
                    else:
                        via, lp = (Via.AFTER, p.loops[0]) if p.loops else (Via.SAME, None)
                    out.append(
                        Dep(
                            p.op.ev,
                            c.op.ev,
                            via,
                            lp.ev if lp is not None else "",
                            0,
                            Hazard.WAR,
                            other,
                            root,
                            Mem.SHARED,
                            self._scope(p, c, (), other, root),
                        )
                    )
        return out

    def _alias_writes(self) -> list[Dep]:
        """WAR and WAW hazards into thread code or a wgmma that writes a tensor sharing the bytes
        of an earlier one (``module.resources.war``, earlier first: a staged output tile over a
        tile loaded before it), from every access of the earlier tensor in the tile.  The
        program orders the two through the data between them at best, and maybe on other
        warpgroups (S = Q·K[0]ᵀ of every warpgroup before one warpgroup's O writes), so each
        edge is the sharing's, with every level the two run on; where an event edge gives the
        same dependence, the two scopes merge.  A TMA copy into the earlier tensor is not a
        source: its readers wait for it and are sources themselves."""
        out = []
        for early, late in self.m.resources.war if self.m.resources is not None else ():
            for c in self.leaves.values():
                if c.kind == OpKind.TMA_LOAD or not self._writes(c, late):
                    continue
                for p in self.leaves.values():
                    if p.kind == OpKind.TMA_LOAD or p.seq > c.seq or p.hosts != c.hosts or p is c:
                        continue
                    hazard = (
                        Hazard.WAR
                        if self._reads(p, early)
                        else Hazard.WAW
                        if self._writes(p, early)
                        else None
                    )
                    if hazard is None:
                        continue
                    if p.loops:  # resource allocation's live ranges span a tensor's outermost loop
                        via, lp = Via.AFTER, p.loops[0]
                    else:
                        via, lp = (Via.ENTRY, c.loops[0]) if c.loops else (Via.SAME, None)
                    out.append(
                        Dep(
                            p.op.ev,
                            c.op.ev,
                            via,
                            lp.ev if lp is not None else "",
                            0,
                            hazard,
                            early,
                            late,
                            Mem.SHARED,
                            self._scope(p, c, (), early, late),
                        )
                    )
        return out

    def _writes(self, lf: Leaf, root: str) -> bool:
        return any(w and self.sym.root(v) == root for v, _, w in views_of(lf.op))

    def _reads(self, lf: Leaf, root: str) -> bool:
        return any(r and self.sym.root(v) == root for v, r, _ in views_of(lf.op))

    def _earlier_load(self, d: Dep) -> Leaf | None:
        """For a ``tile`` edge into a copy outside the main loop: an earlier such copy of the
        same role that the same reader reads.  Its release comes after that read retired,
        and the role issues this copy only after waiting for it, so the edge is implied
        (FlashAttention-3's peeled K tile, read with the Q panel by S = Q·K[0]ᵀ)."""
        p, c = self.leaves[d.src], self.leaves[d.dst]
        for x in self.leaves.values():
            if (
                x.kind == OpKind.TMA_LOAD
                and not x.loops
                and x.role == c.role
                and x.seq < c.seq
                and x.hosts == c.hosts
                and self._reads(p, self.sym.root(x.op.dst))
            ):
                return x
        return None

    def is_implied(self, d: Dep, covered: list[Dep]) -> bool:
        """Whether ``d`` follows from the synchronized ``covered``: a path of them
        (:func:`implied`), or, for a ``tile`` edge into a copy, the synchronized ``tile`` edge
        from the same reader into an earlier copy of the copy's role (:meth:`_earlier_load`).
        A ``bulk_read`` edge is no step of a path: it orders a TMA store's reads of shared
        memory only, not its writes."""
        covered = [c for c in covered if Need.BULK_READ not in self.needs(c)]
        if implied(d, covered):
            return True
        x = self._earlier_load(d) if d.via == Via.TILE else None
        return x is not None and any(
            c.via == Via.TILE and c.src == d.src and c.dst == x.op.ev for c in covered
        )
