"""The queries and edits copy elimination's rewrite patterns share (Cypress paper §4.2.3):
an index of a module's ops (program order, enclosing loops and blocks, the accessors of
each tensor), built once per module and thread, and the edits that drop an op with its
event forwarded or add preconditions to ops.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from cypressc.ir import nodes as N
from cypressc.ir.analysis import (
    Symbols,
    forward_refs,
    reduces,
    remove_ops,
    replace_event,
    views_of,
)
from cypressc.ir.subst import walk_ops


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

    def reduced(self, root: str) -> bool:
        """Whether a reduction (``copy.add``) reads or adds into ``root``: such a tensor is
        a private copy or a reduction target, and no pattern may merge it with another."""
        return any(reduces(o) for o, _, _ in self.accessors(root))

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


def _find(m: N.Module, ev: str) -> N.Op:
    for o in walk_ops(m.body):
        if isinstance(o, N.AsyncOp) and o.ev == ev:
            return o
    raise KeyError(ev)


def _find_alloc(m: N.Module, name: str) -> N.Alloc:
    return next(o for o in walk_ops(m.body) if isinstance(o, N.Alloc) and o.name == name)
