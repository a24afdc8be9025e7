"""Checking and timing candidate kernels on GPUs, one worker process per GPU.

The parent (:func:`time_candidates`) splits the candidates over the visible GPUs and drives
one worker per GPU (``python -m cypressc.tuner.timing``, ``CUDA_VISIBLE_DEVICES`` set to that
GPU) over JSON lines.  A worker draws the inputs once (``torch.randn`` in each parameter's
dtype), computes the reference outputs (a PyTorch function, or the baseline kernel when none
is given), then for each candidate: loads it through :mod:`cypressc.runtime`, runs it on
NaN-poisoned outputs and compares with the reference (``||out - ref|| / ||ref|| < 1e-2``, no
NaN); only candidates that pass are timed.  Timing is the benches' method: interleaved
rounds (each round times every candidate in turn, so drift hits all alike), ``reps`` calls
per round each between its own CUDA events queued behind a short GPU sleep, the median over
all calls.  A candidate that crashes or hangs its worker costs only itself: the parent
restarts the worker on the rest.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["timed", "interleaved", "load_reference", "gpu_count", "time_candidates", "TOLERANCE"]

TOLERANCE = 1e-2
_HANG_S = 120.0     # no word from a worker for this long: it is stuck on a candidate


# --------------------------------------------------------------------------------------------
# The timing primitive (bench/gemm.py and bench/variants.py use it too)
# --------------------------------------------------------------------------------------------


def timed(torch, fn: Callable[[], Any], reps: int) -> list[float]:
    """``reps`` calls of ``fn``, each between its own CUDA events, queued behind ~1 ms of GPU
    sleep so host launch overhead never leaves the GPU idle inside a measured interval;
    returns the milliseconds of each call."""
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(2_000_000)
    for e0, e1 in ev:
        e0.record()
        fn()
        e1.record()
    torch.cuda.synchronize()
    return [e0.elapsed_time(e1) for e0, e1 in ev]


def interleaved(torch, fns: Mapping[str, Callable[[], Any]], rounds: int, reps: int,
                on_round: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Per-call milliseconds of each function over ``rounds`` interleaved rounds of ``reps``."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds):
        for k, fn in fns.items():
            samples[k] += timed(torch, fn, reps)
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
# The parent side
# --------------------------------------------------------------------------------------------


def time_candidates(cands: Sequence[Mapping[str, str]], sizes: Mapping[str, int], *,
                    reference: str | None = None, baseline: str | None = None, rounds: int = 5,
                    reps: int = 10, gpus: int | None = None,
                    on_event: Callable[[dict], None] | None = None) -> dict[str, dict]:
    """Check and time ``cands`` (each ``{"label", "dir", "name"}``) at ``sizes``.

    ``reference`` is a :func:`load_reference` spec; without one, outputs are compared with
    the candidate labelled ``baseline`` (which must pass to define them).  Returns, per label,
    ``{"ok": True, "ms", "tflops", "rel", "device"}`` or ``{"ok": False, "error"}``.  Each
    worker event is passed to ``on_event`` (progress)."""
    gpus = gpus if gpus is not None else gpu_count()
    if gpus < 1:
        raise RuntimeError("no CUDA GPU is visible; use --compile-only on a machine without one")
    groups = [list(cands[i::gpus]) for i in range(gpus)]
    if baseline and reference is None:   # every worker needs the baseline for its reference
        base = [c for c in cands if c["label"] == baseline]
        groups = [g if base[0] in g else base + g for g in groups]
    results: dict[str, dict] = {}
    lock = threading.Lock()

    def drive(gpu: int, group: list[Mapping[str, str]]) -> None:
        todo = list(group)
        restarts = 0
        while todo and restarts <= len(group):
            got = _run_worker(gpu, todo, sizes, reference, baseline, rounds, reps, on_event)
            with lock:
                for label, r in got.items():
                    if label not in results or not results[label].get("ok"):
                        results[label] = r
            todo = [c for c in todo if c["label"] not in got]
            restarts += 1

    threads = [threading.Thread(target=drive, args=(g, grp), daemon=True) for g, grp in enumerate(groups) if grp]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)      # joins in slices so Ctrl-C reaches the caller
    return results


_PROCS: set[subprocess.Popen] = set()


def stop_workers() -> None:
    """Kill the workers this process started (Ctrl-C)."""
    for p in list(_PROCS):
        p.kill()


def _run_worker(gpu: int, cands: list, sizes, reference, baseline, rounds, reps, on_event) -> dict[str, dict]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=_visible(gpu), PYTHONUNBUFFERED="1")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    job = {"cands": list(cands), "sizes": dict(sizes), "reference": reference, "baseline": baseline,
           "rounds": rounds, "reps": reps}
    p = subprocess.Popen([sys.executable, "-m", "cypressc.tuner.timing"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    _PROCS.add(p)
    last = [time.monotonic()]
    done = threading.Event()

    def watchdog() -> None:
        while not done.wait(1.0):
            if time.monotonic() - last[0] > _HANG_S:
                p.kill()
                return

    threading.Thread(target=watchdog, daemon=True).start()
    out: dict[str, dict] = {}
    current = None
    try:
        p.stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
        p.stdin.close()  # type: ignore[union-attr]
        for line in p.stdout:  # type: ignore[union-attr]
            last[0] = time.monotonic()
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            ev["gpu"] = gpu
            kind = ev.get("event")
            if kind == "start":
                current = ev["label"]
            elif kind == "checked":
                current = None
                if not ev["ok"]:
                    out[ev["label"]] = {"ok": False, "error": ev.get("error", "wrong result")}
            elif kind == "result":
                out[ev["label"]] = {k: ev[k] for k in ("ms", "tflops", "rel", "device", "min_ms", "max_ms", "n")}
                out[ev["label"]]["ok"] = True
            elif kind == "fatal":
                for c in cands:
                    out.setdefault(c["label"], {"ok": False, "error": ev["error"]})
            if on_event:
                on_event(ev)
        p.wait()
    finally:
        done.set()
        _PROCS.discard(p)
        if p.poll() is None:
            p.kill()
            p.wait()
    if current is not None and current not in out:
        err = (p.stderr.read() if p.stderr else "")[-600:].strip()  # type: ignore[union-attr]
        out[current] = {"ok": False, "error": f"the worker died or hung (exit {p.returncode}) on this "
                        f"candidate{': ' + err if err else ''}"}
    return out


def _visible(gpu: int) -> str:
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis:
        ids = [x for x in vis.split(",") if x.strip()]
        if gpu < len(ids):
            return ids[gpu]
    return str(gpu)


# --------------------------------------------------------------------------------------------
# The worker side
# --------------------------------------------------------------------------------------------


def _say(**ev: Any) -> None:
    print(json.dumps(ev), flush=True)


def _rel(torch, out, ref) -> float:
    if out.numel() == 0:
        return 0.0
    den = float(ref.double().norm())
    diff = float((out.double() - ref.double()).norm())
    return diff / den if den else diff


def _worker(job: dict) -> None:
    import torch

    from cypressc import runtime

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.cuda.get_device_name()
    _say(event="device", name=dev)
    sizes = {k: int(v) for k, v in job["sizes"].items()}
    kernels: dict[str, Any] = {}
    inputs: dict[str, Any] | None = None
    outs: dict[str, Any] = {}
    ref: dict[str, Any] | None = None
    ref_fn = load_reference(job["reference"]) if job.get("reference") else None
    order = sorted(job["cands"], key=lambda c: c["label"] != job.get("baseline"))
    passed = []
    for c in order:
        _say(event="start", label=c["label"])
        try:
            k = runtime.load(c["dir"], c.get("name"))
            if inputs is None:
                torch.manual_seed(0)
                inputs = {}
                for p in k.info.params:
                    dt = getattr(torch, runtime.DTYPES[p.dtype].torch)
                    shape = k.info.shape(p, sizes)
                    if p.reads:
                        inputs[p.name] = (torch.randn(shape, device="cuda").to(dt) if runtime.DTYPES[p.dtype].floating
                                          else torch.randint(-8, 8, shape, dtype=dt, device="cuda"))
                    if p.writes:
                        outs[p.name] = torch.empty(shape, dtype=dt, device="cuda")
                if ref_fn is not None:
                    ref = {n: t.float() for n, t in ref_fn(dict(inputs)).items()}
            args = []
            for p in k.info.params:
                if not p.writes:
                    args.append(inputs[p.name])
                    continue
                if p.reads:       # in/out: every candidate starts from the same input
                    outs[p.name].copy_(inputs[p.name])
                else:
                    outs[p.name].fill_(float("nan"))
                args.append(outs[p.name])
            k(*args)
            torch.cuda.synchronize()
            got = {n: t.float() for n, t in outs.items()}
            if ref is None:            # the baseline defines the reference
                if c["label"] != job.get("baseline"):
                    raise RuntimeError("no reference: the baseline kernel failed")
                ref = {n: t.clone() for n, t in got.items()}
            bad = [n for n, t in got.items() if bool(torch.isnan(t).any())]
            rel = max((_rel(torch, got[n], ref[n]) for n in ref if n in got), default=0.0)
            if bad or rel >= TOLERANCE:
                why = f"NaN left in {', '.join(bad)}" if bad else f"rel error {rel:.2e} >= {TOLERANCE}"
                _say(event="checked", label=c["label"], ok=False, error=why, rel=rel)
                continue
            kernels[c["label"]] = k.bind(*args)
            for _ in range(2):
                kernels[c["label"]]()
            torch.cuda.synchronize()
            passed.append((c["label"], rel, k.flops(sizes)))
            _say(event="checked", label=c["label"], ok=True, rel=rel)
        except Exception as e:  # noqa: BLE001 - reported per candidate
            _say(event="checked", label=c["label"], ok=False, error=f"{type(e).__name__}: {e}"[:500])
    samples = interleaved(torch, kernels, job["rounds"], job["reps"],
                          on_round=lambda r: _say(event="round", round=r + 1, of=job["rounds"]))
    for label, rel, flops in passed:
        ms = statistics.median(samples[label])
        _say(event="result", label=label, ms=ms, tflops=flops / ms / 1e9 if ms else 0.0, rel=rel, device=dev,
             min_ms=min(samples[label]), max_ms=max(samples[label]), n=len(samples[label]))
    _say(event="done")


if __name__ == "__main__":  # pragma: no cover - runs on a GPU machine
    try:
        _worker(json.loads(sys.stdin.readline()))
    except Exception as e:  # noqa: BLE001 - the parent reports it against every candidate
        _say(event="fatal", error=f"{type(e).__name__}: {e}"[:800])
        sys.exit(1)
