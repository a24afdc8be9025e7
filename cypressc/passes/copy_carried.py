"""Copy elimination's patterns for values carried around a loop (Cypress paper §4.2.3,
beyond Fig. 10's): a copy-in that is a snapshot of a view written again later
(**snapshot**: the later writes wait for its uses), and a value rotating through two
tensors of a loop body that can live in one (**rotate**: FlashAttention-3's P).  They run
after the paper's patterns, on what those leave.
"""

from __future__ import annotations

from cypressc.ir import nodes as N
from cypressc.ir.analysis import canon, ref_for, remove_ops, substitute_view
from cypressc.ir.subst import walk_ops
from cypressc.lang.kinds import Mem
from cypressc.passes.copy_index import (
    _add_pre_each,
    _find,
    _find_alloc,
    _Index,
    _index,
    _same_shape,
)
from cypressc.passes.copy_patterns import _alias


def _try_snapshot(m: N.Module) -> N.Module | None:
    """Alias a fresh tensor to the view it was copied from although the view is written
    again later (a value carried around a loop, read before the step rewrites it): the
    copy-in is a snapshot, so every later write of the view's root must wait for every use
    of the snapshot, which the write-after-read edge on the dropped copy-in stood for."""
    ix = _index(m)
    for a in ix.order:
        if not isinstance(a, N.Alloc) or ix.alloc_of(a.name) is None:
            continue
        if ix.reduced(a.name):
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
            or not (a.mem == Mem.NONE or a.mem == ix.sym.mem(x))
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
            if ix.reduced(root) or ix.reduced(cin.dst.name):
                continue
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
