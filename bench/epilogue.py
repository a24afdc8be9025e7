#!/usr/bin/env python3
"""GEMM + bias + activation (issue #14): cypressc's fused gemm_epilogue against its peers.

    PYTHONUNBUFFERED=1 python3 bench/epilogue.py --build DIR [--build DIR ...] [--gemm-build DIR ...]
        [--sizes 4096,8192] [--dtypes auto] [--rounds 5] [--reps 10] [--no-triton] [--no-compile]
        [--compile-mode max-autotune-no-cudagraphs]

C = act(A @ B + bias[None, :]) with A [M, K], B [K, N] row-major in T (f16 or bf16), the
product and the epilogue in f32, C rounded to T; act = GELU (tanh approximation) or SiLU,
per the ACT binding of each build (``info.bindings``; bias_gelu when the info has none).
Sizes (``--sizes``, n or MxNxK, comma-separated): 4096 and 8192 cubed by default.  Dtypes:
f16, plus every T some build was built for (``--dtypes`` overrides).  Per (size, dtype)
one set of inputs, shared by every row: A = randn * K^-1/2, B = randn (so A @ B is about
N(0, 1) and the activation is tested where GELU and SiLU differ), bias = randn [N] in f32,
cast to each consumer's dtype.  The rows, per (size, dtype, act), all in this one process:

* ``cypressc <dir> [bias D]``: each ``--build`` of programs/gemm_epilogue.cyp with this T and
  ACT, ``kern(C, A, B, bias)``, bias in the build's BIAS dtype D;
* ``cypressc gemm <dir>``: each ``--gemm-build`` of programs/gemm.cyp (``kern(C, A, B)``, no
  epilogue): the fusion's upper bound;
* ``cuBLAS mm``: ``torch.matmul(A, B, out=C)``, no epilogue (cuBLAS's bound);
* ``cuBLAS+eager``: ``F.gelu(torch.addmm(bias_T, A, B), approximate="tanh")`` (SiLU:
  ``F.silu(torch.addmm(bias_T, A, B))``), bias_T = bias in T: what ``F.linear`` + activation
  runs in eager PyTorch (a cuBLAS(Lt) GEMM with the bias added, then an elementwise kernel
  reading and writing C in T);
* ``cuBLASLt gelu``: ``torch._addmm_activation(bias_T, A, B, use_gelu=True)`` (GELU only; the
  cuBLASLt GELU+bias epilogue, when this PyTorch has it);
* ``torch.compile[mode]``: the cuBLAS+eager function under ``torch.compile(mode=...,
  dynamic=False)``; when ``--compile-mode`` fails to compile, the default mode (the row says so);
* ``Triton fused``: bench/triton_gemm_epilogue.py (one kernel, bias in f32, epilogue in
  registers, autotuned on the first call).

Every row is run once on NaN-poisoned outputs and checked against the float32 reference
act(A.float() @ B.float() + bias.float()) (TF32 off; its own bias; the plain GEMM rows
against A.float() @ B.float()): ``||out - ref|| / ||ref|| < 1e-2`` and no NaN; a row that is
wrong is reported WRONG and not timed.  Timing is bench/gemm.py's (cypressc.tuner.timing.
interleaved): 3 warm-up calls, then ``--rounds`` rounds in which every row runs ``--reps``
calls, each between its own CUDA events behind a GPU sleep; the median per call.  Reported:
ms, TFLOP/s (2·M·N·K), t / t_fused (milliseconds relative to the fastest correct cypressc
fused build of that size, dtype and act: > 1 is slower than it) and, per fused build, the
floor ratios t_fused / t_plain-gemm (the fastest correct plain cypressc GEMM; 1.00 = the
epilogue is free) and t_fused / t_cuBLAS+eager (< 1 = faster than eager PyTorch).  A
markdown table is printed last (``## GEMM + epilogue``); JSON goes to
$OUT/bench_epilogue.json when OUT is set.  Exit status 1 when a cypressc build (fused or
plain) fails to make or load, refuses a size or is wrong; peers that fail or are wrong are
flagged in the table only.  2 without a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from gemm import make, parse_shapes  # noqa: E402
from gpu_check import binding, epilogue_act  # noqa: E402

from cypressc.tuner.timing import interleaved  # noqa: E402

OUT = os.environ.get("OUT")
TOL = 1e-2
DEVICE = "cuda"  # tests run the checking logic on "cpu" with fake kernels
ACTS = ("bias_gelu", "bias_silu")
TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16"}


@dataclass
class Build:
    """One cypressc build directory: ``kind`` "fused" (gemm_epilogue: C, A, B, bias) or
    "gemm" (C, A, B); ``dtype`` its T; ``bias`` / ``act`` its BIAS dtype and ACT binding."""

    label: str
    path: Path
    kern: Any
    kind: str
    dtype: str
    bias: str | None = None
    act: str | None = None


def check_build(kern, kind: str) -> tuple[str, str | None, str | None]:
    """(T, BIAS, ACT) of a loaded kernel; ``ValueError`` when it is not the expected program."""
    info = kern.info
    want = ["C", "A", "B", "bias"] if kind == "fused" else ["C", "A", "B"]
    names = [p.name for p in info.params]
    if names != want:
        raise ValueError(
            f"params {names}, expected {want} ({'gemm_epilogue' if kind == 'fused' else 'gemm'}): {kern!r}"
        )
    dts = {info.param(n).dtype for n in ("C", "A", "B")}
    if len(dts) != 1 or not dts <= set(TORCH_DTYPES):
        raise ValueError(f"C, A, B must share one dtype of {sorted(TORCH_DTYPES)}: {kern!r}")
    if kind == "gemm":
        return dts.pop(), None, None
    act = binding(info, "ACT", "bias_gelu")
    if act not in ACTS:
        raise ValueError(f"ACT binding {act!r} is none of {ACTS}")
    return dts.pop(), info.param("bias").dtype, act


def load_builds(dirs: list[str], kind: str) -> tuple[list[Build], dict[str, str]]:
    """Make (a no-op when built) and load each directory; errors by label."""
    from cypressc import runtime

    builds, errors = [], {}
    for d in dirs:
        p = Path(d).resolve()
        label = p.name if all(b.label != p.name for b in builds) else f"{p.parent.name}/{p.name}"
        try:
            make(p)
            kern = runtime.load(p)
            dtype, bias, act = check_build(kern, kind)
            builds.append(Build(label, p, kern, kind, dtype, bias, act))
            print(
                f"[build] {label}: {kind}, T={dtype}"
                + (f", BIAS={bias}, ACT={act}" if kind == "fused" else ""),
                flush=True,
            )
        except Exception as e:
            errors[label] = f"{type(e).__name__}: {e}"
            print(f"[build] {label}: FAILED: {errors[label][-1500:]}", flush=True)
    return builds, errors


def dtypes_to_time(spec: str, builds: list[Build]) -> list[str]:
    """``auto``: f16 and every T of a build (f16 first); else the comma-separated list."""
    if spec != "auto":
        return [d for d in spec.split(",") if d]
    return ["f16"] + sorted({b.dtype for b in builds} - {"f16"})


def _eager_gelu(A, B, bias):
    import torch
    import torch.nn.functional as F

    return F.gelu(torch.addmm(bias, A, B), approximate="tanh")


def _eager_silu(A, B, bias):
    import torch
    import torch.nn.functional as F

    return F.silu(torch.addmm(bias, A, B))


EAGER = {
    "bias_gelu": _eager_gelu,
    "bias_silu": _eager_silu,
}  # distinct code objects: one Dynamo cache each


class Compiled:
    """``torch.compile`` of the eager peers, one per act; falls back to the default mode (once,
    for the rest of the run) when the requested mode fails to compile."""

    def __init__(self, torch, mode: str) -> None:
        self.torch, self.mode, self.note, self.fns = torch, mode, "", {}
        cfg = torch._dynamo.config
        for knob in ("cache_size_limit", "recompile_limit"):  # one recompile per (size, dtype)
            if hasattr(cfg, knob):
                setattr(cfg, knob, max(getattr(cfg, knob), 64))

    def get(self, act: str):
        if (act, self.mode) not in self.fns:
            m = None if self.mode == "default" else self.mode
            self.fns[act, self.mode] = self.torch.compile(EAGER[act], mode=m, dynamic=False)
        return self.fns[act, self.mode]

    def first_call(self, act: str, A, B, bias):
        """Compile (this shape) and run once; returns (output, mode used)."""
        try:
            return self.get(act)(A, B, bias), self.mode
        except Exception as e:
            if self.mode == "default":
                raise
            self.note = f"mode {self.mode!r} failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); default mode used"
            print(f"  torch.compile: {self.note}", flush=True)
            self.torch._dynamo.reset()
            self.mode = "default"
            return self.get(act)(A, B, bias), self.mode


def rel_err(torch, out, ref) -> float:
    den = float(ref.double().norm())
    diff = float((out.double() - ref.double()).norm())
    return diff / den if den else diff


def run_group(
    torch,
    M: int,
    N: int,
    K: int,
    dt: str,
    act: str,
    data: dict,
    fused: list[Build],
    plain: list[Build],
    peers: dict,
    args,
) -> dict:
    """Check every row of one (size, dtype, act) on ``data``, then time the correct ones."""
    T = getattr(torch, TORCH_DTYPES[dt])
    A, B, bias32, mm = data["A"], data["B"], data["bias32"], data["mm"]
    bias_T = bias32.to(T)
    nan = float("nan")
    rows: dict[str, dict] = {}
    live: dict[str, Callable[[], Any]] = {}

    def ref_epi(bias):
        return lambda: epilogue_act(mm + bias.float(), act)

    def add(
        name: str,
        kind: str,
        first: Callable[[], Any],
        timed: Callable[[], Callable[[], Any]],
        ref: Callable[[], Any],
        what: str,
        extra: dict | None = None,
    ) -> None:
        """``first()`` runs the row once and returns its output; checked, then ``timed()`` gives
        the callable to time (a kernel's ``bind``: no per-call argument checks)."""
        row = {"kind": kind, "what": what, **(extra or {})}
        rows[name] = row
        try:
            t0 = time.time()
            out = first()
            torch.cuda.synchronize()
            row["first_call_s"] = round(time.time() - t0, 2)
            r = ref()
            row["rel"] = rel_err(torch, out.float(), r)
            row["nan"] = int(torch.isnan(out).sum())
            del r
            row["ok"] = row["nan"] == 0 and row["rel"] < TOL
            if row["ok"]:
                live[name] = timed()
        except Exception as e:
            row.update(ok=False, error=f"{type(e).__name__}: {e}"[:600])
        if not row["ok"]:
            why = row.get("error") or f"rel {row['rel']:.2e}, {row['nan']} NaN"
            print(
                f"  {name}: {'FAILED' if 'error' in row else 'WRONG'} ({why}), not timed",
                flush=True,
            )

    for b in [b for b in fused if b.dtype == dt and b.act == act]:
        bb = bias32.to(getattr(torch, _tdt(b.bias)))
        C = torch.empty(M, N, dtype=T, device=DEVICE)
        add(
            f"cypressc {b.label} [bias {b.bias}]",
            "fused",
            lambda C=C, b=b, bb=bb: (C.fill_(nan), b.kern(C, A, B, bb), C)[-1],
            lambda C=C, b=b, bb=bb: b.kern.bind(C, A, B, bb),
            ref_epi(bb),
            f"kern(C, A, B, bias) from {b.path}",
            {"build": b.label},
        )
    for b in [b for b in plain if b.dtype == dt]:
        C = torch.empty(M, N, dtype=T, device=DEVICE)
        add(
            f"cypressc gemm {b.label}",
            "gemm",
            lambda C=C, b=b: (C.fill_(nan), b.kern(C, A, B), C)[-1],
            lambda C=C, b=b: b.kern.bind(C, A, B),
            lambda: mm,
            f"kern(C, A, B) from {b.path} (no epilogue)",
            {"build": b.label},
        )
    Cm = torch.empty(M, N, dtype=T, device=DEVICE)
    add(
        "cuBLAS mm",
        "peer",
        lambda: (Cm.fill_(nan), torch.matmul(A, B, out=Cm))[-1],
        lambda: lambda: torch.matmul(A, B, out=Cm),
        lambda: mm,
        "torch.matmul(A, B, out=C) (no epilogue)",
    )
    eager = EAGER[act]
    add(
        "cuBLAS+eager",
        "eager",
        lambda: eager(A, B, bias_T),
        lambda: lambda: eager(A, B, bias_T),
        ref_epi(bias_T),
        'F.gelu(torch.addmm(bias_T, A, B), approximate="tanh")'
        if act == "bias_gelu"
        else "F.silu(torch.addmm(bias_T, A, B))",
    )
    if act == "bias_gelu" and hasattr(torch, "_addmm_activation"):
        lt = lambda: torch._addmm_activation(bias_T, A, B, use_gelu=True)  # noqa: E731
        add(
            "cuBLASLt gelu",
            "peer",
            lt,
            lambda: lt,
            ref_epi(bias_T),
            "torch._addmm_activation(bias_T, A, B, use_gelu=True)",
        )
    if peers.get("compile") is not None:
        comp = peers["compile"]
        out, mode = None, comp.mode
        try:
            t0 = time.time()
            out, mode = comp.first_call(act, A, B, bias_T)
            torch.cuda.synchronize()
            print(
                f"  torch.compile[{mode}] {act} {M}x{N}x{K} {dt}: compiled in {time.time() - t0:.0f}s",
                flush=True,
            )
        except Exception as e:
            rows[f"torch.compile[{mode}]"] = {
                "kind": "peer",
                "ok": False,
                "error": f"{type(e).__name__}: {e}"[:600],
            }
            print(
                f"  torch.compile[{mode}]: FAILED ({rows[f'torch.compile[{mode}]']['error'][:300]})",
                flush=True,
            )
        if out is not None:
            cf = comp.get(act)
            add(
                f"torch.compile[{mode}]",
                "peer",
                lambda: out,
                lambda: lambda: cf(A, B, bias_T),
                ref_epi(bias_T),
                f"torch.compile({EAGER[act].__name__}, mode={mode!r}, dynamic=False)(A, B, bias_T)"
                + (f"; {comp.note}" if comp.note else ""),
            )
    if peers.get("triton") is not None:
        tri = peers["triton"]
        Ct = torch.empty(M, N, dtype=T, device=DEVICE)
        add(
            "Triton fused",
            "peer",
            lambda: (Ct.fill_(nan), tri(A, B, bias32, Ct, act))[-1],
            lambda: lambda: tri(A, B, bias32, Ct, act),
            ref_epi(bias32),
            "bench/triton_gemm_epilogue.py (bias f32)",
        )
        if rows["Triton fused"].get("ok"):
            rows["Triton fused"]["config"] = tri.best(M, N, K, act)

    for fn in live.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    samples = interleaved(torch, live, args.rounds, args.reps)  # drift hits every row alike
    flops = 2.0 * M * N * K
    for name, s in samples.items():
        ms = statistics.median(s)
        rows[name].update(ms=ms, tflops=flops / ms / 1e9, min_ms=min(s), max_ms=max(s), n=len(s))
    return {"M": M, "N": N, "K": K, "dtype": dt, "act": act, "rows": rows, **floor(rows)}


def _tdt(d: str) -> str:
    """cypressc dtype name -> torch attribute name."""
    return {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}[d]


def floor(rows: dict) -> dict:
    """t_fused (the fastest correct fused build) and each fused build's floor ratios."""
    ms = lambda kind: min(
        (r["ms"] for r in rows.values() if r["kind"] == kind and "ms" in r), default=None
    )  # noqa: E731
    t_fused, t_plain = ms("fused"), ms("gemm")
    t_eager = rows.get("cuBLAS+eager", {}).get("ms")
    for r in rows.values():
        if t_fused and "ms" in r:
            r["t_over_fused"] = r["ms"] / t_fused
    ratios = {
        name: {
            "fused_over_plain_gemm": r["ms"] / t_plain if t_plain else None,
            "fused_over_eager": r["ms"] / t_eager if t_eager else None,
        }
        for name, r in rows.items()
        if r["kind"] == "fused" and "ms" in r
    }
    return {"t_fused": t_fused, "t_plain_gemm": t_plain, "t_eager": t_eager, "floor": ratios}


def make_data(torch, M: int, N: int, K: int, dt: str) -> dict:
    """One (size, dtype)'s inputs and the f32 product A.float() @ B.float() (TF32 off)."""
    T = getattr(torch, TORCH_DTYPES[dt])
    g = torch.Generator(device=DEVICE).manual_seed(1400 + M + N + K)
    A = torch.randn(M, K, dtype=T, device=DEVICE, generator=g).mul_(K**-0.5 if K else 1.0)
    B = torch.randn(K, N, dtype=T, device=DEVICE, generator=g)
    bias32 = torch.randn(N, dtype=torch.float32, device=DEVICE, generator=g)
    return {"A": A, "B": B, "bias32": bias32, "mm": A.float() @ B.float()}


def f(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(results: list[dict], device: str, args) -> list[str]:
    L = [
        f"## GEMM + epilogue: C = act(A @ B + bias) in f32, rounded to T; {device}, median of "
        f"{args.rounds}x{args.reps} calls; t/t_fused = ms / ms of the fastest correct cypressc fused build",
        "| M | N | K | dtype | act | impl | ms | TFLOP/s | t/t_fused | rel err |",
        "|---:|---:|---:|---|---|---|---:|---:|---:|---:|",
    ]
    for g in results:
        head = f"| {g['M']} | {g['N']} | {g['K']} | {g['dtype']} | {g['act']} |"
        for name, r in g["rows"].items():
            if "error" in r:
                cells = "FAILED | - | - | -"
            elif not r.get("ok"):
                cells = f"WRONG | - | - | {f(r.get('rel'), '.1e')}"
            else:
                cells = (
                    f"{r['ms']:.3f} | {r['tflops']:.1f} | {f(r.get('t_over_fused'), '.3f')} | "
                    f"{f(r.get('rel'), '.1e')}"
                )
            L.append(
                f"{head} {name}{' (' + r['config'] + ')' if r.get('config') else ''} | {cells} |"
            )
    L += [
        "",
        "### floor ratios (milliseconds): t_fused / t_plain-cypressc-gemm (1.00 = the epilogue is free), "
        "t_fused / t_cuBLAS+eager (< 1 = faster than eager PyTorch)",
        "| M | N | K | dtype | act | fused build | t_fused/t_plain_gemm | t_fused/t_cuBLAS+eager |",
        "|---:|---:|---:|---|---|---|---:|---:|",
    ]
    for g in results:
        for name, r in g["floor"].items():
            L.append(
                f"| {g['M']} | {g['N']} | {g['K']} | {g['dtype']} | {g['act']} | {name} | "
                f"{f(r['fused_over_plain_gemm'], '.3f')} | {f(r['fused_over_eager'], '.3f')} |"
            )
        if not g["floor"]:
            L.append(
                f"| {g['M']} | {g['N']} | {g['K']} | {g['dtype']} | {g['act']} | (no correct fused build) | - | - |"
            )
    return L


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--build",
        action="append",
        default=[],
        metavar="DIR",
        help="a built programs/gemm_epilogue.cyp directory; repeatable",
    )
    ap.add_argument(
        "--gemm-build",
        action="append",
        default=[],
        metavar="DIR",
        help="a built programs/gemm.cyp directory (no epilogue: the fusion's bound); repeatable",
    )
    ap.add_argument(
        "--sizes", default="4096,8192", help="n or MxNxK, comma-separated (default 4096,8192)"
    )
    ap.add_argument("--dtypes", default="auto", help="f16,bf16 or auto (f16 + every build's T)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-triton", action="store_true", help="skip the fused Triton kernel")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument(
        "--compile-mode",
        default="max-autotune-no-cudagraphs",
        help="torch.compile mode ('default' for none); falls back to default if it fails",
    )
    args = ap.parse_args()
    sizes = parse_shapes(args.sizes)

    import torch

    if not torch.cuda.is_available():
        print(
            "bench/epilogue.py needs a CUDA GPU (torch.cuda.is_available() is False)",
            file=sys.stderr,
        )
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.cuda.get_device_name()
    print(f"[env] {device} | torch {torch.__version__} (CUDA {torch.version.cuda})", flush=True)

    fused, errors = load_builds(args.build, "fused")
    plain, err2 = load_builds(args.gemm_build, "gemm")
    errors.update(err2)
    peers: dict[str, Any] = {}
    if not args.no_triton:
        try:
            import triton

            from triton_gemm_epilogue import make_gemm_epilogue

            peers["triton"] = make_gemm_epilogue()
            print(f"[env] triton {triton.__version__}", flush=True)
        except Exception as e:
            print(f"[peer] Triton: unavailable: {type(e).__name__}: {e}", flush=True)
    if not args.no_compile:
        peers["compile"] = Compiled(torch, args.compile_mode)

    results: list[dict] = []
    bad_builds: list[str] = []
    t0 = time.time()
    for M, N, K in sizes:
        for dt in dtypes_to_time(args.dtypes, fused + plain):
            acts = list(dict.fromkeys(b.act for b in fused if b.dtype == dt)) or ["bias_gelu"]
            t1 = time.time()
            data = make_data(torch, M, N, K, dt)
            for act in acts:
                try:
                    g = run_group(torch, M, N, K, dt, act, data, fused, plain, peers, args)
                except Exception as e:
                    g = {
                        "M": M,
                        "N": N,
                        "K": K,
                        "dtype": dt,
                        "act": act,
                        "rows": {},
                        "floor": {},
                        "error": f"{type(e).__name__}: {e}"[:600],
                    }
                    print(f"[{M}x{N}x{K} {dt} {act}] FAILED: {g['error']}", flush=True)
                results.append(g)
                bad_builds += [
                    f"{n} at {M}x{N}x{K}"
                    for n, r in g["rows"].items()
                    if r["kind"] in ("fused", "gemm") and not r.get("ok")
                ]
                line = " | ".join(
                    f"{n} {r['ms']:.3f} ms"
                    if "ms" in r
                    else f"{n} {'FAILED' if 'error' in r else 'WRONG'}"
                    for n, r in g["rows"].items()
                )
                print(f"[{M}x{N}x{K} {dt} {act}] {line}  ({time.time() - t1:.0f}s)", flush=True)
                if OUT:
                    Path(OUT).mkdir(parents=True, exist_ok=True)
                    (Path(OUT) / "bench_epilogue.json").write_text(
                        json.dumps(
                            {"device": device, "errors": errors, "results": results},
                            indent=1,
                            default=str,
                        )
                    )
            del data
            torch.cuda.empty_cache()

    print(f"\n({time.time() - t0:.0f}s)")
    for line in table(results, device, args):
        print(line)
    print("\nwhat each row times (C in T; bias_T = the f32 bias cast to T):")
    for name, w in dict.fromkeys(
        (n, r["what"]) for g in results for n, r in g["rows"].items() if r.get("what")
    ):
        print(f"  {name}: {w}")
    for n, e in errors.items():
        print(f"\n{n}: not measured: {e.splitlines()[0][:300] if e else e}")
    for b in bad_builds:
        print(f"WRONG or FAILED build: {b}")
    if any("error" in g for g in results):
        return 1
    return 1 if errors or bad_builds else 0


if __name__ == "__main__":
    sys.exit(main())
