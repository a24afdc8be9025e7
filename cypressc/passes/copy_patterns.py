"""Copy elimination's patterns that remove synchronization with the copies (Cypress paper
§4.2.3, Fig. 10): **alias** (Fig. 10d: a fresh tensor in the memory of the view it was
copied from *is* that view), **spill hoisting** (Fig. 10b: a copy-in at the top of a loop
body and its copy-out at the bottom move out of the loop) and **spill elimination**
(Fig. 10a: a copy-out into a piece and a copy-in of it go, with the synchronization
between them).  Each ``_try_*`` returns the rewritten module, or None when it does not fire.
"""

from __future__ import annotations

from dataclasses import replace

from cypressc.ir import nodes as N
from cypressc.ir.analysis import (
    canon,
    forward_refs,
    free_vars,
    map_ops,
    ref_for,
    remove_ops,
    replace_event,
    substitute_view,
)
from cypressc.ir.subst import walk_ops
from cypressc.lang.kinds import Mem
from cypressc.passes.copy_index import _add_pre, _drop, _find, _Index, _index, _same_shape


def _try_alias(m: N.Module) -> N.Module | None:
    ix = _index(m)
    for a in ix.order:
        if not isinstance(a, N.Alloc) or ix.alloc_of(a.name) is None:
            continue
        t = a.name
        if ix.reduced(t):
            continue  # a private copy added back by copy.add is its own storage
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
        if not (a.mem == xmem or a.mem == Mem.NONE or promote):
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
        and xmem == Mem.NONE
        and a.mem == Mem.SHARED
        and a.layout is None
        and isinstance(x, N.TRef)
        and isinstance(xa, N.Alloc)
        and xa not in ix.m.params
        and xa.dims == a.dims
    )


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
            if t not in {o.name for o in lp.body.ops if isinstance(o, N.Alloc)} or ix.reduced(t):
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
        if not isinstance(cout.src, N.TRef) or ix.sym.mem(cout.dst) != Mem.NONE or cout.reduce:
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
