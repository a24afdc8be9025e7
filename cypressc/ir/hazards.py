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
them writes, unless both are reductions (``copy.add``: they commute).  Edges that touch no common data, and flow edges whose value an op in
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
from dataclasses import replace

from cypressc.ir import nodes as N
from cypressc.ir.analysis import Symbols, proc_names, reduces, views_of
from cypressc.ir.hazard_deps import LEVELS, Dep, Leaf
from cypressc.ir.hazard_needs import Realization
from cypressc.ir.hazard_rings import RingHazards
from cypressc.ir.hazard_tiles import TileHazards
from cypressc.ir.hazard_views import ViewQueries
from cypressc.ir.intsets import AtLeast, IndexSpace, may_be_empty
from cypressc.ir.kinds import Hazard, Need, OpKind, Role, Via
from cypressc.ir.shapes import static
from cypressc.ir.target import tma_copy_bytes
from cypressc.lang.intrinsics import DTYPE_BYTES, leaf_of
from cypressc.lang.kinds import Mem, PartKind, Proc

__all__ = ["Program", "evaluate"]


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


class Program(ViewQueries, RingHazards, TileHazards, Realization):
    """The leaves, loops and dependences of a module (after warp specialization).

    The view queries, ring hazards, next-tile and byte-sharing hazards and what realizes
    a dependence are its parts in :mod:`cypressc.ir.hazard_views`,
    :mod:`cypressc.ir.hazard_rings`, :mod:`cypressc.ir.hazard_tiles` and
    :mod:`cypressc.ir.hazard_needs`."""

    def __init__(self, m: N.Module, warp_threads: int = 32, warpgroup_warps: int = 4) -> None:
        self.m = m
        self.sym = Symbols(m)
        self.roles: dict[str, Role] = m.role_map()
        self.stages: dict[str, int] = dict(m.schedule.stages) if m.schedule is not None else {}
        self.alias = {frozenset(p) for p in (m.resources.war if m.resources is not None else ())}
        self._needs: dict[Dep, tuple[Need, ...]] = {}  # Realization.needs, memoized
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
                    op, b, loops, hosts, n, self.roles.get(op.ev, Role.CONSUMER), self.kind(op)
                )
            elif isinstance(op, (N.For, N.PFor)):
                self.pfor = self.pfor or isinstance(op, N.PFor)
                block_level = any(d.proc == Proc.BLOCK for d in op.dims)
                self.loops[op.ev] = (op, loops, n)
                self._walk(
                    op.body,
                    loops + (op,) if block_level else loops,
                    hosts if block_level else hosts + (op,),
                    seq,
                )

    def kind(self, op) -> OpKind:
        """tma_load / tma_store (GLOBAL<->SHARED copies: asynchronous, TMA), wgmma (a leaf a
        warpgroup issues collectively to the Tensor Core), or thread code."""
        if isinstance(op, N.Copy):
            src, dst = self.sym.mem(op.src), self.sym.mem(op.dst)
            return {
                (Mem.GLOBAL, Mem.SHARED): OpKind.TMA_LOAD,
                (Mem.SHARED, Mem.GLOBAL): OpKind.TMA_STORE,
            }.get((src, dst), OpKind.THREAD)
        return OpKind.WGMMA if leaf_of(op).asynchronous else OpKind.THREAD

    def role_dims(self, role: Role) -> tuple[N.Dim, ...]:
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

    def stage(self, lf: Leaf) -> tuple[N.IExpr, int]:
        """The stage index and depth of the staged SHARED buffer a TMA copy writes
        (``(0, 1)`` for an unstaged one)."""
        for piece in self.sym.chain(lf.op.dst):
            part = self.sym.parts[piece.partition]
            root = self.sym.root(lf.op.dst)
            if (
                part.kind == PartKind.SLICES
                and isinstance(part.base, N.TRef)
                and part.base.name in self.stages
                and part.base.name == root
                and static(part.params[0]) == 0
            ):
                return piece.idx[0], self.stages[root]
        return N.IConst(0), 1

    def nbytes(self, v: N.View) -> int | None:
        """Bytes a TMA copy into view ``v`` moves (a static shape, else None):
        :func:`~cypressc.ir.target.tma_copy_bytes` of its elements."""
        shape = [static(s) for s in self.sym.shape(v)]
        if None in shape:
            return None
        n = DTYPE_BYTES.get(self.sym.allocs[self.sym.root(v)].dtype)
        for s in shape:
            n = None if n is None else n * s
        return None if n is None else tma_copy_bytes(n, len(shape))

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
            d.proc == Proc.BLOCK and (not r.idx or r.idx[i] is None) for i, d in enumerate(dims)
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
                    yield x, c, Via.SAME, None, comp
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
                        yield p, c, Via.SAME, None, r.idx
                    elif c.loops[: len(p.loops)] == p.loops:
                        yield p, c, Via.ENTRY, c.loops[len(p.loops)], r.idx
                elif r.name in self.loops:
                    lp = self.loops[r.name][0]
                    if self._grid(r, lp.dims) or not any(d.proc == Proc.BLOCK for d in lp.dims):
                        continue
                    for ev, idx in self._expand(r.name, r.idx):
                        if not self._grid(N.EvRef(ev, idx), self.leaves[ev].op.dims):
                            yield self.leaves[ev], c, Via.AFTER, lp, idx
        for ev, (lp, _, _) in self.loops.items():
            if not any(d.proc == Proc.BLOCK for d in lp.dims) or isinstance(lp, N.PFor):
                continue
            inside = self.under(lp)
            for r in lp.pre:
                for pev, idx in self._expand(r.name, r.idx):
                    if pev in self.leaves and not self._grid(
                        N.EvRef(pev, idx), self.leaves[pev].op.dims
                    ):
                        for c in inside:
                            yield self.leaves[pev], c, Via.ENTRY, lp, idx
            for y in lp.body.yields:
                for pev, idx in self._expand(y.name, y.idx):
                    if pev in self.leaves and not self._grid(
                        N.EvRef(pev, idx), self.leaves[pev].op.dims
                    ):
                        for c in inside:
                            yield self.leaves[pev], c, Via.CARRIED, lp, idx

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
            if lf.kind == OpKind.TMA_STORE:  # its shared source must outlive the TMA's reads
                root = self.sym.root(lf.op.src)
                out[(lf.op.ev, "", Via.END)] = Dep(
                    lf.op.ev, "", Via.END, "", 0, Hazard.END, root, root, Mem.SHARED, ()
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

    def _hazards(self, p: Leaf, c: Leaf, via: Via, lp, idx) -> list[Dep]:
        out = []
        period = max(
            [self.stages.get(self.sym.root(v), 1) for o in (p, c) for v, _, _ in views_of(o.op)]
            + [1]
        )
        for vp, rp, wp in views_of(p.op):
            for vc, rc, wc in views_of(c.op):
                hz = [
                    h
                    for h, ok in (
                        (Hazard.RAW, wp and rc),
                        (Hazard.WAR, rp and wc),
                        # two reductions into one view commute: no order between them
                        (Hazard.WAW, wp and wc and not (reduces(p.op) and reduces(c.op))),
                    )
                    if ok
                ]
                if not hz:
                    continue
                dist = 0
                if via == Via.CARRIED:
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
                    if h == Hazard.RAW and self._killed(p, c, vc, via, lp):
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

    def _killed(self, p: Leaf, c: Leaf, vc: N.View, via: Via, lp) -> bool:
        """A flow edge whose value an op between ``p`` and ``c`` overwrites entirely: ``c``
        reads the newer value (the older edge is ordered through that writer)."""
        if via == Via.ENTRY:
            return False
        for w in self.leaves.values():
            if w.hosts != c.hosts:
                continue
            if via == Via.CARRIED:
                between = lp in w.loops and w.seq < c.seq
            elif via == Via.AFTER:
                between = self.loops[lp.ev][2] < w.seq < c.seq and lp not in w.loops
            else:
                between = p.seq < w.seq < c.seq and w.loops == c.loops
            if (
                between
                and self._always_runs(w, c)
                and not reduces(w.op)  # a reduction adds to the value: it kills nothing
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

    def _scope(self, p: Leaf, c: Leaf, idx: tuple, rp: str, rc: str) -> tuple[Proc, ...]:
        levels = set()
        cl = {d.proc for d in c.op.dims}
        for i, d in enumerate(p.op.dims):
            if d.proc == Proc.BLOCK:
                continue
            r = idx[i] if i < len(idx) else None
            if not (isinstance(r, N.IProc) and r.proc == d.proc and d.proc in cl):
                levels.add(d.proc)
        levels |= cl - {d.proc for d in p.op.dims} - {Proc.BLOCK}
        levels -= self._private(rp) & self._private(rc)
        return tuple(lv for lv in LEVELS if lv in levels)
