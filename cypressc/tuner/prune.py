"""Static pruning and the static ranking of ``cypressc tune``'s candidates.

Every candidate mapping goes through the whole compiler (front end, every pass, CUDA
lowering) before nvcc sees it; one the compiler refuses (shared memory E046, registers E047,
an atom that does not tile the warpgroup's tile, a kernel shape the backend does not
generate E050, …) is dropped and counted by its diagnostic code.  Checks run on every CPU
core (a process pool) and their verdicts are cached on disk by content (see
:mod:`cypressc.tuner.cache`), so a repeated tune re-checks nothing.

:func:`static_score` ranks the survivors by a small model of the generated kernel (waves of
blocks over the SMs, tensor-core work per byte staged into shared memory, pipeline depth,
warp specialization, persistence, staged stores).  It only orders candidates for the
compile budget; measured times decide.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cypressc.runtime import eval_expr

__all__ = ["check_candidate", "check_all", "pool_size", "static_score"]


def check_candidate(job: tuple[str, Mapping[str, str], str, str]) -> dict[str, Any]:
    """Compile one candidate through every pass.  ``job`` = (program path, dtype bindings,
    mapping text, mapping path for diagnostics).

    Returns ``{"ok": True, "plan": {...features...}}``, ``{"ok": False, "code", "message"}``
    for a refusal (a located :class:`CypressError`), or ``{"ok": False, "code": "internal",
    "message"}`` for a compiler bug (reported, never hidden)."""
    from cypressc.diagnostics import CypressError, CypressErrors
    from cypressc.frontend import front_end
    from cypressc.pipeline import compile_module

    program, dtypes, text, mpath = job
    try:
        tree = front_end(program, mpath, dtypes=dtypes, mapping_text=text)
        m = compile_module(tree)[-1][1]
    except CypressErrors as e:
        first = e.errors[0]
        return {"ok": False, "code": first.code, "message": first.message}
    except CypressError as e:
        return {"ok": False, "code": e.code, "message": e.message}
    except Exception as e:  # noqa: BLE001 - a compiler bug: reported in the tune summary
        return {"ok": False, "code": "internal", "message": f"{type(e).__name__}: {e}"}
    return {"ok": True, "plan": plan_features(m.kernel)}


def plan_features(plan) -> dict[str, Any]:
    """What :func:`static_score` reads of a :class:`~cypressc.backend.plan.KernelPlan`."""
    from cypressc.backend.plan import size_tree
    from cypressc.backend.plan_stmt import StoreDirect, TmaStore

    def tree(
        e,
    ):  # None where the expression is not over the sizes (static_score then assumes nothing)
        try:
            return size_tree(e)
        except ValueError:
            return None

    return {
        "sizes": list(plan.sizes),
        "aliases": dict(plan.size_aliases),
        "floats": list(plan.floats),
        "grid": [tree(g) for g in plan.grid_exprs],
        "trip_count": tree(plan.trip_expr),
        "flops": tree(plan.flops),
        "stage_bytes": sum(b.stage_bytes for b in plan.buffers),
        "stages": plan.stages,
        "smem_bytes": plan.smem_bytes,
        "consumers": plan.consumers,
        "warpspecialize": plan.warpspecialize,
        "persistent": plan.persistent,
        "mma_in_flight": plan.mma_in_flight,
        "raster": plan.raster,
        "staged_stores": sum(isinstance(s, TmaStore) for s in plan.epilogue),
        "direct_stores": sum(isinstance(s, StoreDirect) for s in plan.epilogue),
        "acc_floats": sum(f.rows * f.cols for f in plan.fragments),
    }


def check_all(
    jobs: Sequence[tuple],
    *,
    workers: int | None = None,
    on_done: Callable[[int, dict], None] | None = None,
) -> list[dict]:
    """:func:`check_candidate` over ``jobs`` on ``workers`` processes (default: every core);
    ``on_done(i, result)`` is called as each finishes (progress).  Small batches run in
    this process (a pool costs more to start than they take)."""
    workers = pool_size(len(jobs), workers)
    out: list[dict | None] = [None] * len(jobs)
    if workers == 1:
        for i, j in enumerate(jobs):
            out[i] = check_candidate(j)
            if on_done:
                on_done(i, out[i])
        return out  # type: ignore[return-value]
    ctx = multiprocessing.get_context(_start_method())
    with cf.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        futs = {pool.submit(check_candidate, j): i for i, j in enumerate(jobs)}
        try:
            for f in cf.as_completed(futs):
                i = futs[f]
                out[i] = f.result()
                if on_done:
                    on_done(i, out[i])
        except BaseException:
            for f in futs:
                f.cancel()
            raise
    return out  # type: ignore[return-value]


def pool_size(jobs: int, workers: int | None = None) -> int:
    """The processes :func:`check_all` checks ``jobs`` candidates on: ``workers`` (default
    every core), no more than the jobs, and 1 (this process) for fewer than 8, where a pool
    costs more to start than they take."""
    workers = workers or os.cpu_count() or 1
    return 1 if jobs < 8 else max(1, min(workers, jobs))


def _start_method() -> str:
    """fork (fast; works from any script) unless this process has initialized CUDA, which a
    forked child must not inherit: then spawn."""
    import sys

    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return "spawn"
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def static_score(
    feat: Mapping[str, Any], sizes: Mapping[str, int], sms: int, smem_max: int
) -> float:
    """A relative speed estimate (higher is better, about 1 for a kernel at the machine's
    peak) of a candidate at ``sizes``: tensor-core work per staged byte against a reference
    intensity, times the fraction of the last wave of blocks that is busy, times small
    factors for pipeline depth, warp specialization, persistence, wgmma groups in flight and
    tiles stored from registers instead of staged for the TMA.  Unknown sizes make the wave factor 1."""
    try:
        tiles = math.prod(max(1, int(eval_expr(g, sizes))) for g in feat["grid"])
        steps = max(1, int(eval_expr(feat["trip_count"], sizes)))
        flops = float(eval_expr(feat["flops"], sizes))
    except (ValueError, KeyError, ZeroDivisionError):
        tiles, steps, flops = 0, 1, 0.0
    per_byte = flops / max(1, tiles * steps) / max(1, feat["stage_bytes"])
    # 2*128*256*64 flops over (128+256)*64*2 bytes: the paper's Hopper tile, ~85 flop/B
    intensity = min(1.0, per_byte / 85.0) if flops else 0.5
    blocks_per_sm = max(1, min(2, smem_max // max(1, feat["smem_bytes"])))
    if tiles:
        slots = sms * blocks_per_sm
        waves = math.ceil(tiles / slots)
        wave = tiles / (waves * slots)
    else:
        wave = 1.0
    pipe = min(1.0, 0.7 + 0.1 * feat["stages"])
    ws = 1.0 if feat["warpspecialize"] else 0.85
    persist = 1.0 if feat["persistent"] else 0.97
    inflight = 1.0 if feat["mma_in_flight"] >= 1 else 0.95
    stores = 0.97 if feat["direct_stores"] else 1.0  # tiles stored from registers, not by the TMA
    # accumulators above ~128 floats per consumer thread spill-risk the register file
    per_thread = feat["acc_floats"] / 128
    regs = 1.0 if per_thread <= 128 else 0.8
    return intensity * wave * pipe * ws * persist * inflight * stores * regs
