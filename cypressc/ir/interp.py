"""A NumPy interpreter for the event IR at any stage (DESIGN §5, "The interpreter").

:func:`run` executes a module on NumPy arrays.  Every asynchronous op instance (one per
element of its ``dims``, per loop iteration) becomes a task that may run once all of
its precondition events have completed; tasks run in program order
(``seed=None``) or in a seeded random order that respects *only* the events.  A
missing dependence therefore shows up as a wrong, or varying, result — the CPU-side
check that no pass ever changes what a program computes.

Semantics mirror the hardware where it matters: tensors start poisoned (NaN), a
piece of a partition that reaches past its tensor reads zeros and drops writes there
(TMA's out-of-bounds fill and clip), and leaves run their registered NumPy semantics
(:mod:`cypressc.lang.intrinsics`).  Sequential ``for`` iterations start when the
previous iteration's yields have completed.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import numpy as np

from cypressc.ir import nodes as N
from cypressc.ir.analysis import dim_procs
from cypressc.ir.shapes import mma_coords
from cypressc.ir.sync import SYNC_OPS
from cypressc.lang.intrinsics import NUMPY_DTYPES, Operand, leaf_of, round_to

__all__ = ["run", "evaluate", "InterpreterError"]


class InterpreterError(RuntimeError):
    """The IR deadlocked or is malformed (an event is waited on that nothing produces)."""


_UIDS = itertools.count()
_LANES = ("WARP", "THREAD")  # the levels a collective leaf's issuing group spans


@dataclass(eq=False)
class _Scope:
    parent: "_Scope | None"
    defs: dict[str, N.Op] = field(default_factory=dict)  # allocs, lets, partitions, async ops
    vars: dict[str, object] = field(default_factory=dict)  # loop variables
    storage: dict[tuple, np.ndarray] = field(default_factory=dict)
    uid: int = field(default_factory=lambda: next(_UIDS))
    lanes: int = 0  # an iteration of a pfor over WARP or THREAD: that pfor's trip count

    def find(self, name: str) -> "_Scope":
        s: _Scope | None = self
        while s is not None:
            if name in s.defs or name in s.vars:
                return s
            s = s.parent
        raise InterpreterError(f"%{name} is not defined")


@dataclass
class _View:
    arr: np.ndarray
    ix: list[np.ndarray]  # per storage dim; -1 = out of bounds
    keep: list[bool]  # logical dims (False: dropped by partition_by_slices)
    coords: list[np.ndarray]  # per logical dim, inside the tile partition_by_mma split
    dtype: str

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(i) for i, k in zip(self.ix, self.keep) if k)

    def read(self) -> np.ndarray:
        grids = np.ix_(*self.ix)
        mask = np.ones([len(i) for i in self.ix], dtype=bool)
        for d, g in enumerate(grids):
            mask &= g >= 0
        safe = tuple(np.where(g >= 0, g, 0) for g in grids)
        out = np.where(mask, self.arr[safe], 0).astype(self.arr.dtype)
        return out.reshape(self.shape)

    def cells(self) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """The in-bounds elements of the view: their indices into ``arr`` (one array per
        storage dim) and the mask of them over the view's full index grid."""
        full = [len(i) for i in self.ix]
        grids = np.ix_(*self.ix)
        mask = np.ones(full, dtype=bool)
        for g in grids:
            mask &= g >= 0
        return tuple(np.broadcast_to(g, full)[mask] for g in grids), mask

    def write(self, value: np.ndarray) -> None:
        value = round_to(np.asarray(value).reshape([len(i) for i in self.ix]), self.dtype)
        idx, mask = self.cells()
        self.arr[idx] = value[mask]


@dataclass(eq=False)
class _Task:
    op: object
    scope: _Scope
    env: dict  # IProc -> int
    kind: str = "op"  # op | yield
    block: N.Block | None = None
    on_done: object = None
    seq: int = 0
    missing: int = 0


class _Interp:
    def __init__(self, m: N.Module, sizes: dict[str, int], arrays: dict[str, np.ndarray], seed) -> None:
        self.m = m
        self.rng = random.Random(seed) if seed is not None else None
        self.views: dict[tuple, _View] = {}
        self.pending = 0
        self.ready_list: list[_Task] = []
        self.waiting: dict[tuple, list[_Task]] = {}
        self.done: set[tuple] = set()
        self.seq = itertools.count()
        self.joins: dict[tuple, list[tuple[_Scope, dict]]] = {}
        self.root = _Scope(None)
        self.root.vars.update(sizes)
        for p in m.params:
            self.root.defs[p.name] = p
            self.root.storage[(p.name, ())] = arrays[p.name]

    # -- values ----------------------------------------------------------------------
    def expr(self, e: N.IExpr, scope: _Scope, env: dict):
        if isinstance(e, N.IConst):
            return e.value
        if isinstance(e, N.IProc):
            if e not in env:
                raise InterpreterError(f"processor index {e} is not bound here")
            return env[e]
        if isinstance(e, N.IVar):
            s = scope.find(e.name)
            if e.name in s.vars:
                return s.vars[e.name]
            op = s.defs[e.name]
            assert isinstance(op, N.Let)
            return self.expr(op.value, s, env)
        a, b = self.expr(e.a, scope, env), self.expr(e.b, scope, env)
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                "/": lambda: a // b if isinstance(a, int) and isinstance(b, int) else a / b,
                "//": lambda: a // b, "%": lambda: a % b, "cdiv": lambda: -(-a // b),
                "min": lambda: min(a, b), "max": lambda: max(a, b)}[e.op]()

    def view(self, v: N.View, scope: _Scope, env: dict) -> _View:
        # views are pure functions of (scope, processor indices): memoize the chain walk
        key = (scope.uid, v, tuple(env.items()))
        hit = self.views.get(key)
        if hit is None:
            hit = self.views[key] = self._view(v, scope, env)
        return hit

    def _view(self, v: N.View, scope: _Scope, env: dict) -> _View:
        if isinstance(v, N.TRef):
            s = scope.find(v.name)
            alloc = s.defs[v.name]
            assert isinstance(alloc, N.Alloc)
            key = (v.name, tuple(env[p] for p in dim_procs(alloc.dims)))
            arr = s.storage.get(key)
            if arr is None:
                shape = tuple(int(self.expr(x, s, env)) for x in alloc.shape)
                dt = NUMPY_DTYPES[alloc.dtype]
                arr = np.full(shape, np.nan, dtype=dt) if np.issubdtype(dt, np.floating) else np.zeros(shape, dt)
                s.storage[key] = arr
            ix = [np.arange(n) for n in arr.shape]
            coords = [np.arange(n) for n in arr.shape]
            view = _View(arr, ix, [True] * arr.ndim, coords, alloc.dtype)
            if alloc.layout is not None:
                view.coords = self.view(alloc.layout, s, env).coords
            return view
        s = scope.find(v.partition)
        part = s.defs[v.partition]
        assert isinstance(part, N.Partition)
        base = self.view(part.base, s, env)
        idx = [int(self.expr(i, scope, env)) for i in v.idx]
        logical = [d for d, k in enumerate(base.keep) if k]
        ix, keep, coords = list(base.ix), list(base.keep), list(base.coords)
        if part.kind == "blocks":
            blocks = [int(self.expr(b, s, env)) for b in part.params]
            for j, (d, b, i) in enumerate(zip(logical, blocks, idx)):
                pos = np.arange(i * b, (i + 1) * b)
                src = base.ix[d]
                valid = pos < len(src)
                ix[d] = np.full(b, -1)
                ix[d][valid] = src[pos[valid]]
                coords[j] = np.arange(b)
        elif part.kind == "slices":
            dim = int(part.params[0].value)
            d = logical[dim]
            ix[d] = base.ix[d][idx[0]:idx[0] + 1]
            keep[d] = False
            coords = [c for j, c in enumerate(base.coords) if j != dim]
        else:
            atom_name, proc, operand = part.params
            shape = tuple(int(self.expr(x, s, env)) for x in self._shape_of(part.base, s))
            rc = mma_coords(shape, proc, operand, idx[0])
            for j, (d, x) in enumerate(zip(logical, rc)):
                ix[d] = base.ix[d][x]
                coords[j] = base.coords[j][x]
        return _View(base.arr, ix, keep, coords, base.dtype)

    def _shape_of(self, v: N.View, scope: _Scope):
        if isinstance(v, N.TRef):
            return scope.find(v.name).defs[v.name].shape  # type: ignore[union-attr]
        s = scope.find(v.partition)
        return s.defs[v.partition].piece_shape  # type: ignore[union-attr]

    # -- events ----------------------------------------------------------------------
    def required(self, refs, scope: _Scope, env: dict) -> set[tuple]:
        """The event instances (scope, event, index) a list of references waits for."""
        out: set[tuple] = set()
        for r in refs:
            s = scope.find(r.name)
            op = s.defs[r.name]
            dims = self._ev_dims(op)
            ranges = []
            for d, i in zip(dims, r.idx):
                if i is None:
                    ranges.append(range(int(self.expr(d.extent, s, env))))
                else:
                    ranges.append((int(self.expr(i, scope, env)),))
            if not r.idx:
                ranges = [range(int(self.expr(d.extent, s, env))) for d in dims]
            for t in itertools.product(*ranges):
                out.add((s.uid, r.name, t))
        return out

    @staticmethod
    def _ev_dims(op) -> tuple[N.Dim, ...]:
        if isinstance(op, N.PFor):
            return op.dims + (N.Dim(N.ibin("-", op.hi, op.lo), op.proc),)
        return op.dims

    def complete(self, op, scope: _Scope, env: dict, extra: tuple = ()) -> None:
        key = (scope.uid, op.ev, tuple(env[p] for p in dim_procs(op.dims)) + extra)
        if key in self.done:
            return
        self.done.add(key)
        for t in self.waiting.pop(key, ()):
            t.missing -= 1
            if t.missing == 0:
                self.ready_list.append(t)

    # -- scheduling ------------------------------------------------------------------
    def spawn_block(self, b: N.Block, scope: _Scope, env: dict, on_done) -> None:
        # sync ops realize events this interpreter tracks itself: they are no-ops here
        b = N.Block(tuple(op for op in b.ops if not isinstance(op, SYNC_OPS)), b.yields)
        for op in b.ops:
            scope.defs[getattr(op, "name", None) or op.ev] = op  # type: ignore[union-attr]
        for op in b.ops:
            if isinstance(op, N.AsyncOp):
                free = [(p, d) for p, d in zip(dim_procs(op.dims), op.dims) if p not in env]
                extents = [range(int(self.expr(d.extent, scope, env))) for _, d in free]
                for t in itertools.product(*extents):
                    e = dict(env)
                    e.update({p: i for (p, _), i in zip(free, t)})
                    self.add(_Task(op, scope, e, seq=next(self.seq)))
        self.add(_Task(b, scope, dict(env), kind="yield", block=b, on_done=on_done, seq=next(self.seq)))

    def add(self, t: _Task) -> None:
        pre = t.block.yields if t.kind == "yield" else t.op.pre  # type: ignore[union-attr]
        missing = [k for k in self.required(pre, t.scope, t.env) if k not in self.done]
        t.missing = len(missing)
        self.pending += 1
        for k in missing:
            self.waiting.setdefault(k, []).append(t)
        if not missing:
            self.ready_list.append(t)

    def step(self) -> bool:
        if not self.ready_list:
            return False
        if self.rng is not None:
            k = self.rng.randrange(len(self.ready_list))
        else:
            k = min(range(len(self.ready_list)), key=lambda i: self.ready_list[i].seq)
        t = self.ready_list.pop(k)
        self.pending -= 1
        self.execute(t)
        if self._collective(t):
            # the lanes of a warpgroup issue a collective leaf together: the members ready now
            # run with it (a random order that interleaves 128 lanes with the copies would make
            # the group start only after nearly everything else, hiding a missing edge)
            key = self._group(t.op, t.scope, t.env)[0]
            mates = [u for u in self.ready_list if u.op is t.op and self._collective(u)
                     and self._group(u.op, u.scope, u.env)[0] == key]
            for u in mates:
                self.ready_list.remove(u)
                self.pending -= 1
                self.execute(u)
        return True

    @staticmethod
    def _collective(t: _Task) -> bool:
        return t.kind == "op" and isinstance(t.op, N.Call) and leaf_of(t.op).collective is not None

    def execute(self, t: _Task) -> None:
        op, scope, env = t.op, t.scope, t.env
        if t.kind == "yield":
            if t.on_done is not None:
                t.on_done()
            return
        if isinstance(op, N.Copy):
            src = self.view(op.src, scope, env)
            dst = self.view(op.dst, scope, env)
            value = src.read()
            if value.size != int(np.prod(dst.shape)):
                raise InterpreterError(f"copy {op.ev}: source shape {src.shape} does not fit {dst.shape}")
            dst.write(value.reshape(dst.shape))
            self.complete(op, scope, env)
        elif isinstance(op, N.Call) and leaf_of(op).collective:
            # a collective leaf (wgmma: `.sync.aligned`; a row reduction across a quad) runs
            # once every thread of its warpgroup issued it, on the operand tiles all of them
            # hold together
            key, size = self._group(op, scope, env)
            group = self.joins.setdefault(key, [])
            group.append((scope, env))
            if len(group) == size:
                del self.joins[key]
                self.call_group(op, group)
                for sc, e in group:
                    self.complete(op, sc, e)
        elif isinstance(op, N.Call):
            self.call(op, scope, env)
            self.complete(op, scope, env)
        elif isinstance(op, N.For):
            lo, hi = int(self.expr(op.lo, scope, env)), int(self.expr(op.hi, scope, env))
            self.iterate(op, scope, env, lo, hi)
        elif isinstance(op, N.PFor):
            lo, hi = int(self.expr(op.lo, scope, env)), int(self.expr(op.hi, scope, env))
            lane = op.proc in _LANES
            for i in range(lo, hi):
                it = _Scope(scope, lanes=hi - lo if lane else 0)
                it.vars[op.var] = i
                self.spawn_block(op.body, it, env,
                                 lambda i=i: self.complete(op, scope, env, (i - lo,)))

    def iterate(self, op: N.For, scope: _Scope, env: dict, k: int, hi: int) -> None:
        if k >= hi:
            self.complete(op, scope, env)
            return
        it = _Scope(scope)
        it.vars[op.var] = k
        self.spawn_block(op.body, it, env, lambda: self.iterate(op, scope, env, k + 1, hi))

    def _group(self, op: N.Call, scope: _Scope, env: dict) -> tuple[tuple, int]:
        """The issuing group of a collective leaf instance (its warpgroup: the same op, the
        same scope above the pfors over warps and threads, the same indices but the lanes')
        and how many instances it has (those pfors' trip counts times the op's lane dims)."""
        n, s = 1, scope
        while s.lanes:
            n *= s.lanes
            s = s.parent  # type: ignore[assignment]
        for d in op.dims:
            if d.proc in _LANES:
                n *= int(self.expr(d.extent, scope, env))
        return (op.ev, s.uid, tuple((p, i) for p, i in env.items() if p.proc not in _LANES)), n

    def gather(self, a: N.View, members: list[tuple[_Scope, dict]]) -> Operand:
        """The whole tile of a collective leaf's operand: the union of every member thread's
        piece, placed by its coordinates (a replicated piece is the whole tile already)."""
        views = [self.view(a, sc, e) for sc, e in members]
        first = views[0]
        if all(v is first or all(np.array_equal(x, y) for x, y in zip(v.coords, first.coords)) for v in views):
            return Operand(first.read(), tuple(first.coords))  # replicated: every member holds the tile
        shape = tuple(max(int(c.max()) + 1 if len(c) else 0 for c in cs) for cs in zip(*(v.coords for v in views)))
        tile = np.full(shape, np.nan, dtype=np.float64)
        for v in views:
            tile[np.ix_(*v.coords)] = v.read()
        return Operand(tile, tuple(np.arange(n) for n in shape))

    def call_group(self, op: N.Call, members: list[tuple[_Scope, dict]]) -> None:
        """Run a collective leaf for all ``members`` (scope, processor indices) of one
        issuing group: the operands it only reads are gathered once, the written ones stay
        per thread (each thread's accumulator fragment)."""
        fn = leaf_of(op)
        whole = {i: self.gather(a, members) for i, a in enumerate(op.args)
                 if isinstance(a, (N.TRef, N.Piece)) and i < len(fn.operands) and not fn.operands[i].writes}
        for sc, e in members:
            self.call(op, sc, e, whole)

    def call(self, op: N.Call, scope: _Scope, env: dict, whole: dict[int, Operand] | None = None) -> None:
        fn = leaf_of(op)
        args: list[object] = []
        views: dict[int, _View] = {}
        for i, a in enumerate(op.args):
            if whole and i in whole:
                args.append(whole[i])
            elif isinstance(a, (N.TRef, N.Piece)):
                v = self.view(a, scope, env)
                views[i] = v
                args.append(Operand(v.read(), tuple(v.coords)))
            elif isinstance(a, N.AtomArg):
                args.append(a.name)
            else:
                args.append(self.expr(a, scope, env))
        for i, val in fn.semantics(*args).items():
            views[i].write(val)

    def run(self) -> None:
        finished = []
        self.spawn_block(self.m.body, self.root, {}, lambda: finished.append(True))
        while self.pending:
            if not self.step():
                names = sorted({k[1] for k in self.waiting})[:8]
                raise InterpreterError(f"deadlock: {self.pending} task(s) wait forever on {names}")


def evaluate(e: N.IExpr, sizes: dict[str, int]):
    """Evaluate a scalar expression over the size arguments (no processors, no loops)."""
    dummy = _Interp(N.Module("eval", (), (), N.Block(())), sizes, {}, None)
    return dummy.expr(e, dummy.root, {})


def run(m: N.Module, sizes: dict[str, int], arrays: dict[str, np.ndarray], seed: int | None = None) -> None:
    """Execute ``m`` in place on ``arrays`` (one per module parameter, by name).

    ``sizes`` binds the module's size scalars (``C_d0`` …); ``seed=None`` runs in program
    order, an integer in a random order that respects only the events.  Raises
    :class:`InterpreterError` on a deadlock or a malformed module.
    """
    _Interp(m, sizes, arrays, seed).run()
