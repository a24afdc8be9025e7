"""Substitution helpers over the event IR: scalar variables, views and events."""

from __future__ import annotations

from dataclasses import replace

from cypressc.ir import nodes as N

__all__ = ["subst_expr", "subst_view", "subst_op", "map_views", "rename_events", "walk_ops"]


def subst_expr(e: N.IExpr, sub: dict[str, N.IExpr]) -> N.IExpr:
    if isinstance(e, N.IVar):
        return sub.get(e.name, e)
    if isinstance(e, N.IBin):
        return N.ibin(e.op, subst_expr(e.a, sub), subst_expr(e.b, sub))
    return e


def subst_view(v: N.View, sub: dict[str, N.IExpr]) -> N.View:
    if isinstance(v, N.Piece):
        return N.Piece(v.partition, tuple(subst_expr(i, sub) for i in v.idx))
    return v


def _arg(a, sub):
    if isinstance(a, (N.TRef, N.Piece)):
        return subst_view(a, sub)
    if isinstance(a, N.AtomArg):
        return a
    return subst_expr(a, sub)


def _refs(refs, sub):
    return tuple(
        N.EvRef(r.name, tuple(None if i is None else subst_expr(i, sub) for i in r.idx))
        for r in refs
    )


def subst_op(op: N.Op, sub: dict[str, N.IExpr]) -> N.Op:
    """Substitute scalar variables in one op (not inside loop bodies)."""
    if not sub:
        return op
    if isinstance(op, N.Alloc):
        return replace(
            op,
            shape=tuple(subst_expr(s, sub) for s in op.shape),
            layout=None if op.layout is None else subst_view(op.layout, sub),
        )
    if isinstance(op, N.Let):
        return replace(op, value=subst_expr(op.value, sub))
    if isinstance(op, N.Partition):
        params = tuple(subst_expr(p, sub) if not isinstance(p, str) else p for p in op.params)
        return replace(
            op,
            base=subst_view(op.base, sub),
            params=params,
            piece_shape=tuple(subst_expr(s, sub) for s in op.piece_shape),
        )
    if isinstance(op, N.Copy):
        return replace(
            op, src=subst_view(op.src, sub), dst=subst_view(op.dst, sub), pre=_refs(op.pre, sub)
        )
    if isinstance(op, N.Call):
        return replace(op, args=tuple(_arg(a, sub) for a in op.args), pre=_refs(op.pre, sub))
    if isinstance(op, (N.For, N.PFor)):
        return replace(
            op,
            lo=subst_expr(op.lo, sub),
            hi=subst_expr(op.hi, sub),
            pre=_refs(op.pre, sub),
            body=N.Block(tuple(subst_op(o, sub) for o in op.body.ops), _refs(op.body.yields, sub)),
        )
    raise TypeError(op)


def map_views(op: N.Op, fn) -> N.Op:
    """Apply ``fn(view) -> view`` to every view an op names (recursing into loop bodies)."""
    if isinstance(op, N.Alloc):
        return replace(op, layout=None if op.layout is None else fn(op.layout))
    if isinstance(op, N.Partition):
        return replace(op, base=fn(op.base))
    if isinstance(op, N.Copy):
        return replace(op, src=fn(op.src), dst=fn(op.dst))
    if isinstance(op, N.Call):
        return replace(
            op, args=tuple(fn(a) if isinstance(a, (N.TRef, N.Piece)) else a for a in op.args)
        )
    if isinstance(op, (N.For, N.PFor)):
        return replace(
            op, body=N.Block(tuple(map_views(o, fn) for o in op.body.ops), op.body.yields)
        )
    return op


def rename_events(op: N.Op, fn) -> N.Op:
    """Apply ``fn(refs) -> refs`` to every precondition and yield list (recursively)."""
    if isinstance(op, (N.Copy, N.Call)):
        return replace(op, pre=fn(op.pre))
    if isinstance(op, (N.For, N.PFor)):
        return replace(
            op,
            pre=fn(op.pre),
            body=N.Block(tuple(rename_events(o, fn) for o in op.body.ops), fn(op.body.yields)),
        )
    return op


def walk_ops(block: N.Block):
    """Every op of a block, pre-order, descending into loop bodies."""
    for op in block.ops:
        yield op
        if isinstance(op, (N.For, N.PFor)):
            yield from walk_ops(op.body)
