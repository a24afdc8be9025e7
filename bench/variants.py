#!/usr/bin/env python3
"""The GEMM variants against their peers, in one process, as ratios (issue #5, paper §5.2).

    PYTHONUNBUFFERED=1 python3 bench/variants.py [--programs batched_gemm,dual_gemm,gemm_reduction,gemm]
        [--dtypes f16,bf16] [--mapping h100] [--build-root build/gpu_check] [--rounds 5] [--reps 10]
        [--no-triton] [--shapes-scale 1]

Per program and dtype, every peer runs on the same fresh ``torch.randn`` inputs:

* ``batched_gemm`` (C[l] = A[l] @ B[l]): ``torch.bmm`` (cuBLAS batched) vs cypressc;
* ``dual_gemm`` (D = A @ B1 + A @ B2): two cuBLAS GEMMs + ``torch.add`` (three launches, the
  partial products rounded to the dtype), an autotuned Triton fused dual-GEMM kernel (below),
  and cypressc;
* ``gemm_reduction`` (C = A @ B, y = row sums of A in f32): cuBLAS GEMM + ``torch.sum(A, 1,
  dtype=float32)``, an autotuned Triton fused kernel (below), and cypressc;
* ``gemm`` (bf16 only by default; bench/gemm.py covers f16): cuBLAS vs cypressc.

The cypressc kernel is ``<build-root>/<program>-<mapping>[-<dtype>]`` when bench/gpu_check.py
built it there, else it is built with ``cypressc build … --dtype T=<dtype>``.  Every peer's
outputs are checked against a float32 PyTorch reference (``||out - ref|| / ||ref||``; flagged
above 1e-3 for f16 and 5e-3 for bf16, several times what one rounding of the output gives).  Timing is bench/gemm.py's: warm-up, then ``--rounds`` interleaved rounds of
``--reps`` calls each between its own CUDA events behind a GPU sleep; the median per call.
Reported: TFLOP/s of useful work (batched 2LMNK, dual 4MNK, reduction 2MNK + MK) and each
peer's ratio to the first peer (the cuBLAS/PyTorch composition; > 1 is faster).  A markdown
table per program is printed last; JSON goes to $OUT/bench_variants.json when OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from gemm import build_mapping, make  # noqa: E402
from gpu_check import PROGRAMS  # noqa: E402

from cypressc.tuner.timing import interleaved  # noqa: E402

OUT = os.environ.get("OUT")

SHAPES = {
    "batched_gemm": [
        dict(L=8, M=2048, N=2048, K=2048),
        dict(L=16, M=1024, N=1024, K=1024),
        dict(L=4, M=4096, N=4096, K=4096),
        dict(L=32, M=512, N=512, K=2048),
    ],
    "dual_gemm": [
        dict(M=2048, N=2048, K=2048),
        dict(M=4096, N=4096, K=4096),
        dict(M=8192, N=8192, K=8192),
        dict(M=8192, N=4096, K=8192),
    ],
    "gemm_reduction": [
        dict(M=2048, N=2048, K=2048),
        dict(M=4096, N=4096, K=4096),
        dict(M=8192, N=8192, K=8192),
        dict(M=8192, N=8192, K=1024),
    ],
    "gemm": [
        dict(M=4096, N=4096, K=4096),
        dict(M=8192, N=8192, K=8192),
        dict(M=8192, N=8192, K=1024),
    ],
    "gemm_bt": [
        dict(M=4096, N=4096, K=4096),
        dict(M=8192, N=8192, K=8192),
        dict(M=8192, N=8192, K=1024),
    ],
}


def flops(program: str, s: dict) -> float:
    if program == "batched_gemm":
        return 2.0 * s["L"] * s["M"] * s["N"] * s["K"]
    if program == "dual_gemm":
        return 4.0 * s["M"] * s["N"] * s["K"]
    if program == "gemm_reduction":
        return 2.0 * s["M"] * s["N"] * s["K"] + s["M"] * s["K"]
    return 2.0 * s["M"] * s["N"] * s["K"]


# --------------------------------------------------------------------------------------------
# Triton peers: fused dual GEMM and fused GEMM + row sum, autotuned per shape
# --------------------------------------------------------------------------------------------


def make_triton_peers():
    import triton
    import triton.language as tl

    def cfgs(shapes):
        return [
            triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP": 8}, num_stages=st, num_warps=w)
            for bm, bn, bk, st, w in shapes
        ]

    dual_cfgs = cfgs(
        [
            (128, 128, 64, 3, 8),
            (128, 128, 64, 4, 8),
            (128, 256, 64, 3, 8),
            (64, 256, 64, 4, 8),
            (128, 64, 64, 4, 4),
        ]
    )
    # Triton 3.6 miscompiles this kernel (x feeding both tl.dot and tl.sum) at 128x256x64 w8
    # (C rel. error 0.5), 128x128x128 w8 (0.03-0.07) and 128x128x64 w8 (5e-3-9e-3, at 1024^3);
    # these configs gave C and y at f16 accuracy (2.1e-4) on H100 (bench/NOTES.md, 2026-11-22)
    red_cfgs = cfgs(
        [(256, 128, 64, 3, 8), (256, 128, 64, 4, 8), (128, 128, 64, 3, 4), (128, 64, 64, 4, 4)]
    )

    @triton.jit
    def _tile(pid, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP: tl.constexpr):
        tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        per_group = GROUP * tiles_n
        m0 = (pid // per_group) * GROUP
        rows = tl.minimum(tiles_m - m0, GROUP)
        return m0 + (pid % per_group) % rows, (pid % per_group) // rows

    @triton.autotune(configs=dual_cfgs, key=["M", "N", "K"])
    @triton.jit
    def _dual(
        a,
        b1,
        b2,
        d,
        M,
        N,
        K,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
        GROUP: tl.constexpr,
    ):
        # both products share the A tile of each K step (one load, two tl.dot)
        tm, tn = _tile(tl.program_id(0), M, N, BM, BN, GROUP)
        rm = tm * BM + tl.arange(0, BM)
        rn = tn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc1 = tl.zeros((BM, BN), dtype=tl.float32)
        acc2 = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            kk = k * BK + rk
            x = tl.load(
                a + rm[:, None] * K + kk[None, :],
                mask=(rm[:, None] < M) & (kk[None, :] < K),
                other=0.0,
            )
            mb = (kk[:, None] < K) & (rn[None, :] < N)
            y1 = tl.load(b1 + kk[:, None] * N + rn[None, :], mask=mb, other=0.0)
            y2 = tl.load(b2 + kk[:, None] * N + rn[None, :], mask=mb, other=0.0)
            acc1 = tl.dot(x, y1, acc1)
            acc2 = tl.dot(x, y2, acc2)
        tl.store(
            d + rm[:, None] * N + rn[None, :],
            (acc1 + acc2).to(d.dtype.element_ty),
            mask=(rm[:, None] < M) & (rn[None, :] < N),
        )

    @triton.autotune(configs=red_cfgs, key=["M", "N", "K"])
    @triton.jit
    def _red(
        a,
        b,
        c,
        y,
        M,
        N,
        K,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
        GROUP: tl.constexpr,
    ):
        # every column tile sums its A panel (the same SIMT work as the fused cypressc kernel);
        # column tile 0 stores y
        tm, tn = _tile(tl.program_id(0), M, N, BM, BN, GROUP)
        rm = tm * BM + tl.arange(0, BM)
        rn = tn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        ys = tl.zeros((BM,), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            kk = k * BK + rk
            x = tl.load(
                a + rm[:, None] * K + kk[None, :],
                mask=(rm[:, None] < M) & (kk[None, :] < K),
                other=0.0,
            )
            w = tl.load(
                b + kk[:, None] * N + rn[None, :],
                mask=(kk[:, None] < K) & (rn[None, :] < N),
                other=0.0,
            )
            acc = tl.dot(x, w, acc)
            ys += tl.sum(x.to(tl.float32), axis=1)
        tl.store(
            c + rm[:, None] * N + rn[None, :],
            acc.to(c.dtype.element_ty),
            mask=(rm[:, None] < M) & (rn[None, :] < N),
        )
        tl.store(y + rm, ys, mask=(rm < M) & (tn == 0))

    def grid(M, N):
        return lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)

    def dual(A, B1, B2, D):
        M, K = A.shape
        N = B1.shape[1]
        _dual[grid(M, N)](A, B1, B2, D, M, N, K)

    def red(A, B, C, y):
        M, K = A.shape
        N = B.shape[1]
        _red[grid(M, N)](A, B, C, y, M, N, K)

    def best(kernel):
        cfg = getattr(kernel, "best_config", None)
        if cfg is None:
            return ""
        kw = cfg.kwargs
        return f"{kw['BM']}x{kw['BN']}x{kw['BK']} s{cfg.num_stages} w{cfg.num_warps}"

    dual.best = lambda: best(_dual)
    red.best = lambda: best(_red)
    return {"dual_gemm": dual, "gemm_reduction": red}


# --------------------------------------------------------------------------------------------
# Peers per program: name -> (outputs dict) -> callable; the first is the ratio baseline
# --------------------------------------------------------------------------------------------


def inputs(torch, program: str, s: dict, dt) -> tuple[dict, dict]:
    """Fresh random inputs and the float32 reference of every output (bench/gpu_check.py's)."""
    r = lambda *shape: torch.randn(*shape, dtype=dt, device="cuda")  # noqa: E731
    if program == "batched_gemm":
        t = {"A": r(s["L"], s["M"], s["K"]), "B": r(s["L"], s["K"], s["N"])}
    elif program == "dual_gemm":
        t = {"A": r(s["M"], s["K"]), "B1": r(s["K"], s["N"]), "B2": r(s["K"], s["N"])}
    elif program == "gemm_bt":
        t = {"A": r(s["M"], s["K"]), "B": r(s["N"], s["K"])}  # B stored N x K (nn.Linear's weight)
    else:
        t = {"A": r(s["M"], s["K"]), "B": r(s["K"], s["N"])}
    return t, PROGRAMS[program].ref(t)


def peers_for(torch, program: str, t: dict, outs: dict, triton_peers: dict, kern) -> dict:
    """name -> zero-argument callable writing ``outs`` (first = the baseline)."""
    p: dict = {}
    if program == "batched_gemm":
        p["torch.bmm"] = lambda: torch.bmm(t["A"], t["B"], out=outs["torch.bmm"]["C"])
    elif program == "dual_gemm":
        tmp1, tmp2 = (
            torch.empty_like(outs["2xcuBLAS+add"]["D"]),
            torch.empty_like(outs["2xcuBLAS+add"]["D"]),
        )

        def composed():
            torch.matmul(t["A"], t["B1"], out=tmp1)
            torch.matmul(t["A"], t["B2"], out=tmp2)
            torch.add(tmp1, tmp2, out=outs["2xcuBLAS+add"]["D"])

        p["2xcuBLAS+add"] = composed
        if "dual_gemm" in triton_peers:
            p["Triton"] = lambda o=outs["Triton"]: triton_peers["dual_gemm"](
                t["A"], t["B1"], t["B2"], o["D"]
            )
    elif program == "gemm_reduction":

        def composed():
            o = outs["cuBLAS+sum"]
            torch.matmul(t["A"], t["B"], out=o["C"])
            torch.sum(t["A"], dim=1, dtype=torch.float32, out=o["y"])

        p["cuBLAS+sum"] = composed
        if "gemm_reduction" in triton_peers:
            p["Triton"] = lambda o=outs["Triton"]: triton_peers["gemm_reduction"](
                t["A"], t["B"], o["C"], o["y"]
            )
    elif program == "gemm_bt":
        p["cuBLAS"] = lambda: torch.matmul(t["A"], t["B"].T, out=outs["cuBLAS"]["C"])
    else:
        p["cuBLAS"] = lambda: torch.matmul(t["A"], t["B"], out=outs["cuBLAS"]["C"])
    if kern is not None:  # (each peer writes its own outputs: lambdas bind them as defaults)
        o = outs["cypressc"]
        p["cypressc"] = kern.bind(*[o[q.name] if q.writes else t[q.name] for q in kern.info.params])
    return p


def out_tensors(torch, program: str, s: dict, dt, names) -> dict:
    def one():
        if program == "batched_gemm":
            return {"C": torch.empty(s["L"], s["M"], s["N"], dtype=dt, device="cuda")}
        if program == "dual_gemm":
            return {"D": torch.empty(s["M"], s["N"], dtype=dt, device="cuda")}
        o = {"C": torch.empty(s["M"], s["N"], dtype=dt, device="cuda")}
        if program == "gemm_reduction":
            o["y"] = torch.empty(s["M"], dtype=torch.float32, device="cuda")
        return o

    return {n: one() for n in names}


def bench_one(torch, program: str, s: dict, dtype: str, kern, triton_peers: dict, args) -> dict:
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    t, ref = inputs(torch, program, s, dt)
    names = {
        "batched_gemm": ["torch.bmm"],
        "dual_gemm": ["2xcuBLAS+add", "Triton"],
        "gemm_reduction": ["cuBLAS+sum", "Triton"],
        "gemm": ["cuBLAS"],
        "gemm_bt": ["cuBLAS"],
    }[program] + ["cypressc"]
    outs = out_tensors(torch, program, s, dt, names)
    for o in outs.values():
        for x in o.values():
            x.fill_(float("nan"))  # an unwritten element shows up as NaN in the check
    fns = peers_for(torch, program, t, outs, triton_peers, kern)
    res: dict = {"sizes": s, "dtype": dtype, "peers": {}}
    live = {}
    for name, fn in fns.items():
        try:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            rel = max(
                float((outs[name][k].float() - ref[k]).norm() / ref[k].norm().clamp_min(1e-30))
                for k in ref
            )
            res["peers"][name] = {"rel": rel}
            live[name] = fn
        except Exception as e:
            res["peers"][name] = {"error": f"{type(e).__name__}: {e}"[:500]}
            print(f"  {name}: FAILED: {res['peers'][name]['error']}", flush=True)
    samples = interleaved(torch, live, args.rounds, args.reps)
    f = flops(program, s)
    for n in live:
        ms = statistics.median(samples[n])
        res["peers"][n].update(ms=ms, tflops=f / ms / 1e9)
    base = res["peers"].get(names[0], {}).get("ms")
    for r in res["peers"].values():
        if base and "ms" in r:
            r["ratio"] = base / r["ms"]
    if "Triton" in live and hasattr(triton_peers.get(program), "best"):
        res["triton_config"] = triton_peers[program].best()
    res["names"] = names
    return res


TOL = {"f16": 1e-3, "bf16": 5e-3}
"""Flag a peer whose relative error exceeds this: f16 results of these kernels sit at
2e-4 and bf16 at 2e-3 (one rounding of the output), so a miscompiled tile shows."""


def bad(r: dict, dtype: str) -> bool:
    return "error" in r or r["rel"] != r["rel"] or r["rel"] > TOL[dtype]


def cell(r: dict | None, baseline: bool, dtype: str) -> str:
    if not r:
        return "-"
    if "error" in r:
        return "FAIL"
    s = f"{r['tflops']:.1f}" + (
        "" if baseline or r.get("ratio") is None else f" ({r['ratio']:.3f})"
    )
    if bad(r, dtype):
        s += f" rel={r['rel']:.1e}!"
    return s


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--programs", default="batched_gemm,dual_gemm,gemm_reduction,gemm")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument(
        "--gemm-dtypes",
        default="bf16",
        help="dtypes for the plain gemm rows (bench/gemm.py has f16)",
    )
    ap.add_argument("--mapping", default="h100")
    ap.add_argument("--build-root", default=str(ROOT / "build" / "gpu_check"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-triton", action="store_true")
    args = ap.parse_args()

    import torch

    from cypressc import runtime

    if not torch.cuda.is_available():
        print("bench/variants.py needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.cuda.get_device_name()
    print(f"[env] {dev} | torch {torch.__version__}", flush=True)
    triton_peers = {}
    if not args.no_triton:
        try:
            triton_peers = make_triton_peers()
        except Exception as e:
            print(f"[env] Triton unavailable: {type(e).__name__}: {e}", flush=True)
    results, errors = [], {}
    t0 = time.time()
    for program in [p for p in args.programs.split(",") if p]:
        dtypes = args.gemm_dtypes if program == "gemm" else args.dtypes
        for dtype in [d for d in dtypes.split(",") if d]:
            label = f"{program}-{args.mapping}" + ("" if dtype == "f16" else f"-{dtype}")
            kern = None
            try:
                d = Path(args.build_root) / label
                if not (d / f"lib{program}.so").exists():
                    d = build_mapping(args.mapping, Path(args.build_root), program, dtype)
                    make(d)
                kern = runtime.load(d)
            except Exception as e:
                errors[label] = f"{type(e).__name__}: {e}"[-1500:]
                print(f"[peer] {label}: FAILED: {errors[label]}", flush=True)
            for s in SHAPES[program]:
                t1 = time.time()
                try:
                    r = bench_one(torch, program, s, dtype, kern, triton_peers, args)
                except Exception as e:
                    r = {
                        "sizes": s,
                        "dtype": dtype,
                        "peers": {},
                        "error": f"{type(e).__name__}: {e}"[:500],
                    }
                r["program"] = program
                results.append(r)
                torch.cuda.empty_cache()
                line = " | ".join(f"{n} {cell(p, False, dtype)}" for n, p in r["peers"].items())
                print(
                    f"[{program} {dtype} {'x'.join(map(str, s.values()))}] {line or r.get('error')} "
                    f"({time.time() - t1:.0f}s) {r.get('triton_config', '')}",
                    flush=True,
                )
                if OUT:
                    Path(OUT).mkdir(parents=True, exist_ok=True)
                    (Path(OUT) / "bench_variants.json").write_text(
                        json.dumps({"device": dev, "errors": errors, "results": results}, indent=1)
                    )
    print(
        f"\n## GEMM variants, TFLOP/s (ratio to the first column); {dev}, median of "
        f"{args.rounds}x{args.reps} calls, {time.time() - t0:.0f}s"
    )
    for program in dict.fromkeys(r["program"] for r in results):
        rows = [r for r in results if r["program"] == program]
        names = next((r["names"] for r in rows if "names" in r), [])
        print(f"\n### {program}\n| dtype | sizes | " + " | ".join(names) + " |")
        print("|---|---|" + "---:|" * len(names))
        for r in rows:
            print(
                f"| {r['dtype']} | {'x'.join(map(str, r['sizes'].values()))} | "
                + " | ".join(
                    cell(r["peers"].get(n), i == 0, r["dtype"]) for i, n in enumerate(names)
                )
                + " |"
            )
    for n, e in errors.items():
        print(f"\n{n}: not measured: {e.splitlines()[0][:300]}")
    ok = not errors and all(
        "error" not in r and not any(bad(p, r["dtype"]) for p in r["peers"].values())
        for r in results
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
