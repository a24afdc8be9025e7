"""Copy elimination's patterns for copies that do nothing (Cypress paper §4.2.3, Fig. 10c):
a second copy of a view into the same memory (**duplicate**), a copy of a view onto
itself, and dead copies into NONE tensors and unused pure ops.  Each ``_try_*`` returns
the rewritten module, or None when it does not fire.
"""

from __future__ import annotations

from cypressc.ir import nodes as N
from cypressc.ir.analysis import canon, remove_ops, replace_event, substitute_view
from cypressc.ir.subst import map_views
from cypressc.lang.kinds import Mem
from cypressc.passes.copy_index import _drop, _Index, _index, _same_shape


def _try_duplicate(m: N.Module) -> N.Module | None:
    ix = _index(m)
    copies = [
        o
        for o in ix.order
        if isinstance(o, N.Copy) and isinstance(o.dst, N.TRef) and not ix.reduced(o.dst.name)
    ]
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
        if isinstance(o, N.Copy) and not o.reduce and canon(o.src, ix.sym) == canon(o.dst, ix.sym):
            return _drop(m, o)
    return None


def _try_dead(m: N.Module) -> N.Module | None:
    ix = _index(m)
    for o in ix.order:
        if isinstance(o, N.Copy) and ix.sym.mem(o.dst) == Mem.NONE:
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


def _all_views(o: N.Op) -> list[N.View]:
    out: list[N.View] = []

    def grab(v):
        out.append(v)
        return v

    if isinstance(o, (N.For, N.PFor)):
        return out
    map_views(o, grab)
    return out
