"""Checking and timing candidate kernels on GPUs: long-lived workers, failures classified.

:func:`time_candidates` splits the candidates over the visible GPUs and drives one worker
process per GPU (:mod:`cypressc.tuner.worker`, ``CUDA_VISIBLE_DEVICES`` set to that GPU)
over JSON lines.  The workers are started once and kept for the life of this process
(:func:`~cypressc.tuner.worker_pool.stop_workers` ends them), so a second tune round, a
second size or a second program pays no new ``import torch`` and CUDA start.  A worker makes the inputs (``torch.randn`` on
the GPU) and the reference once per (program, sizes); each candidate is loaded as a shared
library in it, run once on NaN-poisoned outputs and compared with the reference
(:func:`~cypressc.tuner.verdicts.compare`: ``||out - ref|| / ||ref|| < 1e-2``, no NaN, no
element off by more than 5% of the reference's RMS); only candidates that pass are timed.
Timing is the benches' method: interleaved rounds (each round times every candidate in turn,
so drift hits all alike), ``reps`` calls per round each between its own CUDA events queued
behind a short GPU sleep, the median over all calls.

A candidate that fails is recorded with why (:mod:`cypressc.tuner.verdicts`):
``refused`` (the runtime's argument checks and ``requires``, or the launcher's refusal
code), ``launch_error`` (another ``cudaError_t`` from the launcher), ``crash`` (a CUDA error
on completion, or the worker process died), ``timeout`` (no completion within the check
deadline: the kernel hangs), ``wrong`` (the relative error, the NaN count and how many
elements are wrong, and where), ``load_error``, ``setup`` (the inputs or the reference),
``worker`` (no worker process could start).  A crash or hang costs only that candidate: the
worker exits, and the next request starts a fresh one.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cypressc.tuner.verdicts import failure
from cypressc.tuner.worker_pool import _Lost, _Worker, _worker

__all__ = [
    "timed",
    "interleaved",
    "load_reference",
    "gpu_count",
    "time_candidates",
    "CHECK_DEADLINE_S",
]

CHECK_DEADLINE_S = (
    5.0  # a check launch not finished by then hangs (the slowest sane candidate: ~0.1 s)
)
_SETUP_S = 120.0  # inputs + reference of a new (program, sizes), on top of the deadline


# --------------------------------------------------------------------------------------------
# The timing primitive (bench/gemm.py and bench/variants.py use it too)
# --------------------------------------------------------------------------------------------


def timed(torch, fn: Callable[[], Any], reps: int) -> list[float]:
    """``reps`` calls of ``fn``, each between its own CUDA events, queued behind ~1 ms of GPU
    sleep so host launch overhead never leaves the GPU idle inside a measured interval;
    returns the milliseconds of each call."""
    ev = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(reps)
    ]
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(2_000_000)
    for e0, e1 in ev:
        e0.record()
        fn()
        e1.record()
    torch.cuda.synchronize()
    return [e0.elapsed_time(e1) for e0, e1 in ev]


def interleaved(
    torch,
    fns: Mapping[str, Callable[[], Any]],
    rounds: int,
    reps: int,
    on_round: Callable[[int], None] | None = None,
) -> dict[str, list[float]]:
    """Per-call milliseconds of each function over ``rounds`` interleaved rounds of ``reps``.
    Round ``r`` starts at the ``r``-th function (the order rotates): a function timed late in
    every round would pay for the heat of the others (up to 4.7 % measured for one binary at
    FlashAttention seq 16384, bench/NOTES.md 2026-11-26 session 14)."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    keys = list(fns)
    for r in range(rounds):
        start = r % len(keys) if keys else 0
        for k in keys[start:] + keys[:start]:
            samples[k] += timed(torch, fns[k], reps)
        if on_round:
            on_round(r)
    return samples


def load_reference(spec: str) -> Callable:
    """``"path/to/file.py:func"`` or ``"package.module:func"`` -> the function.  Raises
    ``ValueError`` naming what is missing."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ValueError(f"--reference {spec!r}: write FILE.py:FUNCTION or MODULE:FUNCTION")
    if target.endswith(".py"):
        path = Path(target)
        if not path.exists():
            raise ValueError(f"--reference {spec!r}: no file {target}")
        mod_spec = importlib.util.spec_from_file_location(f"cypressc_reference_{path.stem}", path)
        mod = importlib.util.module_from_spec(mod_spec)  # type: ignore[arg-type]
        mod_spec.loader.exec_module(mod)  # type: ignore[union-attr]
    else:
        mod = importlib.import_module(target)
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise ValueError(f"--reference {spec!r}: {target} has no function {attr}")
    return fn


def gpu_count() -> int:
    """CUDA devices visible to PyTorch (0 without torch or without a GPU)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


# --------------------------------------------------------------------------------------------
# The parent side (its worker processes: cypressc.tuner.worker_pool)
# --------------------------------------------------------------------------------------------


def time_candidates(
    cands: Sequence[Mapping[str, str]],
    sizes: Mapping[str, int],
    *,
    floats: Mapping[str, float] | None = None,
    reference: str | None = None,
    baseline: str | None = None,
    rounds: int = 5,
    reps: int = 10,
    gpus: int | None = None,
    deadline_s: float = CHECK_DEADLINE_S,
    on_event: Callable[[dict], None] | None = None,
) -> dict[str, dict]:
    """Check and time ``cands`` (each ``{"label", "dir", "name"}``) at ``sizes``, passing
    ``floats`` (the values of the kernel's ``float`` parameters) to every call.

    ``reference`` is a :func:`load_reference` spec; without one, outputs are compared with
    those of the candidate labelled ``baseline`` (checked first on every GPU; when it fails,
    every candidate fails with ``no reference``).  Returns, per label, ``{"ok": True, "ms",
    "tflops", "rel", "device", "min_ms", "max_ms", "n"}`` or a
    :func:`~cypressc.tuner.verdicts.failure` record
    (``{"ok": False, "kind", "error", ...}``).  Every ``checked``/``round``/``result`` event
    goes to ``on_event`` (progress) as it happens.  Raises ``RuntimeError`` without a GPU."""
    gpus = gpus if gpus is not None else gpu_count()
    if gpus < 1:
        raise RuntimeError("no CUDA GPU is visible; use --compile-only on a machine without one")
    by_label = {c["label"]: c for c in cands}
    setup: dict[str, Any] = {"sizes": {k: int(v) for k, v in sizes.items()}, "reference": reference}
    if floats:
        setup["floats"] = {k: float(v) for k, v in floats.items()}
    if reference is None:
        if baseline not in by_label:
            raise ValueError(
                "time_candidates: without a reference, the baseline must be one of the candidates"
            )
        base = by_label[baseline]
        setup["baseline"] = {"dir": base["dir"], "name": base.get("name")}
    groups = [list(cands[i::gpus]) for i in range(gpus)]
    if reference is None:  # every GPU checks the baseline first: it defines the reference
        groups = [g if by_label[baseline] in g else [by_label[baseline], *g] for g in groups]
    results: dict[str, dict] = {}
    lock = threading.Lock()

    def emit(ev: dict) -> None:
        if on_event:
            with lock:
                on_event(ev)

    def drive(gpu: int, group: list[Mapping[str, str]]) -> None:
        w = _worker(gpu)
        with w.lock:
            got = _drive(
                w,
                group,
                setup,
                baseline if reference is None else None,
                rounds,
                reps,
                deadline_s,
                emit,
            )
        with lock:
            for label, r in got.items():
                if label not in results or r.get("ok"):
                    results[label] = r

    threads = [
        threading.Thread(target=drive, args=(g, grp), daemon=True)
        for g, grp in enumerate(groups)
        if grp
    ]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)  # joins in slices so Ctrl-C reaches the caller
    return results


def _drive(
    w: _Worker,
    group: list,
    setup: dict,
    baseline: str | None,
    rounds: int,
    reps: int,
    deadline_s: float,
    emit: Callable[[dict], None],
) -> dict[str, dict]:
    """Check every candidate of ``group`` on ``w`` (the baseline first when it defines the
    reference), then time the ones that passed."""
    out: dict[str, dict] = {}
    order = sorted(group, key=lambda c: c["label"] != baseline)
    passed: dict[str, dict] = {}  # label -> its checked event (rel, est_ms) and worker start
    for c in order:
        if (
            w.broken is None
            and baseline is not None
            and baseline in out
            and not out[baseline].get("ok", True)
        ):
            rec = failure(
                "setup", None, label=c["label"], message="no reference: the baseline kernel failed"
            )
            out[c["label"]] = rec
            emit(rec)
            continue
        ev = _check(w, c, setup, deadline_s, emit)
        if ev["ok"]:
            passed[c["label"]] = dict(ev, start=w.starts)
        else:
            out[c["label"]] = ev
    if not passed:
        return out
    labels = list(passed)
    try:
        w.ensure(emit)  # a fatal last check left no process: start one now
    except _Lost as e:
        for x in labels:
            out[x] = failure(
                e.why.get("kind", "worker"),
                None,
                label=x,
                **{k: v for k, v in e.why.items() if k != "kind"},
            )
        return out
    for x in list(labels):  # checked in a process that has exited since: check again
        if passed[x]["start"] != w.starts:
            ev = _check(
                w, next(c for c in group if c["label"] == x), setup, deadline_s, lambda e: None
            )
            if not ev["ok"]:
                out[x] = ev
                labels.remove(x)
    est = sum(float(passed[x].get("est_ms", 1.0)) for x in labels)
    timeout = 60.0 + 3.0 * rounds * reps * est / 1e3 + rounds * len(labels) * 0.1
    try:
        r = w.request(
            {"op": "time", "labels": labels, "rounds": rounds, "reps": reps}, timeout, emit
        )
        timed, why = r.get("results", {}), r.get("message")
    except _Lost:  # one of them breaks when run back to back: time each alone
        timed, why = {}, None
        for x in labels:
            ev = _check(w, next(c for c in group if c["label"] == x), setup, deadline_s, emit)
            if not ev["ok"]:
                out[x] = ev
                continue
            try:
                r = w.request(
                    {"op": "time", "labels": [x], "rounds": rounds, "reps": reps}, timeout, emit
                )
                timed.update(r.get("results", {}))
            except _Lost as e:
                out[x] = failure(
                    e.why.get("kind", "crash"),
                    None,
                    label=x,
                    **{k: v for k, v in e.why.items() if k != "kind"},
                    phase="timing",
                )
                emit(out[x])
    for x in labels:
        if x in timed:
            res = dict(timed[x], ok=True, rel=passed[x]["rel"], device=w.device)
            out[x] = res
            emit(dict(res, event="result", label=x, gpu=w.gpu))
        elif x not in out or out[x].get("ok"):
            out[x] = failure(
                "error",
                None,
                label=x,
                message=f"not timed: {why or 'the worker lost the kernel'}",
                phase="timing",
            )
            emit(out[x])
    return out


def _check(
    w: _Worker, c: Mapping[str, str], setup: dict, deadline_s: float, emit: Callable[[dict], None]
) -> dict:
    req = {
        "op": "check",
        "cand": {"label": c["label"], "dir": c["dir"], "name": c.get("name")},
        "setup": setup,
        "deadline_s": deadline_s,
    }
    try:
        ev = w.request(req, deadline_s + _SETUP_S, emit)
    except _Lost as e:
        ev = failure(
            e.why.get("kind", "crash"),
            None,
            label=c["label"],
            **{k: v for k, v in e.why.items() if k != "kind"},
        )
    ev = dict(ev, label=c["label"], gpu=w.gpu)
    ev.pop("id", None)
    emit(ev)
    return ev
