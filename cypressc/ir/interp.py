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
from dataclasses import dataclass

import numpy as np

from cypressc.ir import nodes as N
from cypressc.ir.interp_events import EventTracking
from cypressc.ir.interp_views import InterpreterError, ViewResolution, _Plan, _Scope, _View
from cypressc.ir.sync import SYNC_OPS
from cypressc.lang.intrinsics import Operand, leaf_of
from cypressc.lang.kinds import Proc

__all__ = ["run", "evaluate", "InterpreterError", "LATEST_FIRST"]


LATEST_FIRST = "latest-first"


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
_LANES = (Proc.WARP, Proc.THREAD)  # the levels a collective leaf's issuing group spans


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


class _Interp(ViewResolution, EventTracking):
    """One run of a module: the tasks of its op instances, ready or waiting, scheduled
    in program order or a seeded random one.  Views and events are its parts in
    :mod:`cypressc.ir.interp_views` and :mod:`cypressc.ir.interp_events`."""

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
            value = value.reshape(dst.shape)
            if op.reduce == "add":  # copy.add: one atomic dst += src
                value = dst.read().reshape(dst.shape) + value
            dst.write(value)
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
