"""Pass 3, ``copy-elimination`` (Cypress paper §4.2.3, Fig. 10).

Rewrite patterns that remove the copies the copy-in/copy-out discipline introduced,
applied to a fixpoint in this order (synchronization-removing patterns first):

1. **alias** (self copy, Fig. 10d): a fresh tensor in the same memory as the view it
   was copied from (or mapped to NONE) *is* that view: substitute it, and the copies
   become ``copy(t, t)``, removed with their events forwarded to their preconditions
   (``b[e2/e1]``) — a collapsed ``e[:]`` survives, as it must.  A callee's fresh SHARED
   tensor copied out whole into its caller's NONE tensor of the same processors (a table
   the callee fills) makes the caller's tensor SHARED: the mapping put the data there;
2. **spill hoisting** (Fig. 10b): a copy-in at the top of a ``for`` body and the
   matching copy-out at its bottom move to the preamble and postamble;
3. **spill elimination** (Fig. 10a): a copy-out into a piece followed by a copy-in of
   the same piece (same partition) is removed *with* the synchronization between
   them: users wait point-wise on the writer instead of on the collapsed event;
4. **duplicate elimination** (Fig. 10c): a second copy of the same view into the same
   memory reuses the first;
5. dead copies into NONE tensors (never read, or written again by a later copy-out of the
   same source before any read) and unused pure ops are deleted.

A tensor mapped to NONE that is still read or written by a copy or a leaf afterwards
cannot be left unmaterialized: that is a located error (E044), at the ``mems`` entry that
keeps it NONE, with a note at the launch whose copy needs it.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from cypressc.diagnostics import CypressError, Loc
from cypressc.ir import nodes as N
from cypressc.passes.base import ModulePass
from cypressc.ir.target import Target
from cypressc.ir.analysis import (
    Symbols,
    canon,
    forward_refs,
    free_vars,
    map_ops,
    names_in_use,
    ref_for,
    remove_ops,
    rename_tensors,
    replace_event,
    substitute_view,
    views_of,
)
from cypressc.ir.origin import Sites, TensorSite
from cypressc.ir.subst import map_views, walk_ops

__all__ = ["copy_elimination", "rewrite_to_fixpoint", "NotConverged", "PATTERNS"]


# ----------------------------------------------------------------------------- queries
class _Index:
    def __init__(self, m: N.Module) -> None:
        self.m = m
        self.sym = Symbols(m)
        self.order: list[N.Op] = list(walk_ops(m.body))
        self.pos = {id(o): i for i, o in enumerate(self.order)}
        self.loops: dict[int, list[N.For]] = {}  # op id -> enclosing For loops
        self.parent: dict[int, N.Block] = {}
        self._loops(m.body, [])
        self.by_root: dict[str, list[tuple[N.Op, bool, bool]]] = {}
        for o in self.order:
            for v, r, w in views_of(o):
                self.by_root.setdefault(self.sym.root(v), []).append((o, r, w))

    def _loops(self, b: N.Block, stack: list[N.For]) -> None:
        for o in b.ops:
            self.loops[id(o)] = list(stack)
            self.parent[id(o)] = b
            if isinstance(o, N.For):
                self._loops(o.body, stack + [o])
            elif isinstance(o, N.PFor):
                self._loops(o.body, stack)

    def accessors(self, root: str):
        return iter(self.by_root.get(root, ()))

    def written_between(self, root: str, lo: int, hi: int) -> bool:
        return any(w and lo < self.pos[id(o)] < hi for o, _, w in self.by_root.get(root, ()))

    def writes_of(self, root: str) -> list[N.Op]:
        return [o for o, _, w in self.accessors(root) if w]

    def alloc_of(self, name: str) -> N.Alloc | None:
        a = self.sym.allocs.get(name)
        return a if a is not None and a not in self.m.params else None

    def defined_before(self, ev: str, op: N.Op) -> bool:
        d = self.sym.events.get(ev)
        return d is not None and self.pos[id(d)] < self.pos[id(op)]


_LAST = threading.local()  # the index of the module the patterns were last tried on


def _index(m: N.Module) -> _Index:
    """``_Index(m)``, built once per module: a pattern that does not fire leaves the module
    as it was, and the next pattern reads the same index (an index is a pure function of the
    module, which is immutable, and no pattern writes to one).  Per thread: the tuner
    compiles candidates on threads."""
    ix = getattr(_LAST, "ix", None)
    if ix is None or ix.m is not m:
        ix = _LAST.ix = _Index(m)
    return ix


def _same_shape(a, b) -> bool:
    return tuple(a) == tuple(b)


def _drop(m: N.Module, op: N.Op, fwd_op: N.Op | None = None) -> N.Module:
    """Delete ``op``; uses of its event are forwarded to ``fwd_op``'s preconditions."""
    src = fwd_op or op
    if isinstance(op, N.AsyncOp):
        m = remove_ops(m, lambda o: isinstance(o, N.AsyncOp) and o.ev == op.ev)
        return replace_event(m, op.ev, lambda r: forward_refs(r, src))
    return remove_ops(m, lambda o: o is op)


def _add_pre(m: N.Module, targets: set[int], extra: tuple[N.EvRef, ...]) -> N.Module:
    return _add_pre_each(m, {t: extra for t in targets})


# ----------------------------------------------------------------------------- patterns
def _try_alias(m: N.Module) -> N.Module | None:
    ix = _index(m)
    for a in ix.order:
        if not isinstance(a, N.Alloc) or ix.alloc_of(a.name) is None:
            continue
        t = a.name
        acc = list(ix.accessors(t))
        ins = [o for o, _, _ in acc if isinstance(o, N.Copy) and o.dst == N.TRef(t)]
        outs = [
            o
            for o, _, _ in acc
            if isinstance(o, N.Copy) and o.src == N.TRef(t) and ix.sym.root(o.dst) != t
        ]
        if len(ins) > 1 or len(outs) > 1 or not (ins or outs):
            continue
        cin, cout = (ins or [None])[0], (outs or [None])[0]
        x = cin.src if cin else cout.dst  # type: ignore[union-attr]
        if cin and cout and canon(cin.src, ix.sym) != canon(cout.dst, ix.sym):
            continue
        if isinstance(x, N.TRef) and x.name == t:
            continue
        xa = ix.sym.allocs[ix.sym.root(x)]
        if xa not in ix.m.params and ix.pos[id(xa)] > ix.pos[id(a)]:
            continue  # only a callee's fresh tensor stands for its caller's view
        xmem = ix.sym.mem(x)
        promote = _promotes(ix, a, cin, cout, x, xa, xmem)
        if not (a.mem == xmem or a.mem == "NONE" or promote):
            continue
        if not _same_shape(ix.sym.shape(x), a.shape):
            continue
        if (cin and cin.dims != a.dims) or (cout and cout.dims != a.dims):
            continue
        others = [o for o, _, w in acc if w and o is not cin]
        if cout is None and others:
            continue  # written but never copied back: it is a scratch tensor, not an alias
        if cout is None and not _readonly_after(ix, ix.sym.root(x), cin):
            continue
        m = _alias(m, ix, a, cin, cout, x)
        if promote:
            m = map_ops(
                m,
                lambda o: (
                    replace(o, mem=a.mem) if isinstance(o, N.Alloc) and o.name == xa.name else o
                ),
            )
        return m
    return None


def _promotes(
    ix: _Index,
    a: N.Alloc,
    cin: N.Copy | None,
    cout: N.Copy | None,
    x: N.View,
    xa: object,
    xmem: str,
) -> bool:
    """A task's fresh SHARED tensor whose whole value is copied out into its caller's
    NONE tensor made on the same processors (``launch("fill_table", E)`` on a block-local
    ``E``): the caller's tensor takes the callee's memory, as if the mapping had put it
    there, so the readers that want it in that memory alias it instead of copying."""
    return (
        cin is None
        and cout is not None
        and xmem == "NONE"
        and a.mem == "SHARED"
        and a.layout is None
        and isinstance(x, N.TRef)
        and isinstance(xa, N.Alloc)
        and xa not in ix.m.params
        and xa.dims == a.dims
    )


def _find(m: N.Module, ev: str) -> N.Op:
    for o in walk_ops(m.body):
        if isinstance(o, N.AsyncOp) and o.ev == ev:
            return o
    raise KeyError(ev)


def _readonly_after(ix: _Index, root: str, cin: N.Copy) -> bool:
    """No write to ``root`` can follow ``cin``: none later in program order, and none in
    a later iteration of a loop around ``cin`` that ``root`` outlives."""
    p = ix.pos[id(cin)]
    alloc = ix.sym.allocs[root]
    alloc_loops = [] if alloc in ix.m.params else ix.loops.get(id(alloc), [])
    loops = [lp for lp in ix.loops[id(cin)] if lp not in alloc_loops]
    for w in ix.writes_of(root):
        if ix.pos[id(w)] > p:
            return False
        if any(lp in ix.loops[id(w)] for lp in loops):
            return False
    return True


def _alias(
    m: N.Module, ix: _Index, a: N.Alloc, cin: N.Copy | None, cout: N.Copy | None, x: N.View
) -> N.Module:
    t = a.name
    extra: tuple[N.EvRef, ...] = ()
    if cout is not None:
        extra = tuple(r for r in cout.pre if ix.defined_before(r.name, a))
    if cin is not None:
        fwd = replace(cin, pre=tuple(dict.fromkeys(cin.pre + extra)))
        m = _drop(m, cin, fwd)
    elif extra:
        targets = {id(o) for o, _, _ in ix.accessors(t) if o is not cout}
        m = _add_pre(m, targets, extra)
    if cout is not None:
        m = _drop(m, _find(m, cout.ev))
    m = remove_ops(m, lambda o: isinstance(o, N.Alloc) and o.name == t)
    return substitute_view(m, t, x)


def _try_hoist(m: N.Module) -> N.Module | None:
    ix = _index(m)
    for lp in ix.order:
        if not isinstance(lp, N.For):
            continue
        body_evs = {o.ev for o in walk_ops(lp.body) if isinstance(o, N.AsyncOp)}
        body_allocs = {
            o.name for o in walk_ops(lp.body) if isinstance(o, (N.Alloc, N.Partition, N.Let))
        }
        for cin in lp.body.ops:
            if not (isinstance(cin, N.Copy) and isinstance(cin.dst, N.TRef)):
                continue
            t = cin.dst.name
            if t not in {o.name for o in lp.body.ops if isinstance(o, N.Alloc)}:
                continue
            couts = [
                o
                for o in lp.body.ops
                if isinstance(o, N.Copy)
                and o.src == cin.dst
                and canon(o.dst, ix.sym) == canon(cin.src, ix.sym)
            ]
            if len(couts) != 1 or any(r.name in body_evs for r in cin.pre):
                continue
            cout = couts[0]
            root = ix.sym.root(cin.src)
            if _depends_on(cin.src, ix, lp.var, body_allocs - _pure_chain(cin.src, ix)):
                continue
            users = [
                o
                for o, _, _ in ix.accessors(root)
                if o is not cin and o is not cout and lp in ix.loops[id(o)]
            ]
            if users:
                continue
            return _hoist(m, ix, lp, cin, cout)
    return None


def _pure_chain(v: N.View, ix: _Index) -> set[str]:
    return {p.partition for p in ix.sym.chain(v)}


def _depends_on(v: N.View, ix: _Index, var: str, inner: set[str]) -> bool:
    """Whether a view varies with the loop variable or names anything the loop body
    defines (tensors, partitions, Lets — a Let may hide the loop variable)."""
    while isinstance(v, N.Piece):
        p = ix.sym.parts[v.partition]
        used: set[str] = set()
        for e in list(v.idx) + [q for q in p.params if not isinstance(q, str)]:
            used |= free_vars(e)
        if var in used or used & inner:
            return True
        v = p.base
    return v.name in inner


def _hoist(m: N.Module, ix: _Index, lp: N.For, cin: N.Copy, cout: N.Copy) -> N.Module:
    t = cin.dst.name  # type: ignore[union-attr]
    chain = _pure_chain(cin.src, ix)
    moved_names = chain | {t}
    pre_ops = [
        o
        for o in walk_ops(lp.body)
        if isinstance(o, (N.Partition, N.Alloc)) and getattr(o, "name", None) in moved_names
    ]
    hoisted_in = replace(cin, pre=tuple(dict.fromkeys(cin.pre + lp.pre)))
    new_cout = replace(cout, pre=(ref_for(lp.ev, lp.dims, cout.dims),))

    def strip(b: N.Block) -> N.Block:
        ops = []
        for o in b.ops:
            if o is cin or o is cout or o in pre_ops:
                continue
            if isinstance(o, (N.For, N.PFor)):
                o = replace(o, body=strip(o.body))
            ops.append(o)
        ys: list[N.EvRef] = []
        for y in b.yields:
            ys += forward_refs(y, cout) if y.name == cout.ev else [y]
        return N.Block(tuple(ops), tuple(dict.fromkeys(ys)))

    new_loop = replace(
        lp,
        pre=tuple(dict.fromkeys(lp.pre + (ref_for(cin.ev, cin.dims, lp.dims),))),
        body=strip(lp.body),
    )
    # a body op that waited for the copy-out (through a task's collapsed event) waits for
    # what the copy-out waited for; uses of the hoisted copy-in then wait only for the
    # iteration start
    new_loop = replace(new_loop, body=_forward_in_block(new_loop.body, cout.ev, cout))
    new_loop = replace(new_loop, body=_forward_in_block(new_loop.body, cin.ev, cin))

    def place(b: N.Block) -> N.Block:
        ops = []
        for o in b.ops:
            if o is lp:
                ops += pre_ops + [hoisted_in, new_loop, new_cout]
                continue
            if isinstance(o, (N.For, N.PFor)):
                o = replace(o, body=place(o.body))
            ops.append(o)
        return N.Block(tuple(ops), b.yields)

    m = replace(m, body=place(m.body))
    # later users of the loop's event now also wait for the postamble copy-out
    return _also_wait(m, lp.ev, new_cout)


def _forward_in_block(b: N.Block, ev: str, removed: N.Op) -> N.Block:
    tmp = N.Module("tmp", (), (), b)
    tmp = replace_event(tmp, ev, lambda r: [x for x in forward_refs(r, removed) if x.name != ev])
    return tmp.body


def _also_wait(m: N.Module, loop_ev: str, cout: N.Copy) -> N.Module:
    def fix_refs(refs, dims):
        if any(r.name == loop_ev for r in refs):
            return tuple(dict.fromkeys(refs + (ref_for(cout.ev, cout.dims, dims),)))
        return refs

    def fix(b: N.Block, dims) -> N.Block:
        ops = []
        for o in b.ops:
            if o is cout:
                ops.append(o)
                continue
            if isinstance(o, (N.Copy, N.Call)):
                o = replace(o, pre=fix_refs(o.pre, o.dims))
            elif isinstance(o, (N.For, N.PFor)):
                o = replace(o, pre=fix_refs(o.pre, o.dims), body=fix(o.body, o.dims))
            ops.append(o)
        return N.Block(tuple(ops), fix_refs(b.yields, dims))

    return replace(m, body=fix(m.body, ()))


def _try_spill(m: N.Module) -> N.Module | None:
    ix = _index(m)
    copies = [o for o in ix.order if isinstance(o, N.Copy)]
    for cout in copies:
        if not isinstance(cout.src, N.TRef) or ix.sym.mem(cout.dst) != "NONE":
            continue
        r = cout.src.name
        rmem = ix.sym.allocs[r].mem
        key = canon(cout.dst, ix.sym)
        root = ix.sym.root(cout.dst)
        p0 = ix.pos[id(cout)]
        for cin in copies:
            if ix.pos[id(cin)] <= p0 or not isinstance(cin.dst, N.TRef):
                continue
            if canon(cin.src, ix.sym) != key:
                continue
            r2 = cin.dst.name
            if (
                ix.alloc_of(r2) is None
                or ix.sym.allocs[r2].mem != rmem
                or cin.dims != cout.dims
                or not _same_shape(ix.sym.allocs[r2].shape, ix.sym.allocs[r].shape)
                or ix.parent[id(cin)] is not ix.parent[id(cout)]
            ):
                continue
            if ix.written_between(root, p0, ix.pos[id(cin)]) or ix.written_between(
                r, p0, ix.pos[id(cin)]
            ):
                continue
            return _spill(m, ix, cout, cin)
    return None


def _spill(m: N.Module, ix: _Index, cout: N.Copy, cin: N.Copy) -> N.Module:
    r, r2 = cout.src.name, cin.dst.name  # type: ignore[union-attr]

    def fwd(u: N.EvRef) -> list[N.EvRef]:
        out: list[N.EvRef] = []
        for x in forward_refs(u, cin):
            # the same partition on both sides: a user waits on the writer of R with the
            # granularity it waited on the reader — the collapsed e[:] between them goes
            out += forward_refs(N.EvRef(cout.ev, u.idx), cout) if x.name == cout.ev else [x]
        return out

    m = remove_ops(m, lambda o: o is cin or (isinstance(o, N.Alloc) and o.name == r2))
    m = replace_event(m, cin.ev, fwd)
    return substitute_view(m, r2, N.TRef(r))


def _try_duplicate(m: N.Module) -> N.Module | None:
    ix = _index(m)
    copies = [o for o in ix.order if isinstance(o, N.Copy) and isinstance(o.dst, N.TRef)]
    for i, c1 in enumerate(copies):
        t1 = c1.dst.name  # type: ignore[union-attr]
        if ix.alloc_of(t1) is None or len(ix.writes_of(t1)) != 1:
            continue
        for c2 in copies[i + 1 :]:
            t2 = c2.dst.name  # type: ignore[union-attr]
            if t2 == t1 or ix.alloc_of(t2) is None or len(ix.writes_of(t2)) != 1:
                continue
            a1, a2 = ix.sym.allocs[t1], ix.sym.allocs[t2]
            if (
                canon(c1.src, ix.sym) != canon(c2.src, ix.sym)
                or a1.mem != a2.mem
                or not _same_shape(a1.shape, a2.shape)
                or a1.dtype != a2.dtype
                or c1.dims != c2.dims
                or ix.parent[id(c1)] is not ix.parent[id(c2)]
            ):
                continue
            if ix.written_between(ix.sym.root(c1.src), ix.pos[id(c1)], ix.pos[id(c2)]):
                continue
            m = remove_ops(m, lambda o: o is c2 or (isinstance(o, N.Alloc) and o.name == t2))
            m = replace_event(m, c2.ev, lambda u, e=c1.ev: [N.EvRef(e, u.idx)])
            return substitute_view(m, t2, N.TRef(t1))
    return None


def _try_self(m: N.Module) -> N.Module | None:
    """Self copy elimination (Fig. 10d): ``copy(t, t)`` goes, its event forwarded."""
    ix = _index(m)
    for o in ix.order:
        if isinstance(o, N.Copy) and canon(o.src, ix.sym) == canon(o.dst, ix.sym):
            return _drop(m, o)
    return None


def _try_dead(m: N.Module) -> N.Module | None:
    ix = _index(m)
    for o in ix.order:
        if isinstance(o, N.Copy) and ix.sym.mem(o.dst) == "NONE":
            root = ix.sym.root(o.dst)
            readers = [u for u, r, _ in ix.accessors(root) if r and u is not o]
            if not readers or _overwritten(ix, o, readers):
                return _drop(m, o)
    # unused pure ops
    used: set[str] = set()
    for o in ix.order:
        for v in _all_views(o):
            while isinstance(v, N.Piece):
                used.add(v.partition)
                v = ix.sym.parts[v.partition].base
            used.add(v.name)
    dead = [o for o in ix.order if isinstance(o, (N.Alloc, N.Partition)) and o.name not in used]
    if dead:
        ids = {id(o) for o in dead}
        return remove_ops(m, lambda o: id(o) in ids)
    return None


def _overwritten(ix: _Index, o: N.Copy, readers: list[N.Op]) -> bool:
    """A copy-out into a NONE view that a later copy of the same source in the same block
    writes again before anything (``readers``) reads the view (a spilled accumulator written
    back after one task and again after the next): the first write-back is dead."""
    p0, key = ix.pos[id(o)], canon(o.dst, ix.sym)
    first_read = min((ix.pos[id(u)] for u in readers if ix.pos[id(u)] > p0), default=len(ix.order))
    return any(
        isinstance(c, N.Copy)
        and c.src == o.src
        and c.dims == o.dims
        and ix.parent.get(id(c)) is ix.parent[id(o)]
        and canon(c.dst, ix.sym) == key
        for c in ix.order[p0 + 1 : first_read]
    )


# ----------------------------------------------------------------------------- carried values
def _try_snapshot(m: N.Module) -> N.Module | None:
    """Alias a fresh tensor to the view it was copied from although the view is written
    again later (a value carried around a loop, read before the step rewrites it): the
    copy-in is a snapshot, so every later write of the view's root must wait for every use
    of the snapshot, which the write-after-read edge on the dropped copy-in stood for."""
    ix = _index(m)
    for a in ix.order:
        if not isinstance(a, N.Alloc) or ix.alloc_of(a.name) is None:
            continue
        acc = list(ix.accessors(a.name))
        ins = [o for o, _, _ in acc if isinstance(o, N.Copy) and o.dst == N.TRef(a.name)]
        if len(ins) != 1 or any(w and o is not ins[0] for o, _, w in acc):
            continue  # only a tensor that is copied in once and then only read
        cin = ins[0]
        x = cin.src
        if any(
            isinstance(o, N.Copy)
            and ix.sym.root(o.src) == a.name
            and ix.sym.root(o.dst) == ix.sym.root(x)
            for o, _, _ in acc
        ):
            continue  # copied back: an ordinary alias (or nothing) once the write-back is gone
        xa = ix.sym.allocs[ix.sym.root(x)]
        if (
            (xa not in ix.m.params and ix.pos[id(xa)] > ix.pos[id(a)])
            or not (a.mem == "NONE" or a.mem == ix.sym.mem(x))
            or not _same_shape(ix.sym.shape(x), a.shape)
            or cin.dims != a.dims
        ):
            continue
        later = _later_writes(ix, ix.sym.root(x), cin, [o for o, _, _ in acc if o is not cin])
        if not later:
            continue
        uses = tuple(o for o, _, _ in acc if o is not cin)
        targets = {id(w): tuple(ref_for(u.ev, u.dims, w.dims) for u in uses) for w in later}
        m = _add_pre_each(m, targets)
        return _alias(m, _index(m), _find_alloc(m, a.name), _find(m, cin.ev), None, x)
    return None


def _later_writes(ix: _Index, root: str, cin: N.Copy, uses: list[N.Op]) -> list[N.Op] | None:
    """The writes of ``root`` after ``cin`` — all in ``cin``'s block, after every use of the
    snapshot — or None when a write could clobber the snapshot while it is still read (an
    earlier write in a loop around ``cin``, a write in another block, one before a use)."""
    p, blk = ix.pos[id(cin)], ix.parent[id(cin)]
    if any(ix.parent[id(u)] is not blk or not isinstance(u, N.AsyncOp) for u in uses):
        return None
    last_use = max((ix.pos[id(u)] for u in uses), default=p)
    alloc = ix.sym.allocs[root]
    outer = [] if alloc in ix.m.params else ix.loops.get(id(alloc), [])
    loops = [lp for lp in ix.loops[id(cin)] if lp not in outer]
    out = []
    for w in ix.writes_of(root):
        if ix.pos[id(w)] > p:
            if ix.parent[id(w)] is not blk or ix.pos[id(w)] < last_use:
                return None
            out.append(w)
        elif any(lp in ix.loops[id(w)] for lp in loops):
            return None
    return out


def _find_alloc(m: N.Module, name: str) -> N.Alloc:
    return next(o for o in walk_ops(m.body) if isinstance(o, N.Alloc) and o.name == name)


def _add_pre_each(m: N.Module, targets: dict[int, tuple[N.EvRef, ...]]) -> N.Module:
    def fix(b: N.Block) -> N.Block:
        ops = []
        for o in b.ops:
            if id(o) in targets:
                o = replace(o, pre=tuple(dict.fromkeys(o.pre + targets[id(o)])))
            if isinstance(o, (N.For, N.PFor)):
                o = replace(o, body=fix(o.body))
            ops.append(o)
        return N.Block(tuple(ops), b.yields)

    return replace(m, body=fix(m.body))


def _try_rotate(m: N.Module) -> N.Module | None:
    """A value carried around a loop through two tensors of the body — copied in from the
    carried view into R1, produced in R2 and copied back out — lives in one: R2 becomes R1
    when every use of R1 precedes every use of R2 (R1's value is dead by then), and each use
    of R2 waits for each use of R1 (the write-after-read the shared storage now has).  The
    pair is then an ordinary spill that hoisting moves out of the loop (FlashAttention-3's P
    of step k, read by step k+1's second GEMM, registers that rotate)."""
    ix = _index(m)
    for lp in ix.order:
        if not isinstance(lp, N.For):
            continue
        body = lp.body.ops
        allocs = {o.name: o for o in body if isinstance(o, N.Alloc)}
        for cin in body:
            if not (
                isinstance(cin, N.Copy) and isinstance(cin.dst, N.TRef) and cin.dst.name in allocs
            ):
                continue
            root = ix.sym.root(cin.src)
            if root in allocs or any(
                o for o in walk_ops(lp.body) if isinstance(o, N.Alloc) and o.name == root
            ):
                continue
            key = canon(cin.src, ix.sym)
            inside = [o for o, _, _ in ix.accessors(root) if lp in ix.loops[id(o)]]
            couts = [o for o in inside if o is not cin]
            if len(couts) != 1:
                continue
            cout = couts[0]
            if not (
                isinstance(cout, N.Copy)
                and isinstance(cout.src, N.TRef)
                and cout.src.name in allocs
                and ix.parent[id(cout)] is lp.body
                and canon(cout.dst, ix.sym) == key
                and ix.pos[id(cout)] > ix.pos[id(cin)]
            ):
                continue
            r1, r2 = allocs[cin.dst.name], allocs[cout.src.name]
            if r1.name == r2.name or (r1.mem, tuple(r1.shape), r1.dtype, r1.dims) != (
                r2.mem,
                tuple(r2.shape),
                r2.dtype,
                r2.dims,
            ):
                continue
            uses1 = [o for o, _, _ in ix.accessors(r1.name)]
            uses2 = [o for o, _, _ in ix.accessors(r2.name)]
            if any(ix.parent[id(u)] is not lp.body for u in uses1 + uses2):
                continue
            if max(ix.pos[id(u)] for u in uses1) > min(ix.pos[id(u)] for u in uses2):
                continue
            targets = {
                id(u2): tuple(ref_for(u1.ev, u1.dims, u2.dims) for u1 in uses1) for u2 in uses2
            }
            m = _add_pre_each(m, targets)
            m = remove_ops(m, lambda o: isinstance(o, N.Alloc) and o.name == r2.name)
            return substitute_view(m, r2.name, N.TRef(r1.name))
    return None


def _all_views(o: N.Op) -> list[N.View]:
    out: list[N.View] = []

    def grab(v):
        out.append(v)
        return v

    if isinstance(o, (N.For, N.PFor)):
        return out
    map_views(o, grab)
    return out


def _check_none(m: N.Module) -> None:
    ix = _index(m)
    for o in ix.order:
        for v, _, _ in views_of(o):
            root = ix.sym.root(v)
            if ix.sym.allocs[root].mem == "NONE":
                raise _none_error(m, ix, o, v, root)


def _copy_notes(
    ix: _Index, sites: Sites, users: list[tuple[N.Op, N.View]]
) -> list[tuple[str, Loc]]:
    """``this launch of 'mma' copies it into 'C' of instance 'mma_block' (SHARED)``: one note
    per launch statement whose copy-in or copy-out is among ``users`` (op, its NONE view)."""
    seen: dict[Loc, tuple[TensorSite, set[bool]]] = {}
    for o, v in users:
        if not isinstance(o, N.Copy):
            continue
        out = v is o.src
        t = sites.tensors.get(ix.sym.root(o.dst if out else o.src))
        if t is not None and t.mem_loc is not None:
            seen.setdefault(t.loc, (t, set()))[1].add(out)
    notes = []
    for loc, (t, dirs) in seen.items():
        what = f"'{t.param}' of instance '{t.instance}' ({t.mem})"
        how = (
            f"it to and from {what}"
            if len(dirs) == 2
            else f"it into {what}"
            if True in dirs
            else f"{what} back into it"
        )
        notes.append((f"this launch of '{t.task}' copies {how}", loc))
    return notes


def _none_error(m: N.Module, ix: _Index, o: N.Op, v: N.View, root: str) -> CypressError:
    """E044 at the ``mems`` entry that keeps ``v`` NONE, with notes at the launches whose
    copies still touch the tensor — ``o``'s first; the users that partition it differently
    are among them (dependence analysis' sites, ``m.sites``).  At the mapping file
    when the module carries no sites."""
    sites: Sites | None = m.sites
    out = isinstance(o, N.Copy) and v is o.src
    entry = sites.none_entry([p.partition for p in ix.sym.chain(v)], root) if sites else None
    here = (
        f" (as '{entry.param}' of instance '{entry.instance}')" if entry and entry.mem_loc else ""
    )
    notes: list[tuple[str, Loc]] = []
    if sites is not None:
        users = [(o, v)] + [
            (u, w) for u in ix.order for w, _, _ in views_of(u) if ix.sym.root(w) == root
        ]
        notes = _copy_notes(ix, sites, users)
    made = sites.tensors.get(root) if sites else None
    if made is not None and made.mem_loc is None:
        notes.append((f"%{root} is made here, in instance '{made.instance}'", made.loc))
    loc = (
        entry.mem_loc
        if entry and entry.mem_loc
        else made.loc
        if made
        else (m.target or Target.default(m.name)).loc
    )
    return CypressError(
        "E044",
        f"tensor %{root} is mapped to NONE{here} but must be materialized: an "
        f"operation still copies {'from' if out else 'into'} it after copy elimination",
        loc,
        notes=tuple(notes),
        hint="map the tensor's instance to a memory, or make the tasks that share it "
        "partition it the same way (same atoms, tiles and processors)",
    )


# the carried-value patterns come last: they only fire on what the paper's patterns leave
PATTERNS = (
    _try_self,
    _try_alias,
    _try_hoist,
    _try_spill,
    _try_duplicate,
    _try_dead,
    _try_snapshot,
    _try_rotate,
)


class NotConverged(RuntimeError):
    """The rewrite patterns kept firing past the bound of :func:`rewrite_to_fixpoint`: a
    compiler bug (the pass manager reports it as an internal error of copy-elimination)."""


def rewrite_to_fixpoint(m: N.Module) -> tuple[N.Module, int]:
    """Apply :data:`PATTERNS` (the first that fires, then from the start again) until none
    fires; return the module and the number of rewrites.  The bundled programs take about
    one rewrite per three ops of the vectorized module; past ``2 * ops + 64`` rewrites the
    patterns are cycling, which raises :class:`NotConverged` rather than stopping silently
    with whatever module the last rewrite left."""
    limit = 2 * sum(1 for _ in walk_ops(m.body)) + 64
    for rounds in range(limit + 1):
        for pat in PATTERNS:
            nm = pat(m)
            if nm is not None:
                m = nm
                break
        else:
            return m, rounds
    raise NotConverged(
        f"copy-elimination: the rewrite patterns did not reach a fixpoint in {limit} rewrites"
    )


def copy_elimination(m: N.Module) -> N.Module:
    """Remove copy-in/copy-out copies and the synchronization they imply (paper §4.2.3).

    Raises :class:`CypressError` E044 when a tensor mapped to NONE would have to be
    materialized, :class:`NotConverged` (an internal error) when the rewrites do not reach a
    fixpoint.
    """
    try:
        m, _ = rewrite_to_fixpoint(m)
        _check_none(m)
    finally:
        _LAST.ix = None  # the module's index is not kept past the pass
    return rename_tensors(m, program_names(m))


def program_names(m: N.Module) -> dict[str, str]:
    """New names for the register tensors that hold a tensor of the program: an allocation in
    REGISTER laid out as a piece of a NONE tensor (the program's ``Oacc``, ``S``, ``m``, which
    copy elimination left unmaterialized) is called after it, ``Oacc_reg`` (``_reg_1``, … when
    several hold one), not after the leaf task's parameter that first materialized it
    (``C_clear_thread``): the kernel's arrays read as the program does."""
    from cypressc.passes.dependence_analysis import Namer

    ops = list(walk_ops(m.body))
    parts = {o.name: o for o in ops if isinstance(o, N.Partition)}
    allocs = {o.name: o for o in ops if isinstance(o, N.Alloc)}
    names = Namer()
    names.used = names_in_use(m)
    new: dict[str, str] = {}
    for a in allocs.values():
        if a.mem != "REGISTER" or a.layout is None:
            continue
        root = allocs.get(N.view_root(a.layout, parts))
        if root is not None and root.mem == "NONE":
            new[a.name] = names.fresh(f"{root.name}_reg")
    return new


class CopyElimination(ModulePass):
    """The pass object of :func:`copy_elimination`."""

    name, section = "copy-elimination", "§4.2.3"

    def apply(self, m: N.Module) -> N.Module:
        return copy_elimination(m)
