"""Why a candidate kernel passes or fails on the GPU, as data: the output comparison and the
failure records of ``cypressc tune`` (docs/tuning.md, step 5).

Pure functions: the GPU worker (:mod:`cypressc.tuner.worker`) calls them on CUDA tensors, the
report and the tests on anything (``compare`` takes the ``torch`` module and tensors of any
device).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "compare",
    "failure",
    "failure_text",
    "TOLERANCE",
    "ELEMENT_TOLERANCE",
    "FP8_ELEMENT_TOLERANCE",
    "FAILURE_KINDS",
]

TOLERANCE = 1e-2  # ||out - ref|| / ||ref||
ELEMENT_TOLERANCE = 0.05  # an element is wrong when off by more than this x the reference's RMS
# ... for a kernel that reads FP8 tensors: the FP8 wgmma adds its products into a narrower
# accumulator than f32 (DeepSeek-V3 §3.3.2: about 14 bits), so an element's error grows with
# K; cuBLASLt's fast accumulation (torch._scaled_mm) is off by 0.07 x RMS at 16384³ on randn
# inputs, as the kernels are (bench/NOTES.md session 30); the norm tolerance stays 1e-2.  Kept
# as tight as that allows: a stale stage (one K step's product missing) is off by more
FP8_ELEMENT_TOLERANCE = 0.1
FAILURE_KINDS = (
    "refused",
    "launch_error",
    "crash",
    "timeout",
    "wrong",
    "load_error",
    "setup",
    "worker",
    "error",
)


def compare(
    torch,
    got: Mapping[str, Any],
    ref: Mapping[str, Any],
    tol: float = TOLERANCE,
    elem_tol: float = ELEMENT_TOLERANCE,
) -> dict[str, Any]:
    """Compare a kernel's outputs ``got`` with ``ref`` (tensors by parameter name; any device;
    names missing from ``got`` are skipped).

    Returns ``{"ok", "rel", "nan", "wrong", "elements"}`` and, when something is wrong,
    ``"where"`` (the tensor and the index box holding its wrong elements, e.g. ``C[0..127,
    3968..4095]``) and ``"first"`` (``{"tensor", "index", "got", "want"}`` of the first one).
    ``rel`` is the largest ``||out - ref|| / ||ref||`` over the tensors (NaN elements left
    out; they are counted in ``nan``); an element is wrong when NaN or off by more than
    ``elem_tol`` x the RMS of its reference tensor.  ``ok``: no NaN, no wrong element and
    ``rel < tol``."""
    out: dict[str, Any] = {"ok": True, "rel": 0.0, "nan": 0, "wrong": 0, "elements": 0}
    for name in ref:
        if name not in got:
            continue
        g, r = got[name].double(), ref[name].double()
        n = g.numel()
        out["elements"] += n
        if n == 0:
            continue
        isnan = torch.isnan(g)
        diff = torch.where(isnan, torch.zeros_like(g), g - r)
        den = float(r.norm())
        rel = float(diff.norm()) / den if den else float(diff.norm())
        rms = den / math.sqrt(n)
        bad = isnan | (diff.abs() > elem_tol * rms)
        nan, wrong = int(isnan.sum()), int(bad.sum())
        out["rel"] = max(out["rel"], rel)
        out["nan"] += nan
        if wrong and "where" not in out:
            idx = bad.nonzero()
            lo, hi = idx.min(dim=0).values.tolist(), idx.max(dim=0).values.tolist()
            first = tuple(idx[0].tolist())
            out["where"] = f"{name}[{', '.join(f'{a}..{b}' for a, b in zip(lo, hi))}]"
            out["first"] = {
                "tensor": name,
                "index": list(first),
                "got": float(g[first]),
                "want": float(r[first]),
            }
        out["wrong"] += wrong
    out["ok"] = out["nan"] == 0 and out["wrong"] == 0 and out["rel"] < tol
    return out


def _classify(exc: BaseException) -> tuple[str, dict[str, Any]]:
    from cypressc.runtime import KernelError, LaunchError

    if isinstance(exc, KernelError):
        return "refused", {"by": "runtime"}
    if isinstance(exc, LaunchError):
        if exc.code == 1:
            return "refused", {"by": "launcher", "cuda": exc.cuda_name, "code": exc.code}
        return "launch_error", {"cuda": exc.cuda_name, "code": exc.code}
    if isinstance(exc, OSError):
        return "load_error", {}
    if isinstance(exc, TimeoutError):
        return "timeout", {}
    if "CUDA error" in str(exc) or type(exc).__name__ == "AcceleratorError":
        return "crash", {}
    return "error", {}


def failure(
    kind: str | None,
    exc: BaseException | None,
    *,
    label: str | None = None,
    fatal: bool = False,
    **details: Any,
) -> dict[str, Any]:
    """The ``checked`` event of a failed candidate: ``{"event", "label", "ok": False, "kind",
    "error" (:func:`failure_text`), "fatal"}`` plus the details.  ``kind`` ``None`` classifies
    ``exc``: :class:`~cypressc.runtime.KernelError` and a launcher's ``cudaErrorInvalidValue``
    (its refusal code) are ``refused``, another :class:`~cypressc.runtime.LaunchError` is
    ``launch_error`` (with the CUDA error name), ``OSError`` ``load_error``, a CUDA error
    raised by PyTorch ``crash``, anything else ``error``.  ``fatal``: the worker must exit."""
    if kind is None and exc is not None:
        kind, extra = _classify(exc)
        details = {**extra, **details}
    rec: dict[str, Any] = {
        "event": "checked",
        "label": label,
        "ok": False,
        "kind": kind or "error",
        "fatal": fatal,
        **details,
    }
    if exc is not None:
        rec["message"] = f"{type(exc).__name__}: {exc}"[:600]
    rec["error"] = failure_text(rec)
    return rec


def failure_text(rec: Mapping[str, Any]) -> str:
    """One line saying why a candidate failed, from a :func:`failure` record (or a parent's
    ``{"kind": "crash", "exit": N, "stderr": ...}`` for a worker that died)."""
    kind, msg = rec.get("kind", "error"), str(rec.get("message", "")).splitlines()
    msg = msg[0] if msg else ""
    if kind == "wrong":
        where = f", in {rec['where']}" if rec.get("where") else ""
        first = rec.get("first")
        at = (
            f"; first at {first['tensor']}{first['index']}: got {first['got']:.4g}, want {first['want']:.4g}"
            if first
            else ""
        )
        return (
            f"wrong result: rel error {rec.get('rel', float('nan')):.3g}, {rec.get('nan', 0)} NaN, "
            f"{rec.get('wrong', 0)} of {rec.get('elements', 0)} elements wrong{where}{at} "
            "(the compiler accepted this mapping: a miscompile)"
        )
    if kind == "refused":
        return f"refused by the {rec.get('by', 'runtime')}: {msg}"
    if kind == "launch_error":
        return f"launch error {rec.get('cuda', '?')}: {msg}"
    if kind == "timeout":
        return f"hangs: {msg or 'no completion'} (worker restarted)"
    if kind == "crash":
        if "exit" in rec:
            tail = str(rec.get("stderr", "")).strip().splitlines()
            return f"crashed: the worker process died (exit {rec['exit']})" + (
                f": {tail[-1][:300]}" if tail else ""
            )
        return f"crashed: {msg} (worker restarted)"
    if kind == "load_error":
        return f"cannot load the library: {msg}"
    if kind == "setup":
        return f"the inputs or the reference failed: {msg}"
    if kind == "worker":
        return f"the GPU worker cannot start: {msg}"
    return msg or kind
