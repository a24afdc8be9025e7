"""The GPU side of ``cypressc tune``: one long-lived process per GPU (``python -m
cypressc.tuner.worker``, started by :mod:`cypressc.tuner.timing`).

It speaks JSON lines: requests on stdin, one reply per request on stdout (carrying the
request's ``id``), progress events (``"round"``) in between.  Requests:

``{"op": "check", "id", "cand": {"label", "dir", "name"}, "setup": {...}, "deadline_s"}``
    load the candidate's ``lib<name>.so`` (kept loaded), run it once on the inputs of
    ``setup`` and compare its outputs with the reference (:func:`~cypressc.tuner.verdicts.compare`);
    a candidate that passes is kept bound to the inputs for timing.  Reply ``"checked"``:
    ``ok`` and, for a failure, its ``kind`` and details (:func:`~cypressc.tuner.verdicts.failure`).
``{"op": "time", "id", "labels", "rounds", "reps"}``
    interleaved rounds over the kept candidates (:func:`~cypressc.tuner.timing.interleaved`);
    reply ``"timed"`` with the milliseconds of each label.
``{"op": "quit"}``

``setup`` = ``{"sizes", "reference", "baseline"}`` (and ``"floats"``, the values of the
kernel's ``float`` parameters, passed by keyword to every call) names one (program, size):
the inputs (``torch.randn`` on the GPU in each parameter's dtype, seed 0) and the reference
outputs (``reference`` is a ``FILE.py:FUNC`` PyTorch function, called with the inputs and the
floats in one dict, else the ``baseline`` candidate's own outputs) are made once, when a
check first names that setup, and dropped with every kept kernel when another setup comes.  A candidate that leaves the CUDA context unusable (a
crash, a launch error the context does not survive) or that does not finish within
``deadline_s`` (its kernel still occupies the GPU) is answered, then the process exits: the
parent starts a fresh one for the next request.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

from cypressc.abi.dtypes import DTYPES
from cypressc.tuner.timing import interleaved, load_reference
from cypressc.tuner.verdicts import (
    ELEMENT_TOLERANCE,
    FP8_ELEMENT_TOLERANCE,
    compare,
    failure,
)

_POLL_S = 0.0005


def _say(**ev: Any) -> None:
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


class _State:
    """What the worker keeps between requests: the current setup's inputs, output buffers and
    reference, and the kernels checked on them."""

    def __init__(self, torch) -> None:
        self.torch = torch
        self.key: str | None = None
        self.inputs: dict[str, Any] = {}
        self.outs: dict[str, Any] = {}
        self.floats: dict[str, float] = {}
        self.sizes: dict[str, int] = {}
        self.ref: dict[str, Any] | None = None
        self.kept: dict[str, tuple[Any, Any, float]] = {}  # label -> (kernel, bound launch, flops)
        self.ref_fns: dict[str, Any] = {}  # reference spec -> function (loaded once)

    # ---- setup ---------------------------------------------------------------------------

    def setup(self, setup: dict, kernel) -> None:
        """Make the inputs and the reference of ``setup`` if they are not the current ones."""
        torch = self.torch
        from cypressc import runtime

        key = json.dumps(setup, sort_keys=True)
        if key == self.key:
            return
        self.key, self.inputs, self.outs, self.ref, self.kept = None, {}, {}, None, {}
        torch.cuda.empty_cache()
        sizes = {k: int(v) for k, v in setup["sizes"].items()}
        self.sizes = sizes
        self.floats = {k: float(v) for k, v in setup.get("floats", {}).items()}
        gen = torch.Generator(device="cuda").manual_seed(0)
        for p in kernel.info.params:
            dt = runtime.DTYPES[p.dtype]
            tdt = getattr(torch, dt.torch)
            shape = kernel.info.shape(p, sizes)
            if p.reads:
                self.inputs[p.name] = (
                    torch.randn(shape, device="cuda", generator=gen).to(tdt)
                    if dt.floating
                    else torch.randint(-8, 8, shape, dtype=tdt, device="cuda", generator=gen)
                )
            if p.writes:
                self.outs[p.name] = torch.empty(shape, dtype=tdt, device="cuda")
        if setup.get("reference"):
            spec = setup["reference"]
            if spec not in self.ref_fns:
                self.ref_fns[spec] = load_reference(spec)
            got = self.ref_fns[spec]({**self.inputs, **self.floats})
            self.ref = {n: t.float() for n, t in got.items()}
        else:  # the baseline kernel's outputs are the reference
            base = setup["baseline"]
            k = runtime.load(base["dir"], base.get("name"))
            self._run(k.bind(*self._args(k), **self._keywords(k)), 30.0)
            self.ref = {n: t.float().clone() for n, t in self.outs.items()}
            bad = [n for n, t in self.ref.items() if bool(torch.isnan(t).any())]
            if bad:
                raise RuntimeError(
                    f"no reference: the baseline kernel left NaN in {', '.join(bad)}"
                )
        torch.cuda.synchronize()
        self.key = key

    def _keywords(self, kernel) -> dict:
        """The keyword arguments of a call: the ``float`` parameters, and the int sizes that fix
        no tensor's shape (FlashAttention's ``causal``), which the kernel takes by keyword."""
        shaped = {d for p in kernel.info.params for d in p.dims if isinstance(d, str)}
        ints = {s: self.sizes[s] for s in kernel.info.sizes if s not in shaped and s in self.sizes}
        return {**ints, **self.floats}

    def _args(self, kernel) -> list:
        """The kernel's arguments: inputs as drawn, outputs NaN-poisoned (an element nobody
        writes shows), in/out tensors reset to their input."""
        args = []
        for p in kernel.info.params:
            if not p.writes:
                args.append(self.inputs[p.name])
                continue
            if p.reads:
                self.outs[p.name].copy_(self.inputs[p.name])
            else:
                self.outs[p.name].fill_(float("nan"))
            args.append(self.outs[p.name])
        return args

    def _run(self, launch, deadline_s: float) -> float:
        """One launch between CUDA events; waits at most ``deadline_s`` for it; returns ms.
        Raises ``TimeoutError`` when the kernel has not finished by then."""
        torch = self.torch
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        launch()
        e1.record()
        t_end = time.monotonic() + deadline_s
        while not e1.query():
            if time.monotonic() > t_end:
                raise TimeoutError(f"the kernel did not finish within {deadline_s:g} s")
            time.sleep(_POLL_S)
        torch.cuda.synchronize()
        return e0.elapsed_time(e1)

    # ---- requests ------------------------------------------------------------------------

    def check(self, req: dict) -> dict:
        from cypressc import runtime

        torch = self.torch
        c, t0 = req["cand"], time.perf_counter()
        label = c["label"]
        self.kept.pop(label, None)
        try:
            kernel = runtime.load(c["dir"], c.get("name"))
        except (OSError, ValueError) as e:
            return failure("load_error", e, label=label)
        try:
            self.setup(req["setup"], kernel)
        except TimeoutError as e:  # the baseline hung defining the reference
            return failure("setup", e, label=label, fatal=True)
        except Exception as e:  # noqa: BLE001 - inputs or reference: the whole setup fails
            return failure("setup", e, label=label, fatal=not _healthy(torch))
        sizes = {k: int(v) for k, v in req["setup"]["sizes"].items()}
        try:
            launch = kernel.bind(*self._args(kernel), **self._keywords(kernel))
            ms = self._run(launch, float(req.get("deadline_s", 5.0)))
        except TimeoutError as e:
            return failure("timeout", e, label=label, fatal=True)
        except Exception as e:  # noqa: BLE001 - classified by failure()
            return failure(None, e, label=label, fatal=not _healthy(torch))
        fp8 = any(  # an FP8 operand: a one-byte float the kernel reads
            q.reads and DTYPES[q.dtype].floating and DTYPES[q.dtype].itemsize == 1
            for q in kernel.info.params
        )
        verdict = compare(
            torch,
            self.outs,
            self.ref or {},
            elem_tol=FP8_ELEMENT_TOLERANCE if fp8 else ELEMENT_TOLERANCE,
        )
        if not verdict["ok"]:
            return failure(
                "wrong", None, label=label, **{k: v for k, v in verdict.items() if k != "ok"}
            )
        try:  # two more launches: warm, and a time estimate
            ms = min(ms, *(self._run(launch, float(req.get("deadline_s", 5.0))) for _ in range(2)))
        except TimeoutError as e:
            return failure("timeout", e, label=label, fatal=True)
        except Exception as e:  # noqa: BLE001
            return failure(None, e, label=label, fatal=not _healthy(torch))
        self.kept[label] = (kernel, launch, kernel.flops(sizes))
        return {
            "event": "checked",
            "label": label,
            "ok": True,
            "rel": verdict["rel"],
            "est_ms": ms,
            "seconds": time.perf_counter() - t0,
        }

    def time(self, req: dict) -> dict:
        labels = [x for x in req["labels"] if x in self.kept]
        fns = {x: self.kept[x][1] for x in labels}
        t0 = time.perf_counter()
        samples = interleaved(
            self.torch,
            fns,
            int(req["rounds"]),
            int(req["reps"]),
            on_round=lambda r: _say(event="round", round=r + 1, of=int(req["rounds"])),
        )
        out = {}
        for x in labels:
            ms = statistics.median(samples[x])
            out[x] = {
                "ms": ms,
                "tflops": self.kept[x][2] / ms / 1e9 if ms else 0.0,
                "min_ms": min(samples[x]),
                "max_ms": max(samples[x]),
                "n": len(samples[x]),
            }
        return {
            "event": "timed",
            "results": out,
            "missing": [x for x in req["labels"] if x not in self.kept],
            "seconds": time.perf_counter() - t0,
        }


def _healthy(torch) -> bool:
    """Whether the CUDA context still works (an illegal address or a trap poisons it)."""
    try:
        torch.cuda.synchronize()
        return float(torch.ones(1, device="cuda").add_(1).item()) == 2.0
    except Exception:  # noqa: BLE001 - any error means: start a fresh process
        return False


def main() -> None:  # pragma: no cover - runs on a GPU machine
    """The request loop (see the module docstring)."""
    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        name = torch.cuda.get_device_name()
        torch.ones(1, device="cuda").add_(1).item()  # the context, now: not in the first check
    except Exception as e:  # noqa: BLE001 - the parent fails every candidate with this
        _say(event="fatal", error=f"{type(e).__name__}: {e}"[:800])
        sys.exit(1)
    _say(event="ready", device=name, pid=os.getpid())
    state = _State(torch)
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        op = req.get("op")
        if op == "quit":
            break
        try:
            reply = (
                state.check(req)
                if op == "check"
                else state.time(req)
                if op == "time"
                else {"event": "error", "error": f"unknown op {op!r}"}
            )
        except Exception as e:  # noqa: BLE001 - never leave the parent without a reply
            reply = failure(
                None, e, label=req.get("cand", {}).get("label"), fatal=not _healthy(torch)
            )
            if op == "time":
                reply = {
                    "event": "timed",
                    "results": {},
                    "missing": req.get("labels", []),
                    "message": reply["message"],
                    "fatal": reply["fatal"],
                }
        _say(**reply, id=req.get("id"))
        if reply.get("fatal"):
            os._exit(3)  # the GPU may still run the kernel: the process exit frees it


if __name__ == "__main__":  # pragma: no cover
    main()
