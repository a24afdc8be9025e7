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

import heapq
import itertools
import operator
import random
from dataclasses import dataclass, field

import numpy as np

from cypressc.ir import nodes as N
from cypressc.ir.analysis import dim_procs
from cypressc.ir.shapes import mma_coords
from cypressc.ir.sync import SYNC_OPS
from cypressc.lang.intrinsics import NUMPY_DTYPES, Operand, leaf_of, round_to

__all__ = ["run", "evaluate", "InterpreterError", "LATEST_FIRST"]


LATEST_FIRST = "latest-first"


class InterpreterError(RuntimeError):
    """The IR deadlocked or is malformed (an event is waited on that nothing produces)."""


_UIDS = itertools.count()
_UNSET = object()
_BINOPS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": lambda a, b: a // b if isinstance(a, int) and isinstance(b, int) else a / b,
    "//": operator.floordiv,
    "%": operator.mod,
    "cdiv": lambda a, b: -(-a // b),
    "min": min,
    "max": max,
}
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


class _Plan:
    """The index structure of a view, shared by every view of the same shape of chain (the
    same partitions at the same indices over storage of the same shape): which elements of
    the storage it covers, computed once."""

    __slots__ = ("_cells", "_gather", "coords", "full", "ix", "keep", "shape")

    def __init__(self, ix: list[np.ndarray], keep: list[bool], coords: list[np.ndarray]) -> None:
        self.ix, self.keep, self.coords = ix, keep, coords
        self.full = tuple(len(i) for i in ix)
        self.shape = tuple(n for n, k in zip(self.full, keep) if k)
        self._gather = self._cells = None

    def gather(self) -> tuple[tuple, np.ndarray | None]:
        """Indices that read the whole index grid (out-of-bounds ones clamped to 0) and the
        mask of the in-bounds ones (None: every element is in bounds)."""
        if self._gather is None:
            grids = np.ix_(*self.ix)
            if all((i >= 0).all() for i in self.ix):
                self._gather = (grids, None)
            else:
                mask = np.ones(self.full, dtype=bool)
                for g in grids:
                    mask &= g >= 0
                self._gather = (tuple(np.where(g >= 0, g, 0) for g in grids), mask)
        return self._gather

    def cells(self) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        if self._cells is None:
            grids = np.ix_(*self.ix)
            mask = np.ones(self.full, dtype=bool)
            for g in grids:
                mask &= g >= 0
            self._cells = (tuple(np.broadcast_to(g, self.full)[mask] for g in grids), mask)
        return self._cells


class _View:
    """A tensor view resolved to its storage ``arr`` and the :class:`_Plan` of the elements
    it covers: ``ix`` per storage dim (-1 = out of bounds), ``keep`` per logical dim (False:
    dropped by partition_by_slices), ``coords`` per logical dim inside the tile
    partition_by_mma split."""

    __slots__ = ("arr", "dtype", "key", "plan")

    def __init__(self, arr: np.ndarray, plan: _Plan, dtype: str, key: tuple) -> None:
        self.arr, self.plan, self.dtype, self.key = arr, plan, dtype, key

    ix = property(lambda self: self.plan.ix)
    keep = property(lambda self: self.plan.keep)
    coords = property(lambda self: self.plan.coords)
    shape = property(lambda self: self.plan.shape)

    def read(self) -> np.ndarray:
        idx, mask = self.plan.gather()
        out = self.arr[idx]
        if mask is not None:
            out = np.where(mask, out, 0).astype(self.arr.dtype)
        return out.reshape(self.plan.shape)

    def cells(self) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """The in-bounds elements of the view: their indices into ``arr`` (one array per
        storage dim) and the mask of them over the view's full index grid."""
        return self.plan.cells()

    def write(self, value: np.ndarray) -> None:
        value = round_to(np.asarray(value).reshape(self.plan.full), self.dtype)
        idx, mask = self.plan.gather()
        if mask is None:
            self.arr[idx] = value
        else:
            cells, mask = self.plan.cells()
            self.arr[cells] = value[mask]


def _by_identity(table: dict, obj, make):
    """``make(obj)``, kept in ``table`` by the object's identity (the table keeps ``obj``
    alive, so no other object takes its id while the entry lasts)."""
    hit = table.get(id(obj))
    if hit is None or hit[0] is not obj:
        hit = table[id(obj)] = (obj, make(obj))
    return hit[1]


def _matches(t: tuple, pattern: tuple) -> bool:
    return all(p is None or p == x for x, p in zip(t, pattern))


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
    rank: int = 0  # the order key of a deterministic schedule (lowest first)

    def __lt__(self, other: _Task) -> bool:
        return self.rank < other.rank


class _Interp:
    def __init__(
        self, m: N.Module, sizes: dict[str, int], arrays: dict[str, np.ndarray], seed
    ) -> None:
        self.m = m
        if seed is not None and seed != LATEST_FIRST and not isinstance(seed, int):
            raise ValueError(f"seed must be None, an int or {LATEST_FIRST!r}, not {seed!r}")
        self.rng = random.Random(seed) if isinstance(seed, int) else None
        self.sign = -1 if seed == LATEST_FIRST else 1
        self.views: dict[tuple, _View] = {}
        self.plans: dict[tuple, _Plan] = {}
        self.env_ids: dict[int, tuple[dict, int]] = {}
        self.procs: dict[int, tuple] = {}  # id(dims) -> (dims, their processor indices)
        self.ev_dims: dict[int, tuple] = {}  # id(op) -> (op, its event's dims)
        self.env_keys: dict[tuple, int] = {}
        self.pending = 0
        self.ready_list: list[_Task] = []
        self.waiting: dict[tuple, list[_Task]] = {}
        self.done: set[tuple] = set()
        self.done_by: dict[tuple, list[tuple]] = {}  # (scope, event) -> completed instances
        self.patterns: dict[tuple, list[tuple]] = {}  # (scope, event) -> the patterns waited on
        self.counts: dict[tuple, int] = {}  # (scope, event, pattern) -> its instances completed
        self.agg: dict[tuple, set[int]] = {}  # pattern -> the counts tasks wait for
        self.seq = itertools.count()
        self.joins: dict[tuple, list[tuple[_Scope, dict]]] = {}
        self.root = _Scope(None)
        self.root.vars.update(sizes)
        for p in m.params:
            self.root.defs[p.name] = p
            self.root.storage[(p.name, ())] = arrays[p.name]

    # -- values ----------------------------------------------------------------------
    def expr(self, e: N.IExpr, scope: _Scope, env: dict):
        t = type(e)
        if t is N.IConst:
            return e.value
        if t is N.IVar:
            s = scope.find(e.name)
            v = s.vars.get(e.name, _UNSET)
            if v is not _UNSET:
                return v
            op = s.defs[e.name]
            assert isinstance(op, N.Let)
            return self.expr(op.value, s, env)
        if t is N.IProc:
            v = env.get(e, _UNSET)
            if v is _UNSET:
                raise InterpreterError(f"processor index {e} is not bound here")
            return v
        return _BINOPS[e.op](self.expr(e.a, scope, env), self.expr(e.b, scope, env))

    def view(self, v: N.View, scope: _Scope, env: dict) -> _View:
        # views are pure functions of (scope, processor indices): memoize the chain walk
        key = (scope.uid, id(v), self._env_id(env))
        hit = self.views.get(key)
        if hit is None:
            hit = self.views[key] = self._view(v, scope, env)
        return hit

    def _env_id(self, env: dict) -> int:
        """A number for the processor indices ``env`` (equal numbers: equal indices), looked
        up by the dict's identity: the table keeps each dict alive, so no other reuses its id
        (an ``env`` is never changed once an op instance holds it)."""
        hit = self.env_ids.get(id(env))
        if hit is not None and hit[0] is env:
            return hit[1]
        k = self.env_keys.setdefault(tuple(env.items()), len(self.env_keys))
        self.env_ids[id(env)] = (env, k)
        return k

    def _plan(self, key: tuple, make) -> _Plan:
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = _Plan(*make())
        return plan

    def _view(self, v: N.View, scope: _Scope, env: dict) -> _View:
        if isinstance(v, N.TRef):
            s = scope.find(v.name)
            alloc = s.defs[v.name]
            assert isinstance(alloc, N.Alloc)
            key = (v.name, tuple([env[p] for p in self._procs(alloc.dims)]))
            arr = s.storage.get(key)
            if arr is None:
                shape = tuple(int(self.expr(x, s, env)) for x in alloc.shape)
                dt = NUMPY_DTYPES[alloc.dtype]
                arr = (
                    np.full(shape, np.nan, dtype=dt)
                    if np.issubdtype(dt, np.floating)
                    else np.zeros(shape, dt)
                )
                s.storage[key] = arr
            layout = self.view(alloc.layout, s, env) if alloc.layout is not None else None
            pkey = (arr.shape, layout.key if layout is not None else None)
            plan = self._plan(
                pkey,
                lambda: (
                    [np.arange(n) for n in arr.shape],
                    [True] * arr.ndim,
                    layout.coords if layout is not None else [np.arange(n) for n in arr.shape],
                ),
            )
            return _View(arr, plan, alloc.dtype, pkey)
        s = scope.find(v.partition)
        part = s.defs[v.partition]
        assert isinstance(part, N.Partition)
        base = self.view(part.base, s, env)
        idx = tuple(int(self.expr(i, scope, env)) for i in v.idx)
        if part.kind == "blocks":
            params = tuple(int(self.expr(b, s, env)) for b in part.params)
        elif part.kind == "slices":
            params = ()
        else:
            params = tuple(int(self.expr(x, s, env)) for x in self._shape_of(part.base, s))
        pkey = (id(part), base.key, idx, params)
        return _View(
            base.arr,
            self._plan(pkey, lambda: self._piece(part, base.plan, idx, params)),
            base.dtype,
            pkey,
        )

    @staticmethod
    def _piece(part: N.Partition, base: _Plan, idx: tuple[int, ...], params: tuple[int, ...]):
        """The (ix, keep, coords) of piece ``idx`` of ``part`` over a view of plan ``base``
        (``params``: the block sizes, or the mma tile's shape)."""
        logical = [d for d, k in enumerate(base.keep) if k]
        ix, keep, coords = list(base.ix), list(base.keep), list(base.coords)
        if part.kind == "blocks":
            for j, (d, b, i) in enumerate(zip(logical, params, idx)):
                pos = np.arange(i * b, (i + 1) * b)
                src = base.ix[d]
                valid = pos < len(src)
                ix[d] = np.full(b, -1)
                ix[d][valid] = src[pos[valid]]
                coords[j] = np.arange(b)
        elif part.kind == "slices":
            dim = int(part.params[0].value)
            d = logical[dim]
            ix[d] = base.ix[d][idx[0] : idx[0] + 1]
            keep[d] = False
            coords = [c for j, c in enumerate(base.coords) if j != dim]
        else:
            _, proc, operand = part.params
            rc = mma_coords(params, proc, operand, idx[0])
            for j, (d, x) in enumerate(zip(logical, rc)):
                ix[d] = base.ix[d][x]
                coords[j] = base.coords[j][x]
        return ix, keep, coords

    def _shape_of(self, v: N.View, scope: _Scope):
        if isinstance(v, N.TRef):
            return scope.find(v.name).defs[v.name].shape  # type: ignore[union-attr]
        s = scope.find(v.partition)
        return s.defs[v.partition].piece_shape  # type: ignore[union-attr]

    # -- events ----------------------------------------------------------------------
    def required(self, refs, scope: _Scope, env: dict) -> set[tuple]:
        """The event keys a list of references waits for: ``(scope, event, index)`` of one
        instance, or ``(scope, event, pattern, count)`` for every instance matching
        ``pattern`` (``None`` where a reference spans a whole dimension: ``count`` instances)
        -- one key however many threads the event has."""
        out: set[tuple] = set()
        for r in refs:
            s = scope.find(r.name)
            op = s.defs[r.name]
            dims = self._ev_dims_of(op)
            idx = r.idx or (None,) * len(dims)
            if len(idx) != len(dims):
                raise InterpreterError(
                    f"%{r.name} has {len(dims)} dimension(s), used with {len(idx)}"
                )
            pattern, count = [], 1
            for d, i in zip(dims, idx):
                if i is None:
                    pattern.append(None)
                    count *= max(int(self.expr(d.extent, s, env)), 0)
                else:
                    pattern.append(int(self.expr(i, scope, env)))
            if None in pattern:
                out.add((s.uid, r.name, tuple(pattern), count))
            else:
                out.add((s.uid, r.name, tuple(pattern)))
        return out

    def _procs(self, dims: tuple[N.Dim, ...]) -> tuple[N.IProc, ...]:
        return _by_identity(self.procs, dims, dim_procs)

    def _ev_dims_of(self, op) -> tuple[N.Dim, ...]:
        """The dims of ``op``'s event (a ``pfor``'s has one more: its iterations)."""
        return _by_identity(
            self.ev_dims,
            op,
            lambda o: (
                o.dims + (N.Dim(N.ibin("-", o.hi, o.lo), o.proc),)
                if isinstance(o, N.PFor)
                else o.dims
            ),
        )

    def _met(self, key: tuple) -> bool:
        if len(key) == 3:
            return key in self.done
        pk = key[:3]
        if pk not in self.counts:  # a pattern's first waiter: count what has completed so far
            self.counts[pk] = sum(_matches(t, pk[2]) for t in self.done_by.get(pk[:2], ()))
            self.patterns.setdefault(pk[:2], []).append(pk[2])
        return self.counts[pk] >= key[3]

    def complete(self, op, scope: _Scope, env: dict, extra: tuple = ()) -> None:
        t = tuple([env[p] for p in self._procs(op.dims)]) + extra
        key = (scope.uid, op.ev, t)
        if key in self.done:
            return
        self.done.add(key)
        self.done_by.setdefault(key[:2], []).append(t)
        self._wake(key)
        for pat in self.patterns.get(key[:2], ()):
            if _matches(t, pat):
                pk = key[:2] + (pat,)
                n = self.counts[pk] = self.counts[pk] + 1
                if n in self.agg.get(pk, ()):
                    self._wake(pk + (n,))

    def _wake(self, key: tuple) -> None:
        for t in self.waiting.pop(key, ()):
            t.missing -= 1
            if t.missing == 0:
                self._ready(t)

    # -- scheduling ------------------------------------------------------------------
    def spawn_block(self, b: N.Block, scope: _Scope, env: dict, on_done) -> None:
        # sync ops realize events this interpreter tracks itself: they are no-ops here
        b = N.Block(tuple(op for op in b.ops if not isinstance(op, SYNC_OPS)), b.yields)
        for op in b.ops:
            scope.defs[getattr(op, "name", None) or op.ev] = op  # type: ignore[union-attr]
        for op in b.ops:
            if isinstance(op, N.AsyncOp):
                free = [(p, d) for p, d in zip(self._procs(op.dims), op.dims) if p not in env]
                extents = [range(int(self.expr(d.extent, scope, env))) for _, d in free]
                for t in itertools.product(*extents):
                    e = dict(env)
                    e.update({p: i for (p, _), i in zip(free, t)})
                    self.add(_Task(op, scope, e, seq=next(self.seq)))
        self.add(
            _Task(b, scope, dict(env), kind="yield", block=b, on_done=on_done, seq=next(self.seq))
        )

    def add(self, t: _Task) -> None:
        pre = t.block.yields if t.kind == "yield" else t.op.pre  # type: ignore[union-attr]
        missing = [k for k in self.required(pre, t.scope, t.env) if not self._met(k)]
        t.missing = len(missing)
        self.pending += 1
        for k in missing:
            self.waiting.setdefault(k, []).append(t)
            if len(k) == 4:
                self.agg.setdefault(k[:3], set()).add(k[3])
        if not missing:
            self._ready(t)

    def _ready(self, t: _Task) -> None:
        if (
            self.rng is None
        ):  # the ready task of the lowest (or, latest first, highest) sequence number
            t.rank = self.sign * t.seq
            heapq.heappush(self.ready_list, t)
        else:
            self.ready_list.append(t)

    def step(self) -> bool:
        if not self.ready_list:
            return False
        if self.rng is not None:
            t = self.ready_list.pop(self.rng.randrange(len(self.ready_list)))
        else:
            t = heapq.heappop(self.ready_list)
        self.pending -= 1
        self.execute(t)
        if self._collective(t):
            # the lanes of a warpgroup issue a collective leaf together: the members ready now
            # run with it (a random order that interleaves 128 lanes with the copies would make
            # the group start only after nearly everything else, hiding a missing edge)
            key = self._group(t.op, t.scope, t.env)[0]
            mates = [
                u
                for u in self.ready_list
                if u.op is t.op
                and self._collective(u)
                and self._group(u.op, u.scope, u.env)[0] == key
            ]
            if mates and self.rng is None:
                gone = {id(u) for u in mates}
                self.ready_list[:] = [u for u in self.ready_list if id(u) not in gone]
                heapq.heapify(self.ready_list)
            for u in mates:
                if self.rng is not None:
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
                raise InterpreterError(
                    f"copy {op.ev}: source shape {src.shape} does not fit {dst.shape}"
                )
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
                self.spawn_block(
                    op.body, it, env, lambda i=i: self.complete(op, scope, env, (i - lo,))
                )

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
        if all(
            v is first or all(np.array_equal(x, y) for x, y in zip(v.coords, first.coords))
            for v in views
        ):
            return Operand(
                first.read(), tuple(first.coords)
            )  # replicated: every member holds the tile
        shape = tuple(
            max(int(c.max()) + 1 if len(c) else 0 for c in cs)
            for cs in zip(*(v.coords for v in views))
        )
        tile = np.full(shape, np.nan, dtype=np.float64)
        for v in views:
            tile[np.ix_(*v.coords)] = v.read()
        return Operand(tile, tuple(np.arange(n) for n in shape))

    def call_group(self, op: N.Call, members: list[tuple[_Scope, dict]]) -> None:
        """Run a collective leaf for all ``members`` (scope, processor indices) of one
        issuing group: the operands it only reads are gathered once, the written ones stay
        per thread (each thread's accumulator fragment)."""
        fn = leaf_of(op)
        whole = {
            i: self.gather(a, members)
            for i, a in enumerate(op.args)
            if isinstance(a, (N.TRef, N.Piece))
            and i < len(fn.operands)
            and not fn.operands[i].writes
        }
        for sc, e in members:
            self.call(op, sc, e, whole)

    def call(
        self, op: N.Call, scope: _Scope, env: dict, whole: dict[int, Operand] | None = None
    ) -> None:
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


def run(
    m: N.Module, sizes: dict[str, int], arrays: dict[str, np.ndarray], seed: int | str | None = None
) -> None:
    """Execute ``m`` in place on ``arrays`` (one per module parameter, by name).

    ``sizes`` binds the module's size scalars (``C_d0`` …); ``seed=None`` runs in program
    order, an integer in a random order that respects only the events, and
    :data:`LATEST_FIRST` always runs the ready task that comes last in program order (an
    adversary: wherever an edge is missing and both ends are ready, the later one goes
    first -- a write before the read it should follow, a read before the write it
    needs).  Raises :class:`InterpreterError` on a deadlock or a malformed module,
    ValueError for another ``seed``.
    """
    _Interp(m, sizes, arrays, seed).run()
