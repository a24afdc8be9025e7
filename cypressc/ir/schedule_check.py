"""Driver of the concurrent interpreter (:mod:`cypressc.ir.concurrent`): small sizes,
random inputs, the sequential reference and K random schedules per block, one verdict.

Used by ``cypressc explain --check-schedule`` and by tests/ir/test_concurrent.py.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from cypressc.ir import concurrent as C
from cypressc.ir import interp as I
from cypressc.ir import nodes as N
from cypressc.ir.analysis import (
    Symbols,
    binary_exprs,
    free_vars,
    free_vars_through,
    grid_extents,
    slices_of,
    views_of,
)
from cypressc.ir.target import cluster_shape
from cypressc.ir.check import random_inputs
from cypressc.ir.hazards import evaluate
from cypressc.ir.subst import walk_ops
from cypressc.lang.intrinsics import leaf_of
from cypressc.lang.kinds import PartKind

__all__ = ["small_sizes", "written_params", "grid_blocks", "Verdict", "check_schedules"]


def small_sizes(m: N.Module, wraps: int = 2) -> dict[str, int]:
    """The smallest sizes that give one block and ``wraps`` trips around every pipelined
    loop: a scalar ``%S`` tiled as ``cdiv(%S, t)``, or the extent of a parameter partitioned
    by a static block ``t``, gets its largest tile ``t``; one that
    bounds a ``pipeline(D)`` loop ``cdiv(%S, t)`` gets ``wraps * D * t`` (so each stage
    buffer is refilled ``wraps`` times and every parity is used both ways), one that
    bounds another sequential loop two trips."""
    tile = {s: 1 for s in m.scalars}
    for e in binary_exprs(m.body):
        if (
            e.op == "cdiv"
            and isinstance(e.a, N.IVar)
            and isinstance(e.b, N.IConst)
            and e.a.name in tile
        ):
            tile[e.a.name] = max(tile[e.a.name], int(e.b.value))
    params = {a.name: a for a in m.params}
    for op in m.body.ops:  # a static block of a parameter (a resident tile): one whole block
        if (
            isinstance(op, N.Partition)
            and op.kind == PartKind.BLOCKS
            and isinstance(op.base, N.TRef)
            and op.base.name in params
        ):
            for d, b in zip(params[op.base.name].shape, op.params):
                if isinstance(d, N.IVar) and d.name in tile and isinstance(b, N.IConst):
                    tile[d.name] = max(tile[d.name], int(b.value))
    out = dict(tile)
    lets = {o.name: o.value for o in walk_ops(m.body) if isinstance(o, N.Let)}

    def unlet(h: N.IExpr) -> N.IExpr:
        while isinstance(h, N.IVar) and h.name in lets:
            h = lets[h.name]
        return h

    for op in walk_ops(m.body):
        if not isinstance(op, (N.For, N.PFor)):
            continue
        h, peeled = unlet(op.hi), 0
        # a loop over all steps but the peeled first ones: cdiv(S, t) - c
        if isinstance(h, N.IBin) and h.op == "-" and isinstance(h.b, N.IConst):
            h, peeled = unlet(h.a), int(h.b.value)
        if isinstance(h, N.IBin) and h.op == "cdiv" and isinstance(h.b, N.IConst):
            # a sequential loop runs twice (barrier phases carry over); a pipeline wraps
            # (members of its stage rings outside it take ring_extra positions per tile)
            trips = (
                wraps * op.pipeline - getattr(op, "ring_extra", 0)
                if getattr(op, "pipeline", 0)
                else 2
            )
            for name in _bounding(h.a):
                if name in out:
                    out[name] = max(out[name], (trips + peeled) * int(h.b.value))
    _cover_sliced_extents(m, out, lets)
    return out


def _cover_sliced_extents(m: N.Module, out: dict[str, int], lets: dict) -> None:
    """A size that is the extent of a sliced dimension (:func:`slices_of`) indexed by a main
    loop's counter or a grid index gets at least that many slices (so every index is a slice:
    gemm_fp8_blockwise's scales SA: KB x M, sliced per K block of its ``cdiv(K, 128)`` steps,
    and SB: NB x KB, a row per column tile of the grid)."""
    sym = Symbols(m)
    counts: dict[N.IExpr, N.IExpr] = grid_extents(m.body)
    for lp in walk_ops(m.body):
        if isinstance(lp, N.For) and lp.pipeline:  # a main loop, not a tile loop
            counts[N.IVar(lp.var)] = N.ibin("-", lp.hi, lp.lo)
    for op in walk_ops(m.body):
        for v, _, _ in views_of(op):
            for part, d, idx in slices_of(sym, v):
                # an index the counter forms (``SAs[max(k - 1, 0)]``) counts as the counter
                key = next(
                    (
                        c
                        for c in counts
                        if c == idx or isinstance(c, N.IVar) and c.name in free_vars(idx)
                    ),
                    None,
                )
                if key is None:
                    continue
                try:
                    n = int(evaluate(counts[key], out, lets))
                except (KeyError, ZeroDivisionError):
                    continue
                ext = sym.shape(part.base)[d]
                while isinstance(ext, N.IVar) and ext.name in lets:
                    ext = lets[ext.name]
                if isinstance(ext, N.IVar) and ext.name in out:
                    out[ext.name] = max(out[ext.name], n)


def _bounding(e: N.IExpr) -> list[str]:
    """The scalars that bound ``e`` directly: ``e`` itself, or the plain-variable arguments of
    a ``min``/``max`` (a causal key loop's ``min(N, q0 + U + ...)``)."""
    if isinstance(e, N.IVar):
        return [e.name]
    if isinstance(e, N.IBin) and e.op in ("min", "max"):
        return _bounding(e.a) + _bounding(e.b)
    return []


def written_params(m: N.Module, overwritten: bool = False) -> list[str]:
    """The module parameters some copy or leaf call writes (the outputs); with
    ``overwritten``, only those some op other than a reduction (``copy.add``) writes: a
    tensor only reduced into keeps its input value (what the reductions add to), so a check
    must not poison it."""
    sym = Symbols(m)
    params = {p.name for p in m.params}
    out: set[str] = set()
    stack = list(m.body.ops)
    while stack:
        op = stack.pop()
        if isinstance(op, (N.For, N.PFor)):
            stack += list(op.body.ops)
        elif isinstance(op, N.Copy):
            if not (overwritten and op.reduce):
                out.add(sym.root(op.dst))
        elif isinstance(op, N.Call):
            rules = leaf_of(op).operands
            for i, a in enumerate(op.args):
                if isinstance(a, (N.TRef, N.Piece)) and i < len(rules) and rules[i].writes:
                    out.add(sym.root(a))
    return sorted(out & params)


def grid_blocks(m: N.Module, sizes: dict[str, int]) -> list[dict]:
    """Every block index of ``m`` at ``sizes``, as processor environments (``IProc`` → int)."""
    vi = I._Interp(m, sizes, {p.name: None for p in m.params}, None)
    ext = {p: int(vi.expr(e, vi.root, {})) for p, e in grid_extents(m.body).items()}
    keys = sorted(ext, key=lambda p: p.dim)
    return [dict(zip(keys, c)) for c in itertools.product(*[range(ext[k]) for k in keys])]


def cluster_sizes(m: N.Module, sizes: dict[str, int]) -> dict[str, int]:
    """``sizes`` grown until ``m``'s grid is a whole number of its clusters along every grid
    dimension (a module without ``cluster``: ``sizes``): each size an extent that does not
    divide depends on is multiplied by the cluster's count along it (a 128-row tile grid of
    ``cdiv(M, 128)`` at M = 128 and a cluster of 2 along it: M = 256).  ValueError when a few
    rounds do not get there."""
    shape = cluster_shape(m)
    if not shape:
        return sizes
    out = dict(sizes)
    exts = {p.dim: e for p, e in grid_extents(m.body).items()}
    lets = {o.name: o.value for o in C.block_ops(m.body) if isinstance(o, N.Let)}
    for _ in range(4):
        vi = I._Interp(m, out, {p.name: None for p in m.params}, None)
        bad = [d for d, e in exts.items() if int(vi.expr(e, vi.root, {})) % shape[d]]
        if not bad:
            return out
        for d in bad:
            for v in free_vars_through(exts[d], lets) & set(out):
                out[v] *= shape[d]
    raise ValueError(f"no sizes near {sizes} make the grid a whole number of clusters")


@dataclass
class Verdict:
    """The outcome of :func:`check_schedules`: ``finding`` is None when every schedule was
    clean; ``seed`` the schedule that found it; ``schedules`` how many ran."""

    finding: C.Finding | None
    seed: int | None
    schedules: int
    sizes: dict

    def line(self, name: str) -> str:
        sizes = " ".join(f"{k}={v}" for k, v in self.sizes.items())
        if self.finding is None:
            return f"{name}: clean ({self.schedules} schedule(s), sizes {sizes})"
        return f"{name}: {self.finding} (schedule seed {self.seed}, sizes {sizes})"


def _compare(got, want, outs) -> str | None:
    for o in outs:
        a, b = got[o].astype(np.float64), want[o].astype(np.float64)
        if (np.isnan(a) != np.isnan(b)).any():
            n = int((np.isnan(a) != np.isnan(b)).sum())
            return f"%{o} has {n} element(s) unwritten, or written where the reference is not"
        ok = ~np.isnan(b)
        if ok.any():
            err = np.linalg.norm(a[ok] - b[ok]) / max(np.linalg.norm(b[ok]), 1e-30)
            if err > 1e-3:
                return f"%{o} differs from the sequential reference (relative error {err:.3g})"
    return None


def two_tile_sizes(m: N.Module, base: dict[str, int] | None = None) -> dict[str, int] | None:
    """``base`` (default :func:`small_sizes`) with one size doubled so that the grid has two
    blocks whose block-level loops step as often as the first block at ``base`` (the two
    tiles a persistent block runs back to back), or None when no size does that."""
    base = base or small_sizes(m)

    def trips(sizes: dict, blocks: list[dict]) -> list[int]:
        vi = I._Interp(m, sizes, {p.name: None for p in m.params}, None)
        C._Concurrent._define(vi.root, m.body)
        return [n for b in blocks for n in C.ring_steps(m, vi, b)]

    want = trips(base, grid_blocks(m, base)[:1])
    if any(
        n % C.pipeline_ring(m) for n in want
    ):  # the pipeline positions would not restart with the tile
        return None
    for name in sorted(base):
        sizes = {**base, name: 2 * base[name]}
        try:
            blocks = grid_blocks(m, sizes)
            if len(blocks) == 2 and trips(sizes, blocks) == want * 2:
                return sizes
        except (I.InterpreterError, ArithmeticError, ValueError):  # a size the shapes do not admit
            continue
    return None


_REFERENCES: OrderedDict[tuple, tuple[N.Module, dict[str, np.ndarray]]] = OrderedDict()


def _reference(
    m_ref: N.Module, sizes: dict, seed: int, inputs: dict[str, np.ndarray], outs: list[str]
) -> dict[str, np.ndarray]:
    """The sequential interpreter's result on ``m_ref`` at ``sizes`` from the inputs of
    ``seed``, in program order; the last few are kept (by the module's identity, which the
    entry keeps alive), as a check runs again on the same reference for each mutant."""
    key = (id(m_ref), tuple(sorted(sizes.items())), seed)
    hit = _REFERENCES.get(key)
    if hit is not None and hit[0] is m_ref:
        _REFERENCES.move_to_end(key)
        return hit[1]
    want = {k: v.copy() for k, v in inputs.items()}
    for o in set(outs) & set(written_params(m_ref, overwritten=True)):
        want[o][...] = np.nan
    I.run(m_ref, sizes, want, None)
    _REFERENCES[key] = (m_ref, want)
    while len(_REFERENCES) > 8:
        _REFERENCES.popitem(last=False)
    return want


def check_schedules(
    m_sync: N.Module,
    m_ref: N.Module,
    *,
    sizes: dict[str, int] | None = None,
    seed: int = 0,
    schedules: int = 50,
    value_every: int = 10,
    max_blocks: int = 2,
    persistent: bool = False,
) -> Verdict:
    """Run ``schedules`` random schedules (seeds ``seed``, ``seed + 1`` …) of the
    synchronized module ``m_sync`` on up to ``max_blocks`` blocks (``persistent``: as the
    tiles of one block, in order, see :func:`cypressc.ir.concurrent.run_block`); every ``value_every``-th
    schedule (and the first; none when ``value_every`` is 0) also evaluates values and
    compares the outputs with the sequential interpreter on ``m_ref`` (the
    pre-synchronization IR) on the same random inputs.  Stops at the first deadlock,
    race or mismatch.  A ``float`` parameter of the module not in ``sizes`` is 0.75 (a value
    that neither vanishes nor leaves what it scales unchanged).  With ``persistent``, raises
    ValueError where :func:`cypressc.ir.concurrent.run_block` does (a main loop whose steps
    per tile are not a whole number of wraps of a barrier's stages, or ping-pong turns not in
    the shape :func:`cypressc.ir.sync.carried_turns` expects).  A module of clusters (multicast
    copies) runs every cluster of the grid as a whole (:func:`cypressc.ir.concurrent.run_cluster`;
    ``persistent``: its cluster tiles back to back on one cluster); ``max_blocks`` does not
    apply, and the grid must be a whole number of clusters (ValueError)."""
    sizes = sizes or small_sizes(m_sync)
    sizes = {**sizes, **{f: 0.75 for f in m_sync.floats if f not in sizes}}
    inputs = random_inputs(m_ref, sizes, seed=seed)
    outs = written_params(m_ref)
    poison = written_params(m_ref, overwritten=True)
    want = _reference(m_ref, sizes, seed, inputs, outs) if value_every > 0 else None
    blocks = grid_blocks(m_sync, sizes)[:max_blocks]
    # a kernel of clusters (multicast copies): every cluster of the grid, each as a whole
    # (run_cluster), or the grid's cluster tiles as the tiles of one cluster (persistent)
    clusters = (
        C.cluster_tiles(m_sync, grid_blocks(m_sync, sizes))
        if any(isinstance(o, N.Copy) and o.multicast for o in C.block_ops(m_sync.body))
        else None
    )
    if clusters is not None:
        blocks = [b for tile in clusters for b in tile]
    for n in range(schedules):
        s = seed + n
        values = value_every > 0 and n % value_every == 0
        got = {k: v.copy() for k, v in inputs.items()}
        for o in poison:
            got[o][...] = np.nan
        if clusters is not None:
            runs = [
                (C.run_cluster, tl)
                for tl in ([clusters] if persistent else [[c] for c in clusters])
            ]
        else:
            runs = [(C.run_block, b) for b in ([blocks] if persistent else blocks)]
        for run, b in runs:
            f = run(m_sync, sizes, got, b, s, values=values)
            if f is not None:
                return Verdict(f, s, n + 1, sizes)
        if values and len(blocks) == len(grid_blocks(m_sync, sizes)):
            msg = _compare(got, want, outs)
            if msg is not None:
                return Verdict(C.Finding("mismatch", "end", msg), s, n + 1, sizes)
    return Verdict(None, None, schedules, sizes)
