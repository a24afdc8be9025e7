"""Copy elimination's pattern for a reduction out of an unmaterialized private copy (issue
#38, Cypress paper §4.2.3 extended to Legion's reduction privilege): **reduce forwarding**.

A task holding ``reduces=`` on a tensor gets a fresh private copy, which dependence analysis
adds back into the caller's view with ``copy.add``.  When the mapping keeps that private
copy unmaterialized (NONE above the threads, like an mma tree's accumulator) and the only
write to it is one copy of a materialized tensor (the registers a store task's threads
copied their fragment into), the value never needs a home of its own: the write itself
becomes the reduction, into the same piece of the caller's view.  The ``copy.add`` goes,
its users wait on the new reduction instead, and the private copy is replaced by the view
it is added into (its partitions become partitions of that view).  This is how a register
accumulator reaches ``red.global.add`` (FlashAttention-3's dQ atomics) without a staging
tensor.  ``_try_reduce_forward`` returns the rewritten module, or None when it does not fire.
"""

from __future__ import annotations

from dataclasses import replace

from cypressc.ir import nodes as N
from cypressc.ir.analysis import dedup_refs, map_ops, remove_ops, replace_event, substitute_view
from cypressc.lang.kinds import Mem
from cypressc.passes.copy_index import _Index, _index

__all__ = ["_try_reduce_forward"]


def _try_reduce_forward(m: N.Module) -> N.Module | None:
    ix = _index(m)
    for red in ix.order:
        if not (isinstance(red, N.Copy) and red.reduce and isinstance(red.src, N.TRef)):
            continue
        cout = _sole_writer(ix, red)
        if cout is not None:
            return _forward(m, ix, red, cout)
    return None


def _sole_writer(ix: _Index, red: N.Copy) -> N.Copy | None:
    """The one copy that writes ``red``'s NONE source before it, in the same block and on
    the processors of ``red`` (and maybe more), if the source has no other reader or writer
    and every other precondition of ``red`` is defined before that copy; else None."""
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
        or ix.parent[id(cout)] is not ix.parent[id(red)]
        or ix.pos[id(cout)] > ix.pos[id(red)]
        or cout.dims[: len(red.dims)] != red.dims
    ):
        return None
    # the write runs once per run of the reduction, so adding it in place of writing it adds
    # each element the private copy held exactly once
    if ix.loops[id(cout)] != ix.loops[id(red)]:
        return None
    extra = [r for r in red.pre if r.name != cout.ev]
    if any(not ix.defined_before(r.name, cout) for r in extra):
        return None
    return cout


def _forward(m: N.Module, ix: _Index, red: N.Copy, cout: N.Copy) -> N.Module:
    t = red.src.name  # type: ignore[union-attr]
    # the reduction's other preconditions (earlier accesses of the target) now gate the write;
    # they are indexed by red's processors, which lead cout's
    extra = tuple(r for r in red.pre if r.name != cout.ev)
    new = replace(cout, reduce=red.reduce, pre=dedup_refs(cout.pre + extra))
    m = map_ops(m, lambda o: new if o is cout else o)
    m = remove_ops(m, lambda o: o is red or (isinstance(o, N.Alloc) and o.name == t))
    pad = (None,) * (len(cout.dims) - len(red.dims))
    m = replace_event(m, red.ev, lambda r: [N.EvRef(cout.ev, tuple(r.idx) + pad)])
    return substitute_view(m, t, red.dst)
