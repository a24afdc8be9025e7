"""Copy elimination's pattern for a reduction out of an unmaterialized private copy (issue
#38, Cypress paper §4.2.3 extended to Legion's reduction privilege): **reduce forwarding**.

A task holding ``reduces=`` on a tensor gets a fresh private copy, which dependence analysis
adds back into the caller's view with ``copy.add``.  When the mapping keeps that private
copy unmaterialized (NONE above the threads, like an mma tree's accumulator) and the only
write to it is one copy of a materialized tensor (the registers a store task's threads
copied their fragment into), the value never needs a home of its own: the write itself
becomes the reduction, into the same piece of the caller's view.  The ``copy.add`` goes,
its users wait on the new reduction instead (or on the loop around it), and the private
copy is replaced by the view it is added into (its partitions become partitions of that
view).  This is how a register accumulator reaches ``red.global.add`` (FlashAttention-3's
dQ atomics) without a staging tensor.

The write may stand next to the ``copy.add`` or directly in the body of a sequential loop
next to it, when each iteration writes its own piece (a piece of a blocks partition indexed
by the loop variable: FlashAttention-3's dQ, one query block per step): each element the
private copy holds is then written once, so adding instead of writing adds it once.
``_try_reduce_forward`` returns the rewritten module, or None when it does not fire.
"""

from __future__ import annotations

from dataclasses import replace

from cypressc.ir import nodes as N
from cypressc.ir.analysis import (
    dedup_refs,
    free_vars,
    map_ops,
    remove_ops,
    replace_event,
    substitute_view,
)
from cypressc.lang.kinds import Mem, PartKind
from cypressc.passes.copy_index import _Index, _index

__all__ = ["_try_reduce_forward"]


def _try_reduce_forward(m: N.Module) -> N.Module | None:
    ix = _index(m)
    for red in ix.order:
        if not (isinstance(red, N.Copy) and red.reduce and isinstance(red.src, N.TRef)):
            continue
        found = _sole_writer(ix, red)
        if found is not None:
            return _forward(m, ix, red, *found)
    return None


def _sole_writer(ix: _Index, red: N.Copy) -> tuple[N.Copy, N.For | None] | None:
    """The one copy that writes ``red``'s NONE source before it, on the processors of ``red``
    (and maybe more), and the loop around it (None: it stands next to ``red``), if the source
    has no other reader or writer and every other precondition of ``red`` is defined before
    it; else None."""
    t = red.src.name  # type: ignore[union-attr]
    a = ix.alloc_of(t)
    if a is None or a.mem != Mem.NONE:
        return None
    others = [(o, r, w) for o, r, w in ix.accessors(t) if o is not red]
    if any(r for _, r, _ in others) or len(others) != 1:
        return None
    cout = others[0][0]
    if (
        not isinstance(cout, N.Copy)
        or cout.reduce
        or ix.sym.mem(cout.src) == Mem.NONE
        or ix.sym.root(cout.src) == t
        or ix.pos[id(cout)] > ix.pos[id(red)]
        or cout.dims[: len(red.dims)] != red.dims
    ):
        return None
    lp = None
    if ix.parent[id(cout)] is not ix.parent[id(red)]:
        lp = _loop_of(ix, red, cout)
        if lp is None:
            return None
    anchor = lp or cout
    extra = _extra_pre(red, cout, lp)
    if any(not ix.defined_before(r.name, anchor) for r in extra):
        return None
    return cout, lp


def _loop_of(ix: _Index, red: N.Copy, cout: N.Copy) -> N.For | None:
    """The sequential loop next to ``red`` whose body holds ``cout`` directly, if its
    iterations write distinct pieces (``cout`` writes a piece of a blocks partition indexed
    by the loop variable, and nothing else along the view moves with it) and the loop yields
    ``cout``'s event (so what waits for the loop waits for the writes); else None."""
    loops = ix.loops[id(cout)]
    if not loops or loops[:-1] != ix.loops[id(red)]:
        return None
    lp = loops[-1]
    if ix.parent[id(lp)] is not ix.parent[id(red)] or ix.parent[id(cout)] is not lp.body:
        return None
    if lp.dims != red.dims or not any(r.name == cout.ev for r in lp.body.yields):
        return None
    pinned = False
    for piece in ix.sym.chain(cout.dst):
        part = ix.sym.parts[piece.partition]
        uses = [lp.var in free_vars(i) for i in piece.idx]
        by_var = [isinstance(i, N.IVar) and i.name == lp.var for i in piece.idx]
        if part.kind == PartKind.BLOCKS and any(by_var) and uses == by_var and not pinned:
            pinned = True
        elif any(uses) or any(
            lp.var in free_vars(p) for p in part.params if not isinstance(p, str)
        ):
            return None
    return lp if pinned else None


def _extra_pre(red: N.Copy, cout: N.Copy, lp: N.For | None) -> tuple[N.EvRef, ...]:
    """``red``'s preconditions besides the write it adds (its event, or its loop's): the
    earlier accesses of the view it adds into, which now gate the write.  They are indexed by
    ``red``'s processors, which lead ``cout``'s."""
    skip = {cout.ev} | ({lp.ev} if lp is not None else set())
    return tuple(r for r in red.pre if r.name not in skip)


def _forward(m: N.Module, ix: _Index, red: N.Copy, cout: N.Copy, lp: N.For | None) -> N.Module:
    t = red.src.name  # type: ignore[union-attr]
    new = replace(cout, reduce=red.reduce, pre=dedup_refs(cout.pre + _extra_pre(red, cout, lp)))
    m = map_ops(m, lambda o: new if o is cout else o)
    m = remove_ops(m, lambda o: o is red or (isinstance(o, N.Alloc) and o.name == t))
    if lp is not None:  # the loop's event covers the reductions its iterations make
        m = replace_event(m, red.ev, lambda r: [N.EvRef(lp.ev, r.idx)])
    else:
        pad = (None,) * (len(cout.dims) - len(red.dims))
        m = replace_event(m, red.ev, lambda r: [N.EvRef(cout.ev, tuple(r.idx) + pad)])
    return substitute_view(m, t, red.dst)
