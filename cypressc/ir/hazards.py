"""Which event edges of a warp-specialized module need synchronization, and of what kind
(Cypress paper §4.2.6): the analysis ``sync-insertion`` acts on and the sync verifier
checks against.

A :class:`Dep` is one event edge between two *leaf* ops (copies and leaf calls) of a
block program, with the data hazard it protects.  Edges are read off the IR only:

* ``same``: ``c`` names ``p`` in its preconditions, both in the same loop iteration;
* ``entry``: ``p`` completes before a loop that contains ``c`` starts;
* ``after``: ``c`` waits for a loop, i.e. for the leaves its body yields (last iteration);
* ``carried``: a loop's yields at iteration k precede every op of iteration k + d; ``d``
  is the first distance at which the two ops touch the same data (a stage buffer of
  depth D gives d = D: the write-after-read back edge of pipelining, §4.2.5);
* ``ring``: a read of a stage ring that has members outside its loop (FlashAttention-3's
  peeled K tile in the key loop's K ring) and the copy that refills the stage D positions
  later (:meth:`Program._ring_deps`); event edges between a member's ops and the loop's on
  that ring touch different positions and are dropped.

An edge protects a hazard when the two ops touch overlapping views of one tensor (or two
tensors that resource allocation let share bytes, ``module.resources.war``) and one of
them writes.  Edges that touch no common data, and flow edges whose value an op in
between overwrites, need nothing.  The *scope* of a hazard is the set of processor
levels (WARPGROUP, WARP, THREAD) along which the two instances can differ: a broadcast
``[:]`` in the edge's index, minus the levels the tensor is private to (a REGISTER
fragment allocated per THREAD has no cross-thread hazards).

:meth:`Program.needs` maps a dependence to what realizes it, by the kinds of its
endpoints (a TMA copy, a Tensor Core call, thread code) — never by program shape.
Edges across BLOCK instances (a HOST loop's iterations) are the grid's business, not a
block's, and are not listed.  Two kinds of hazard have no event edge and are added here:
the next tile's (``tile``, a persistent block or a HOST loop around the blocks), and a write
into bytes an earlier tensor of the tile shares: by a TMA copy (its source is GLOBAL, so no
edge leads to it from that tensor's readers: :meth:`Program._alias_loads`), or by thread code
or a wgmma that the program orders after those readers only through other data, or not at
all (:meth:`Program._alias_writes`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.analysis import Symbols, free_vars_through, proc_names, views_of
from cypressc.ir.intsets import AtLeast, IndexSpace, may_be_empty, may_meet
from cypressc.ir.shapes import static
from cypressc.lang.intrinsics import DTYPE_BYTES, leaf_of

__all__ = ["LEVELS", "Leaf", "Dep", "Program", "evaluate", "implied", "instances", "DTYPE_BYTES"]

LEVELS = ("WARPGROUP", "WARP", "THREAD")


def evaluate(e: N.IExpr, env: dict[str, int], lets: dict[str, N.IExpr] | None = None):
    """The value of ``e`` with variables from ``env`` (Lets expanded); KeyError on an
    unbound variable or processor index."""
    if isinstance(e, N.IConst):
        return e.value
    if isinstance(e, N.IVar):
        if e.name in env:
            return env[e.name]
        if lets and e.name in lets:
            return evaluate(lets[e.name], env, lets)
        raise KeyError(e.name)
    if isinstance(e, N.IProc):
        raise KeyError(f"{e.proc}.{e.dim}")
    a, b = evaluate(e.a, env, lets), evaluate(e.b, env, lets)
    ops = {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "min": lambda: min(a, b),
        "max": lambda: max(a, b),
        "//": lambda: a // b,
        "%": lambda: a % b,
        "cdiv": lambda: -(-a // b),
        "/": lambda: a // b if a % b == 0 else a / b,
    }
    return ops[e.op]()


@dataclass(frozen=True, eq=False)
class Leaf:
    """A copy or leaf call of the block program: ``loops`` are the block-level loops around
    it (outermost first), ``hosts`` the HOST loops, ``seq`` its pre-order position."""

    op: N.Copy | N.Call
    block: N.Block
    loops: tuple[N.For, ...]
    hosts: tuple[N.For, ...]
    seq: int
    role: str
    kind: str  # tma_load | tma_store | wgmma | thread


@dataclass(frozen=True)
class Dep:
    """A hazard an event edge protects: ``src`` must complete before ``dst`` touches
    ``other`` (``tensor`` is what ``src`` touches; they differ when the two share bytes)."""

    src: str
    dst: str
    via: str  # same | entry | after | carried | end | tile
    loop: str  # the loop event of entry / after / carried ("" otherwise)
    distance: int
    hazard: str  # raw | war | waw | end
    tensor: str
    other: str
    mem: str
    scope: tuple[str, ...]

    def edge(self) -> S.Edge:
        return S.Edge(self.src, self.dst, self.hazard, self.tensor, self.via, self.distance)


class Program:
    """The leaves, loops and dependences of a module (after warp specialization)."""

    def __init__(self, m: N.Module, warp_threads: int = 32, warpgroup_warps: int = 4) -> None:
        self.m = m
        self.sym = Symbols(m)
        self.roles: dict[str, str] = m.role_map()
        self.stages: dict[str, int] = dict(m.schedule.stages) if m.schedule is not None else {}
        self.alias = {frozenset(p) for p in (m.resources.war if m.resources is not None else ())}
        self.warp_threads, self.warpgroup_warps = warp_threads, warpgroup_warps
        self.lets: dict[str, N.IExpr] = {}
        self.leaves: dict[str, Leaf] = {}
        self.loops: dict[str, tuple[N.For | N.PFor, tuple[N.For, ...], int]] = {}
        self.pfor = False
        self._rings: dict[str, list[Leaf]] | None = None
        self._walk(m.body, (), (), itertools.count())
        self.space = IndexSpace(
            {lp.var: (lp.lo, lp.hi) for lp, _, _ in self.loops.values()},
            self.lets,
            frozenset(m.scalars),
        )

    # -- structure ------------------------------------------------------------------------
    def _walk(self, b: N.Block, loops, hosts, seq) -> None:
        for op in b.ops:
            n = next(seq)
            if isinstance(op, N.Let):
                self.lets[op.name] = op.value
            elif isinstance(op, (N.Copy, N.Call)):
                self.leaves[op.ev] = Leaf(
                    op, b, loops, hosts, n, self.roles.get(op.ev, "consumer"), self.kind(op)
                )
            elif isinstance(op, (N.For, N.PFor)):
                self.pfor = self.pfor or isinstance(op, N.PFor)
                block_level = any(d.proc == "BLOCK" for d in op.dims)
                self.loops[op.ev] = (op, loops, n)
                self._walk(
                    op.body,
                    loops + (op,) if block_level else loops,
                    hosts if block_level else hosts + (op,),
                    seq,
                )

    def kind(self, op) -> str:
        """tma_load / tma_store (GLOBAL<->SHARED copies: asynchronous, TMA), wgmma (a leaf a
        warpgroup issues collectively to the Tensor Core), or thread code."""
        if isinstance(op, N.Copy):
            src, dst = self.sym.mem(op.src), self.sym.mem(op.dst)
            return {("GLOBAL", "SHARED"): "tma_load", ("SHARED", "GLOBAL"): "tma_store"}.get(
                (src, dst), "thread"
            )
        return "wgmma" if leaf_of(op).asynchronous else "thread"

    def role_dims(self, role: str) -> tuple[N.Dim, ...]:
        """The processor dimensions of the role's most deeply replicated op: every thread of
        the role runs its control flow (and its waits)."""
        best: tuple[N.Dim, ...] = ()
        for lf in self.leaves.values():
            if lf.role == role and len(lf.op.dims) > len(best):
                best = lf.op.dims
        return best

    def under(self, lp: N.For) -> list[Leaf]:
        """The leaves inside loop ``lp`` (at any depth)."""
        return [lf for lf in self.leaves.values() if lp in lf.loops]

    # -- stage rings with members outside their loop (warp specialization's ring joins) ------
    def ring_member(self, lf: Leaf) -> bool:
        """A TMA copy outside every loop into a stage ring (a peeled step's tile that joined
        the loop's ring, :mod:`cypressc.passes.rings`)."""
        return lf.kind == "tma_load" and not lf.loops and self.sym.root(lf.op.dst) in self.stages

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
                if lf.kind == "tma_load" and lf.loops and self.sym.root(lf.op.dst) == root
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
                if c.kind == "tma_load" and self.sym.root(c.op.dst) == root
            ]
            for p in self.leaves.values():
                if p.kind == "tma_load" or not self._reads(p, root):
                    continue
                for c in copies:
                    if p.loops and c.loops:
                        continue  # the loop's own ring: carried edges
                    out.append(
                        Dep(
                            p.op.ev,
                            c.op.ev,
                            "ring",
                            lp.ev if lp is not None else "",
                            depth,
                            "war",
                            root,
                            root,
                            "SHARED",
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

    def stage(self, lf: Leaf) -> tuple[N.IExpr, int]:
        """The stage index and depth of the staged SHARED buffer a TMA copy writes
        (``(0, 1)`` for an unstaged one)."""
        for piece in self.sym.chain(lf.op.dst):
            part = self.sym.parts[piece.partition]
            root = self.sym.root(lf.op.dst)
            if (
                part.kind == "slices"
                and isinstance(part.base, N.TRef)
                and part.base.name in self.stages
                and part.base.name == root
                and static(part.params[0]) == 0
            ):
                return piece.idx[0], self.stages[root]
        return N.IConst(0), 1

    def nbytes(self, v: N.View) -> int | None:
        """Bytes of a view with a static shape, else None."""
        shape = [static(s) for s in self.sym.shape(v)]
        if None in shape:
            return None
        n = DTYPE_BYTES.get(self.sym.allocs[self.sym.root(v)].dtype)
        for s in shape:
            n = None if n is None else n * s
        return n

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
            if part.kind not in ("blocks", "slices"):
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
        if part.kind == "blocks":
            shape = [static(x) for x in self.sym.shape(part.base)]
            blocks = [static(b) for b in part.params]
            if None in shape or None in blocks or 0 in blocks or len(blocks) != len(shape):
                return None
            return [-(-n // b) for n, b in zip(shape, blocks)]
        if part.kind == "mma":
            return {"THREAD": [self.warp_threads], "WARP": [self.warpgroup_warps]}.get(
                part.params[1]
            )
        return None

    def _private(self, root: str) -> set[str]:
        return {d.proc for d in self.sym.allocs[root].dims}

    # -- dependences ------------------------------------------------------------------------
    def _expand(self, ev: str, idx: tuple) -> list[tuple[str, tuple]]:
        if ev in self.leaves:
            return [(ev, idx)]
        if ev not in self.loops:
            return []
        out = []
        for y in self.loops[ev][0].body.yields:
            out += self._expand(y.name, y.idx)
        return out

    @staticmethod
    def _grid(r: N.EvRef, dims) -> bool:
        """A reference that waits for other blocks (a broadcast over a BLOCK dimension)."""
        return any(
            d.proc == "BLOCK" and (not r.idx or r.idx[i] is None) for i, d in enumerate(dims)
        )

    def _same_preds(self, c: Leaf) -> list[tuple[Leaf, tuple]]:
        """The leaves ``c`` names in its preconditions in the same iteration (and tile)."""
        out = []
        for r in c.op.pre:
            p = self.leaves.get(r.name)
            if (
                p is not None
                and not self._grid(r, p.op.dims)
                and p.hosts == c.hosts
                and p.loops == c.loops
            ):
                out.append((p, r.idx))
        return out

    @staticmethod
    def _compose(outer: tuple, p: Leaf, inner: tuple) -> tuple:
        """The index by which ``c`` waits for ``x`` through ``p``: ``c`` waits for instances
        ``outer`` of ``p``, each of which waits for instances ``inner`` of ``x``.  An entry of
        ``inner`` stays a point only where it names processors that ``outer`` passes through
        unchanged; anything else is the broadcast ``:`` (every instance)."""
        through = {}
        for i, d in enumerate(p.op.dims):
            e = outer[i] if i < len(outer) else None
            through[d.proc] = isinstance(e, N.IProc) and e.proc == d.proc
        out = []
        for e in inner:
            if e is None or not all(through.get(x, False) for x in proc_names(e)):
                out.append(None)
            else:
                out.append(e)
        return tuple(out)

    def _transitive_same(self):
        """(x, c, "same", None, idx) for every leaf ``x`` that ``c`` waits for only through a
        chain of same-iteration event edges: dependence analysis names only a tensor's last
        writer, so the op ``c`` conflicts with may sit further up the chain, behind links that
        touch other pieces (a TMA into ``R[0]``, one into ``R[1]`` after it, a read of ``R[0]``)."""
        for c in self.leaves.values():
            direct = self._same_preds(c)
            seen = {id(p) for p, _ in direct} | {id(c)}
            todo = list(direct)
            while todo:
                p, idx = todo.pop()
                for x, inner in self._same_preds(p):
                    if id(x) in seen:
                        continue
                    seen.add(id(x))
                    comp = self._compose(idx, p, inner)
                    yield x, c, "same", None, comp
                    todo.append((x, comp))

    def _routes(self):
        """(src leaf, dst leaf, via, loop, idx) for every event edge between two leaves, and
        the same-iteration chains of them (:meth:`_transitive_same`)."""
        yield from self._direct_routes()
        yield from self._transitive_same()

    def _direct_routes(self):
        for c in self.leaves.values():
            for r in c.op.pre:
                if r.name in self.leaves:
                    p = self.leaves[r.name]
                    if self._grid(r, p.op.dims) or p.hosts != c.hosts:
                        continue
                    if p.loops == c.loops:
                        yield p, c, "same", None, r.idx
                    elif c.loops[: len(p.loops)] == p.loops:
                        yield p, c, "entry", c.loops[len(p.loops)], r.idx
                elif r.name in self.loops:
                    lp = self.loops[r.name][0]
                    if self._grid(r, lp.dims) or not any(d.proc == "BLOCK" for d in lp.dims):
                        continue
                    for ev, idx in self._expand(r.name, r.idx):
                        if not self._grid(N.EvRef(ev, idx), self.leaves[ev].op.dims):
                            yield self.leaves[ev], c, "after", lp, idx
        for ev, (lp, _, _) in self.loops.items():
            if not any(d.proc == "BLOCK" for d in lp.dims) or isinstance(lp, N.PFor):
                continue
            inside = self.under(lp)
            for r in lp.pre:
                for pev, idx in self._expand(r.name, r.idx):
                    if pev in self.leaves and not self._grid(
                        N.EvRef(pev, idx), self.leaves[pev].op.dims
                    ):
                        for c in inside:
                            yield self.leaves[pev], c, "entry", lp, idx
            for y in lp.body.yields:
                for pev, idx in self._expand(y.name, y.idx):
                    if pev in self.leaves and not self._grid(
                        N.EvRef(pev, idx), self.leaves[pev].op.dims
                    ):
                        for c in inside:
                            yield self.leaves[pev], c, "carried", lp, idx

    def deps(self) -> list[Dep]:
        """Every hazard an event edge of the block programs protects (deduplicated, in
        program order of the consumer)."""
        out: dict[tuple, Dep] = {}
        for p, c, via, lp, idx in self._routes():
            for d in self._hazards(p, c, via, lp, idx):
                if not self._across_ring(d):
                    out.setdefault(
                        (d.src, d.dst, d.via, d.loop, d.distance, d.hazard, d.tensor, d.other), d
                    )
        for d in self._ring_deps():
            out.setdefault(
                (d.src, d.dst, d.via, d.loop, d.distance, d.hazard, d.tensor, d.other), d
            )
        for lf in self.leaves.values():
            if lf.kind == "tma_store":  # its shared source must outlive the TMA's reads
                root = self.sym.root(lf.op.src)
                out[(lf.op.ev, "", "end")] = Dep(
                    lf.op.ev, "", "end", "", 0, "end", root, root, "SHARED", ()
                )
        for d in self._tile_deps(list(out.values())):
            out.setdefault((d.src, d.dst, d.via), d)
        for d in self._alias_loads() + self._alias_writes():
            key = (d.src, d.dst, d.via, d.loop, d.distance, d.hazard, d.tensor, d.other)
            if (
                key in out
            ):  # an event edge's scope follows its index, which says nothing of the sharing
                levels = set(out[key].scope) | set(d.scope)
                d = replace(out[key], scope=tuple(lv for lv in LEVELS if lv in levels))
            out[key] = d
        return sorted(
            out.values(),
            key=lambda d: (self.leaves[d.dst].seq if d.dst else 1 << 30, self.leaves[d.src].seq),
        )

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
            if p.kind not in ("wgmma", "thread"):
                continue
            for v, r, _ in views_of(p.op):
                root = self.sym.root(v)
                if not r or self.sym.allocs[root].mem != "SHARED":
                    continue
                for c in self.leaves.values():
                    if c.kind == "thread" and any(
                        w and self.sym.root(x) == root for x, _, w in views_of(c.op)
                    ):
                        flows = [
                            x.scope
                            for x in inside
                            if (x.src, x.dst, x.hazard) == (c.op.ev, p.op.ev, "raw")
                            and x.other == root
                        ]
                        scope = (
                            tuple(lv for lv in LEVELS if any(lv in f for f in flows))
                            if flows
                            else self._scope(p, c, (), root, root)
                        )
                        out.append(
                            Dep(p.op.ev, c.op.ev, "tile", "", 1, "war", root, root, "SHARED", scope)
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
                c.kind != "tma_load" or c.loops or self.ring_member(c)
            ):  # a ring's next tile: _ring_deps
                continue
            root = self.sym.root(c.op.dst)
            # a tensor that shares the copy's bytes (resource allocation: used after it in the
            # tile) is read and written there too: the next copy also comes after those accesses
            shared = [root] + self._sharing(root)
            for p in self.leaves.values():
                if p is c or p.kind == "tma_load":
                    continue
                for t in shared:
                    if self._reads(p, t):
                        out.append(
                            Dep(p.op.ev, c.op.ev, "tile", "", 1, "war", t, root, "SHARED", ())
                        )
                    elif t != root and self._writes(p, t):
                        out.append(
                            Dep(p.op.ev, c.op.ev, "tile", "", 1, "waw", t, root, "SHARED", ())
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
            if c.kind != "tma_load":
                continue
            root = self.sym.root(c.op.dst)
            for other in self._sharing(root):
                for p in self.leaves.values():
                    if (
                        p.kind == "tma_load"
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
                        via, lp = "entry", c.loops[0]
                    else:
                        via, lp = ("after", p.loops[0]) if p.loops else ("same", None)
                    out.append(
                        Dep(
                            p.op.ev,
                            c.op.ev,
                            via,
                            lp.ev if lp is not None else "",
                            0,
                            "war",
                            other,
                            root,
                            "SHARED",
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
                if c.kind == "tma_load" or not self._writes(c, late):
                    continue
                for p in self.leaves.values():
                    if p.kind == "tma_load" or p.seq > c.seq or p.hosts != c.hosts or p is c:
                        continue
                    hazard = (
                        "war"
                        if self._reads(p, early)
                        else "waw"
                        if self._writes(p, early)
                        else None
                    )
                    if hazard is None:
                        continue
                    if p.loops:  # resource allocation's live ranges span a tensor's outermost loop
                        via, lp = "after", p.loops[0]
                    else:
                        via, lp = ("entry", c.loops[0]) if c.loops else ("same", None)
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
                            "SHARED",
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
                x.kind == "tma_load"
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
        from the same reader into an earlier copy of the copy's role (:meth:`_earlier_load`)."""
        if implied(d, covered):
            return True
        x = self._earlier_load(d) if d.via == "tile" else None
        return x is not None and any(
            c.via == "tile" and c.src == d.src and c.dst == x.op.ev for c in covered
        )

    def _hazards(self, p: Leaf, c: Leaf, via: str, lp, idx) -> list[Dep]:
        out = []
        period = max(
            [self.stages.get(self.sym.root(v), 1) for o in (p, c) for v, _, _ in views_of(o.op)]
            + [1]
        )
        for vp, rp, wp in views_of(p.op):
            for vc, rc, wc in views_of(c.op):
                hz = [
                    h
                    for h, ok in (("raw", wp and rc), ("war", rp and wc), ("waw", wp and wc))
                    if ok
                ]
                if not hz:
                    continue
                dist = 0
                if via == "carried":
                    dist = next(
                        (
                            d
                            for d in range(1, period + 1)
                            if self.overlap(vp, vc, p, c, {lp.var: d})
                        ),
                        0,
                    )
                    if not dist and self.overlap(vp, vc, p, c, {lp.var: AtLeast(period + 1)}):
                        dist = (
                            period + 1
                        )  # they meet further on, not within a ring's turn: an edge at
                        # period + 1 orders every later meeting too (the consumer's program order)
                    if not dist:
                        continue
                elif not self.overlap(vp, vc, p, c):
                    continue
                for h in hz:
                    if h == "raw" and self._killed(p, c, vc, via, lp):
                        continue
                    rp_, rc_ = self.sym.root(vp), self.sym.root(vc)
                    scope = self._scope(p, c, idx, rp_, rc_)
                    mem = self.sym.allocs[rc_].mem
                    out.append(
                        Dep(
                            p.op.ev,
                            c.op.ev,
                            via,
                            lp.ev if lp is not None else "",
                            dist,
                            h,
                            rp_,
                            rc_,
                            mem,
                            scope,
                        )
                    )
        return out

    def _killed(self, p: Leaf, c: Leaf, vc: N.View, via: str, lp) -> bool:
        """A flow edge whose value an op between ``p`` and ``c`` overwrites entirely: ``c``
        reads the newer value (the older edge is ordered through that writer)."""
        if via == "entry":
            return False
        for w in self.leaves.values():
            if w.hosts != c.hosts:
                continue
            if via == "carried":
                between = lp in w.loops and w.seq < c.seq
            elif via == "after":
                between = self.loops[lp.ev][2] < w.seq < c.seq and lp not in w.loops
            else:
                between = p.seq < w.seq < c.seq and w.loops == c.loops
            if (
                between
                and self._always_runs(w, c)
                and any(wr and self.covers(w, v, vc) for v, _, wr in views_of(w.op))
            ):
                return True
        return False

    def _always_runs(self, w: Leaf, c: Leaf) -> bool:
        """Whether ``w`` runs whenever ``c`` does: every loop around ``w`` that is not around
        ``c`` provably runs at least once (:func:`cypressc.ir.intsets.may_be_empty`)."""
        return all(
            not may_be_empty(lp.lo, lp.hi, self.space)
            for lp in w.loops
            if all(x is not lp for x in c.loops)
        )

    def _scope(self, p: Leaf, c: Leaf, idx: tuple, rp: str, rc: str) -> tuple[str, ...]:
        levels = set()
        cl = {d.proc for d in c.op.dims}
        for i, d in enumerate(p.op.dims):
            if d.proc == "BLOCK":
                continue
            r = idx[i] if i < len(idx) else None
            if not (isinstance(r, N.IProc) and r.proc == d.proc and d.proc in cl):
                levels.add(d.proc)
        levels |= cl - {d.proc for d in p.op.dims} - {"BLOCK"}
        levels -= self._private(rp) & self._private(rc)
        return tuple(lv for lv in LEVELS if lv in levels)

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


def implied(dep: Dep, covered: list[Dep]) -> bool:
    """Whether ``dep`` follows from a path of covered dependences through one or two ops
    (each completes before the next starts): same-iteration steps compose with any step
    (with a ``tile`` step into the next tile too), carried distances add up."""

    def step(a: Dep, b: Dep) -> tuple | None:
        kinds = (a.via, b.via)
        if "tile" in kinds and "same" not in kinds:
            return None
        if a.via == "same":
            return (b.via, b.loop, b.distance)
        if b.via == "same":
            return (a.via, a.loop, a.distance)
        if kinds == ("carried", "carried") and a.loop == b.loop:
            return ("carried", a.loop, a.distance + b.distance)
        return None

    goal = (dep.via, dep.loop, dep.distance)
    by_src: dict[str, list[Dep]] = {}
    for c in covered:
        if c.hazard != "end":  # a tile edge composes with same-tile steps (into the next tile)
            by_src.setdefault(c.src, []).append(c)
    for a in by_src.get(dep.src, []):
        for b in by_src.get(a.dst, []):
            if b.dst == dep.dst and step(a, b) == goal:
                return True
            for c in by_src.get(b.dst, []):
                ab = step(a, b)
                if (
                    c.dst == dep.dst
                    and ab is not None
                    and step(Dep("", "", *ab, "", "", "", "", ()), c) == goal
                ):
                    return True
    return False


def instances(dims: tuple[N.Dim, ...]) -> int | None:
    """How many instances of an op run per block (the product of its processor extents
    below BLOCK); None when one of them is a run-time value."""
    n = 1
    for d in dims:
        if d.proc != "BLOCK":
            e = static(d.extent)
            if e is None:
                return None
            n *= e
    return n
