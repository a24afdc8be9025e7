"""Where the event IR interpreter's names and tensor elements live (DESIGN §5, "The
interpreter"): scopes (definitions, loop variables, storage per processor instance), the
index plan of a view (which storage elements it covers, out-of-bounds ones read as zeros
and dropped on write: TMA's fill and clip), views over storage, and the resolution of an
IR view (a tensor, or a piece of a blocks / slices / mma partition) to one.

:class:`ViewResolution` is a part of :class:`cypressc.ir.interp._Interp` (it calls its
``expr`` and ``_procs`` and keeps its ``views``, ``plans``, ``env_ids`` and ``env_keys``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from cypressc.ir import nodes as N
from cypressc.ir.shapes import mma_coords
from cypressc.lang.intrinsics import NUMPY_DTYPES, round_to
from cypressc.lang.kinds import PartKind

__all__ = ["InterpreterError", "ViewResolution"]


class InterpreterError(RuntimeError):
    """The IR deadlocked or is malformed (an event is waited on that nothing produces)."""


_UIDS = itertools.count()


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


class ViewResolution:
    """Views of the IR resolved to storage (a part of :class:`cypressc.ir.interp._Interp`)."""

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
        if part.kind == PartKind.BLOCKS:
            params = tuple(int(self.expr(b, s, env)) for b in part.params)
        elif part.kind == PartKind.SLICES:
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
        if part.kind == PartKind.BLOCKS:
            for j, (d, b, i) in enumerate(zip(logical, params, idx)):
                pos = np.arange(i * b, (i + 1) * b)
                src = base.ix[d]
                valid = pos < len(src)
                ix[d] = np.full(b, -1)
                ix[d][valid] = src[pos[valid]]
                coords[j] = np.arange(b)
        elif part.kind == PartKind.SLICES:
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
