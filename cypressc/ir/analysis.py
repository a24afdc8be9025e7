"""Whole-module helpers the passes share: symbol tables, canonical views, event
forwarding with index composition, and dead-op removal."""

from __future__ import annotations

import functools
from dataclasses import fields, is_dataclass, replace

from cypressc.ir import nodes as N
from cypressc.ir.printer import block_grid
from cypressc.ir.shapes import layout_key, static
from cypressc.ir.subst import map_views, rename_events, walk_ops
from cypressc.lang.kinds import PartKind, Proc

__all__ = [
    "block_dims",
    "element_origin",
    "Symbols",
    "views_of",
    "reduces",
    "canon",
    "dim_procs",
    "forward_refs",
    "replace_event",
    "remove_ops",
    "map_ops",
    "substitute_view",
    "names_in_use",
    "rename_tensors",
    "binary_exprs",
    "module_ops",
    "ref_for",
    "free_vars",
    "free_vars_through",
    "shapeless_scalars",
    "proc_names",
    "dedup_refs",
    "exprs_of",
]


class Symbols:
    """Allocations and partitions of a module by name (module parameters included)."""

    def __init__(self, m: N.Module) -> None:
        self.allocs: dict[str, N.Alloc] = {a.name: a for a in m.params}
        self.parts: dict[str, N.Partition] = {}
        self.events: dict[str, N.Op] = {}
        for op in walk_ops(m.body):
            if isinstance(op, N.Alloc):
                self.allocs[op.name] = op
            elif isinstance(op, N.Partition):
                self.parts[op.name] = op
            if isinstance(op, N.AsyncOp):
                self.events[op.ev] = op

    def root(self, v: N.View) -> str:
        return N.view_root(v, self.parts)

    def chain(self, v: N.View) -> list[N.Piece]:
        """The pieces from ``v`` down to its root tensor (``v`` first; empty for a TRef)."""
        out = []
        while isinstance(v, N.Piece):
            out.append(v)
            v = self.parts[v.partition].base
        return out

    def mem(self, v: N.View) -> str:
        return self.allocs[self.root(v)].mem

    def shape(self, v: N.View) -> tuple[N.IExpr, ...]:
        if isinstance(v, N.TRef):
            return self.allocs[v.name].shape
        return self.parts[v.partition].piece_shape


def free_vars(e) -> set[str]:
    """The scalar variable names an index expression uses (Lets are not expanded)."""
    if isinstance(e, N.IVar):
        return {e.name}
    if isinstance(e, N.IBin):
        return free_vars(e.a) | free_vars(e.b)
    return set()


def block_dims(e: N.IExpr, lets: dict[str, N.IExpr]) -> set[int]:
    """The grid dimensions (``block_id`` dims) index expression ``e`` depends on, through the
    Lets it names (``lets``: name -> value).  Syntactic, so sound for independence: an
    expression that names no ``block_id.d`` has the same value in blocks that differ only
    along ``d``."""
    exprs = [e, *(lets[v] for v in free_vars_through(e, lets) if v in lets)]
    return {p.dim for x in exprs for p in _iprocs(x) if p.proc == Proc.BLOCK}


def _iprocs(e) -> list[N.IProc]:
    """The processor indices ``e`` names (Lets not expanded)."""
    if isinstance(e, N.IProc):
        return [e]
    if isinstance(e, N.IBin):
        return _iprocs(e.a) + _iprocs(e.b)
    return []


def element_origin(
    sym: Symbols, v: N.View
) -> tuple[str, list[N.IExpr], list[bool], list[tuple[N.Partition, N.Piece]]]:
    """Where view ``v`` starts in its root tensor: the root's name, the element origin per
    root dimension (index expressions), which root dimensions ``v`` keeps (a slices
    partition drops its dimension), and the mma partitions on the way (outermost first),
    which lay out rather than offset."""
    chain = sym.chain(v)
    root = sym.root(v)
    rank = len(sym.allocs[root].shape)
    org: list[N.IExpr] = [N.IConst(0)] * rank
    keep = [True] * rank
    mmas = []
    for piece in reversed(chain):
        p = sym.parts[piece.partition]
        logical = [d for d in range(rank) if keep[d]]
        if p.kind == PartKind.BLOCKS:
            for d, i, b in zip(logical, piece.idx, p.params):
                org[d] = N.ibin("+", org[d], N.ibin("*", i, b))
        elif p.kind == PartKind.SLICES:
            d = logical[int(p.params[0].value)]
            org[d] = N.ibin("+", org[d], piece.idx[0])
            keep[d] = False
        else:
            mmas.append((p, piece))
    return root, org, keep, mmas


def shapeless_scalars(m: N.Module) -> list[str]:
    """The module's sizes and ``int`` parameters that fix no tensor's shape (a flag such as
    FlashAttention's ``causal``), in parameter order."""
    shaped = {v for p in m.params for x in p.shape for v in free_vars(x)}
    return [s for s in m.scalars if s not in shaped]


def free_vars_through(e, lets) -> set[str]:
    """The variables ``e`` depends on, through the Lets (name -> value) it names."""
    out: set[str] = set()
    todo = list(free_vars(e))
    while todo:
        v = todo.pop()
        if v not in out:
            out.add(v)
            if v in lets:
                todo += free_vars(lets[v])
    return out


def proc_names(e) -> set[str]:
    """The processor levels (``WARPGROUP``, ``THREAD``, ...) whose index ``e`` uses."""
    if isinstance(e, N.IProc):
        return {e.proc}
    if isinstance(e, N.IBin):
        return proc_names(e.a) | proc_names(e.b)
    return set()


def exprs_of(op: N.Op) -> list[N.IExpr]:
    """The scalar expressions one op holds (not those of ops in its loop body): shapes, Let
    values, partition extents, view indices, a call's scalar operands, loop bounds."""

    def view(v) -> list[N.IExpr]:
        return list(v.idx) if isinstance(v, N.Piece) else []

    if isinstance(op, N.Alloc):
        return [*op.shape, *(view(op.layout) if op.layout is not None else [])]
    if isinstance(op, N.Let):
        return [op.value]
    if isinstance(op, N.Partition):
        return [*view(op.base), *(p for p in op.params if not isinstance(p, str)), *op.piece_shape]
    if isinstance(op, N.Copy):
        return [*view(op.src), *view(op.dst)]
    if isinstance(op, N.Call):
        return [
            x
            for a in op.args
            for x in (
                view(a)
                if isinstance(a, (N.TRef, N.Piece))
                else [a]
                if not isinstance(a, N.AtomArg)
                else []
            )
        ]
    if isinstance(op, (N.For, N.PFor)):
        return [op.lo, op.hi, *(d.extent for d in op.dims)]
    return []


def views_of(op: N.Op) -> list[tuple[N.View, bool, bool]]:
    """(view, reads, writes) for each tensor a copy or leaf call touches directly (leaf
    operands by the intrinsics registry's rules; a ``copy.add`` writes its ``dst``, see
    :func:`reduces`)."""
    from cypressc.lang.intrinsics import leaf_of

    if isinstance(op, N.Copy):
        return [(op.src, True, False), (op.dst, False, True)]
    if isinstance(op, N.Call):
        rules = leaf_of(op).operands
        return [
            (a, r.reads, r.writes)
            for a, r in zip(op.args, rules)
            if isinstance(a, (N.TRef, N.Piece))
        ]
    return []


def reduces(op: N.Op) -> bool:
    """Whether ``op`` is a reduction (``copy.add``): its write of ``dst`` adds into it, so
    it commutes with the other reductions and overwrites nothing whole."""
    return isinstance(op, N.Copy) and op.reduce is not None


def canon(v: N.View, sym: Symbols) -> tuple:
    """A structural key of a view: its root and the chain of (layout, index) — two views with
    equal keys hold the same elements (:func:`cypressc.ir.shapes.layout_key`)."""
    chain = []
    while isinstance(v, N.Piece):
        p = sym.parts[v.partition]
        chain.append((layout_key(p.kind, p.params), v.idx))
        v = p.base
    return (v.name, tuple(reversed(chain)))


def slices_of(sym: Symbols, v: N.View) -> list[tuple[N.Partition, int, N.IExpr]]:
    """The slices view ``v`` takes on its way down from its tensor: (partition, dimension of
    the partition's base, index) for each ``partition_by_slices`` piece and each one-element
    block dimension of a ``partition_by_blocks`` piece (``SBp[j, 0]`` of blocks ``(1, KB)``)
    in its chain."""
    out = []
    for piece in sym.chain(v):
        part = sym.parts[piece.partition]
        if part.kind == PartKind.SLICES:
            out.append((part, int(part.params[0].value), piece.idx[0]))
        elif part.kind == PartKind.BLOCKS:
            out += [
                (part, d, i)
                for d, (b, i) in enumerate(zip(part.params, piece.idx))
                if static(b) == 1
            ]
    return out


def grid_extents(body: N.Block) -> dict[N.IProc, N.IExpr]:
    """The kernel's grid: each ``block_id`` dimension of block program ``body`` (its
    :func:`~cypressc.ir.printer.block_grid`) with its extent."""
    grid = block_grid(body)
    return dict(zip(dim_procs(grid), (d.extent for d in grid)))


def dim_procs(dims: tuple[N.Dim, ...]) -> tuple[N.IProc, ...]:
    """The processor-index expression of each dimension (BLOCK dims numbered in order)."""
    return _procs_of(tuple(d.proc for d in dims))


@functools.cache
def _procs_of(procs: tuple[str, ...]) -> tuple[N.IProc, ...]:
    out, g = [], 0
    for proc in procs:
        if proc == Proc.BLOCK:
            out.append(N.IProc(Proc.BLOCK, g))
            g += 1
        else:
            out.append(N.IProc(proc, 0))
    return tuple(out)


def ref_for(ev: str, ev_dims: tuple[N.Dim, ...], user_dims: tuple[N.Dim, ...]) -> N.EvRef:
    """A reference to ``ev`` from an op replicated over ``user_dims``: point-wise along the
    leading dimensions both share, broadcast along the rest."""
    idx: list[N.IExpr | None] = []
    same = True
    for i, (d, p) in enumerate(zip(ev_dims, dim_procs(ev_dims))):
        same = same and i < len(user_dims) and user_dims[i] == d
        idx.append(p if same else None)
    return N.EvRef(ev, tuple(idx))


def forward_refs(user: N.EvRef, removed: N.Op) -> list[N.EvRef]:
    """The refs a use of ``removed``'s event becomes when ``removed`` is deleted:
    its preconditions, re-indexed through the use (paper Fig. 10, ``b[e2/e1]``)."""
    sub: dict[N.IProc, N.IExpr | None] = {}
    for p, i in zip(dim_procs(removed.dims), user.idx):
        sub[p] = i
    out: list[N.EvRef] = []
    for r in removed.pre:  # type: ignore[union-attr]
        idx = tuple(
            None if x is None else sub.get(x, x) if isinstance(x, N.IProc) else x for x in r.idx
        )
        nr = N.EvRef(r.name, idx)
        if nr not in out:
            out.append(nr)
    return out


def dedup_refs(refs) -> tuple[N.EvRef, ...]:
    """The event references in first-seen order, each once."""
    return tuple(dict.fromkeys(refs))


def replace_event(m: N.Module, ev: str, fn) -> N.Module:
    """Replace every use ``ev[idx]`` by ``fn(ref) -> list[EvRef]``."""

    def refs(rs):
        out = []
        for r in rs:
            out += fn(r) if r.name == ev else [r]
        return dedup_refs(out)

    return replace(
        m, body=N.Block(tuple(rename_events(o, refs) for o in m.body.ops), refs(m.body.yields))
    )


def remove_ops(m: N.Module, pred) -> N.Module:
    """Delete every op (at any depth) for which ``pred(op)`` holds."""

    def blk(b: N.Block) -> N.Block:
        ops = []
        for o in b.ops:
            if pred(o):
                continue
            if isinstance(o, (N.For, N.PFor)):
                o = replace(o, body=blk(o.body))
            ops.append(o)
        return N.Block(tuple(ops), b.yields)

    return replace(m, body=blk(m.body))


def map_ops(m: N.Module, fn) -> N.Module:
    """Replace every op that is not a loop (at any depth) by ``fn(op)``."""

    def blk(b: N.Block) -> N.Block:
        return N.Block(
            tuple(
                replace(o, body=blk(o.body)) if isinstance(o, (N.For, N.PFor)) else fn(o)
                for o in b.ops
            ),
            b.yields,
        )

    return replace(m, body=blk(m.body))


def names_in_use(m: N.Module) -> set[str]:
    """Every name ``m`` defines: allocations, partitions, lets, parameters, sizes, floats."""
    out = {o.name for o in walk_ops(m.body) if isinstance(o, (N.Alloc, N.Partition, N.Let))}
    return out | {p.name for p in m.params} | set(m.scalars) | set(m.floats)


def rename_tensors(m: N.Module, new: dict[str, str]) -> N.Module:
    """``m`` with allocations renamed (``new``: old name -> new name): their ``Alloc``, every
    whole-tensor view of them (a partition's base, a layout, an operand) and the module's
    ``sites``.  Partitions keep their names.  For modules before ``sync-insertion`` (whose
    ops and pass results name tensors too).  Raises ``ValueError`` if a new name is taken."""
    targets = list(new.values())
    taken = names_in_use(m) - set(new)
    if clash := sorted({v for v in targets if v in taken or targets.count(v) > 1}):
        raise ValueError(f"rename_tensors: {', '.join(clash)} already taken")

    def view(v: N.View) -> N.View:
        return N.TRef(new[v.name]) if isinstance(v, N.TRef) and v.name in new else v

    def op(o: N.Op) -> N.Op:
        o = map_views(o, view)
        return replace(o, name=new[o.name]) if isinstance(o, N.Alloc) and o.name in new else o

    out = map_ops(m, op)
    if m.sites is not None:
        from cypressc.ir.origin import Sites

        tensors = {
            new.get(k, k): replace(s, caller_root=new.get(s.caller_root, s.caller_root))
            for k, s in m.sites.tensors.items()
        }
        parts = {k: replace(s, base=new.get(s.base, s.base)) for k, s in m.sites.partitions.items()}
        out = replace(out, sites=Sites(tensors, parts))
    return out


def substitute_view(m: N.Module, name: str, new: N.View) -> N.Module:
    """Replace the whole tensor ``%name`` by the view ``new`` everywhere."""

    def fn(v: N.View) -> N.View:
        return new if isinstance(v, N.TRef) and v.name == name else v

    return replace(m, body=N.Block(tuple(map_views(o, fn) for o in m.body.ops), m.body.yields))


def module_ops(m: N.Module) -> list[N.Op]:
    return list(walk_ops(m.body))


def binary_exprs(x: object):
    """Every :class:`~cypressc.ir.nodes.IBin` in ``x`` (an op, a block, a module's body, a
    tuple of them), outer ones first: a walk over the dataclass fields, for the checks that
    look at what a program divides or compares by (:mod:`cypressc.ir.schedule_check`,
    :mod:`cypressc.backend.sizes`)."""
    if isinstance(x, N.IBin):
        yield x
        yield from binary_exprs(x.a)
        yield from binary_exprs(x.b)
    elif isinstance(x, (tuple, list)):
        for y in x:
            yield from binary_exprs(y)
    elif is_dataclass(x) and not isinstance(x, type):
        for f in fields(x):
            yield from binary_exprs(getattr(x, f.name))
