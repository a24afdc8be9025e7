#!/usr/bin/env python3
"""GEMM speed: cypressc kernels vs cuBLAS (torch.matmul) vs an autotuned Triton matmul.

    PYTHONUNBUFFERED=1 python3 bench/gemm.py [--mapping h100,other] [--build DIR ...] [--proto]
        [--shapes 4096,8192x8192x1024,...] [--rounds 5] [--reps 10] [--no-triton]

fp16 inputs, f32 accumulation, fp16 output; C = A @ B with A: M x K and B: K x N row-major.
Shapes (default): M = N = K = n for n in 2048, 4096, 8192, 16384, and M = N = 8192 with
K in 1024, 4096, 16384.

Peers, all in one process on the same random data (torch.randn, fresh per shape):
cuBLAS (``torch.matmul(A, B, out=C)``), Triton (the kernel below: one program per C tile,
grouped tile order, K-loop of tl.dot, autotuned per shape over five Hopper-sized configs;
needs M and N multiples of 256), and each cypressc kernel: ``--mapping`` names are built with
``cypressc build programs/gemm.cyp -m mappings/gemm/<m>.yaml`` into build/bench/gemm-<m>
(then ``make``), ``--build DIR`` takes an already-built directory, ``--proto`` adds
bench/proto's hand-written GEMM in the same layout.  Every peer's output is compared with
cuBLAS's (rel = ||C - C_cublas|| / ||C_cublas||, flagged above 1e-2).

Timing: per shape, a warm-up of every peer (Triton autotunes here), then ``--rounds``
rounds; in each round each peer in turn runs ``--reps`` calls, each between its own pair of
CUDA events, queued behind a short GPU sleep so host launch overhead never leaves the GPU
idle inside a measured interval (``torch.cuda._sleep``).  Reported: the median per-call time
over all rounds, TFLOP/s = 2*M*N*K / time, and the ratio to cuBLAS (> 1 is faster).
Inputs are not rotated: at n = 2048 they fit in L2 for every peer alike.
Partial results print as each shape finishes; a markdown table is printed last and the
numbers go to $OUT/bench_gemm.json when OUT is set.
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

OUT = os.environ.get("OUT")
DEFAULT_SHAPES = "2048,4096,8192,16384,8192x8192x1024,8192x8192x4096,8192x8192x16384"


def parse_shapes(s: str) -> list[tuple[int, int, int]]:
    out = []
    for tok in s.split(","):
        tok = tok.strip()
        if not tok:
            continue
        parts = [int(x) for x in tok.lower().split("x")]
        if len(parts) == 1:
            parts *= 3
        if len(parts) != 3:
            raise SystemExit(f"bad shape {tok!r}: n or MxNxK")
        out.append(tuple(parts))
    return out


# --------------------------------------------------------------------------------------------
# Triton: a plain (non-persistent) tiled matmul with grouped tile order, autotuned per shape
# --------------------------------------------------------------------------------------------


def make_triton_matmul(configs=None):
    import torch
    import triton
    import triton.language as tl

    configs = configs or [
        triton.Config({"BM": 128, "BN": 256, "BK": 64, "GROUP": 8}, num_stages=3, num_warps=8),
        triton.Config({"BM": 256, "BN": 128, "BK": 64, "GROUP": 8}, num_stages=3, num_warps=8),
        triton.Config({"BM": 128, "BN": 256, "BK": 64, "GROUP": 8}, num_stages=4, num_warps=8),
        triton.Config({"BM": 128, "BN": 128, "BK": 64, "GROUP": 8}, num_stages=4, num_warps=4),
        triton.Config({"BM": 128, "BN": 128, "BK": 128, "GROUP": 8}, num_stages=3, num_warps=8),
    ]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def _mm(
        a,
        b,
        c,
        M,
        N,
        K,
        sam,
        sak,
        sbk,
        sbn,
        scm,
        scn,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
        GROUP: tl.constexpr,
    ):
        # C tile (tm, tn).  Programs walk GROUP tile-rows at a time, so the programs that run
        # together share rows of A and columns of B in L2.  M and N are multiples of every BM
        # and BN (matmul() checks), so only K needs a mask.
        pid = tl.program_id(0)
        tiles_m, tiles_n = M // BM, N // BN
        per_group = GROUP * tiles_n
        m0 = (pid // per_group) * GROUP
        rows = tl.minimum(tiles_m - m0, GROUP)
        tm = m0 + (pid % per_group) % rows
        tn = (pid % per_group) // rows
        rm = tl.multiple_of(tm * BM, BM) + tl.arange(0, BM)
        rn = tl.multiple_of(tn * BN, BN) + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        pa = a + rm[:, None] * sam + rk[None, :] * sak
        pb = b + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            left = K - k * BK
            x = tl.load(pa, mask=rk[None, :] < left, other=0.0)
            y = tl.load(pb, mask=rk[:, None] < left, other=0.0)
            acc = tl.dot(x, y, acc)
            pa += BK * sak
            pb += BK * sbk
        tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty))

    def matmul(A, B, C):
        M, K = A.shape
        _, N = B.shape
        if M % 256 or N % 256:
            raise ValueError(f"the Triton peer needs M and N multiples of 256, got {M}x{N}")
        grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)
        _mm[grid](
            A,
            B,
            C,
            M,
            N,
            K,
            A.stride(0),
            A.stride(1),
            B.stride(0),
            B.stride(1),
            C.stride(0),
            C.stride(1),
        )
        return C

    def best(M, N, K):
        """The config autotuning chose for this shape (the last one run, else the cache)."""
        cfg = None
        for k, v in getattr(_mm, "cache", {}).items():
            if tuple(k[:3]) == (M, N, K):
                cfg = v
        cfg = cfg or getattr(_mm, "best_config", None)
        if cfg is None:
            return ""
        kw = cfg.kwargs
        return f"{kw['BM']}x{kw['BN']}x{kw['BK']} s{cfg.num_stages} w{cfg.num_warps}"

    matmul.best = best
    _ = torch
    return matmul


# --------------------------------------------------------------------------------------------
# cypressc peers
# --------------------------------------------------------------------------------------------


def build_mapping(mapping: str, outroot: Path, program: str = "gemm", dtype: str = "f16") -> Path:
    """``cypressc build programs/<program>.cyp -m <mapping> --dtype T=<dtype>`` into
    ``outroot/<program>-<mapping>[-<dtype>]`` (the names bench/gpu_check.py uses)."""
    import subprocess

    from gpu_check import child_env, resolve_mapping

    mp = resolve_mapping(program, mapping)
    if mp is None:
        raise RuntimeError(
            f"no mapping {mapping!r} (tried it as a path and mappings/{program}/{mapping}.yaml)"
        )
    out = outroot / (f"{program}-{Path(mapping).stem}" + ("" if dtype == "f16" else f"-{dtype}"))
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "cypressc.cli",
            "build",
            str(ROOT / "programs" / f"{program}.cyp"),
            "-m",
            str(mp),
            "--dtype",
            f"T={dtype}",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )
    if p.returncode:
        raise RuntimeError(
            f"cypressc build -m {mp} failed (rc={p.returncode}):\n{(p.stdout + p.stderr)[-2000:]}"
        )
    return out


def make(outdir: Path) -> None:
    from gpu_check import make_target

    js = sorted(outdir.glob("*.json"))
    if not js:
        raise RuntimeError(f"{outdir} holds no <name>.json (not a cypressc build directory)")
    rc, log, _ = make_target(outdir, js[0].stem, f"lib{js[0].stem}.so")
    if rc:
        raise RuntimeError(f"building lib{js[0].stem}.so in {outdir} failed:\n{log[-3000:]}")


def load_peers(args) -> tuple[dict, dict]:
    """{label: kernel} for the cypressc kernels, and {label: error} for those that failed."""
    from cypressc import runtime

    peers, errors = {}, {}
    dirs: list[tuple[str, callable]] = []
    outroot = Path(args.out)
    from gpu_check import expand_mappings

    for m in expand_mappings("gemm", args.mapping):
        dirs.append((f"gemm-{Path(m).stem}", lambda m=m: build_mapping(m, outroot)))
    for d in args.build:
        dirs.append((Path(d).resolve().name, lambda d=d: Path(d).resolve()))
    if args.proto:

        def proto():
            from gpu_check import build_proto

            build_proto(outroot / "proto-f16", "f16")
            return outroot / "proto-f16"

        dirs.append(("proto-f16", proto))
    for label, get in dirs:
        t0 = time.time()
        try:
            d = get()
            make(d)
            k = runtime.load(d)
            bad = [p.name for p in k.info.params if p.dtype != "f16"]
            if [p.name for p in k.info.params] != ["C", "A", "B"] or bad:
                raise RuntimeError(f"not an f16 GEMM with params (C, A, B): {k!r}")
            peers[label] = k
            print(f"[peer] {label}: {d} ({time.time() - t0:.0f}s)", flush=True)
        except Exception as e:
            errors[label] = f"{type(e).__name__}: {e}"
            print(f"[peer] {label}: FAILED: {errors[label][-1500:]}", flush=True)
    return peers, errors


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


from cypressc.tuner.timing import interleaved  # noqa: E402 - the timing method cypressc tune uses too


def bench_shape(torch, M, N, K, peers: dict, args) -> dict:
    A = torch.randn(M, K, dtype=torch.float16, device="cuda")
    B = torch.randn(K, N, dtype=torch.float16, device="cuda")
    outs = {name: torch.empty(M, N, dtype=torch.float16, device="cuda") for name in peers}
    res = {"M": M, "N": N, "K": K, "peers": {}}
    live = {}
    for name, p in peers.items():  # warm-up (and autotune), then the check
        C = outs[name]
        try:
            if name == "cuBLAS":
                fn = lambda C=C: torch.matmul(A, B, out=C)  # noqa: E731
            elif name == "Triton":
                fn = lambda C=C, p=p: p(A, B, C)  # noqa: E731
            else:
                fn = p.bind(C, A, B)  # checked once; no per-call checks
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            live[name] = fn
        except Exception as e:
            res["peers"][name] = {"error": f"{type(e).__name__}: {e}"[:500]}
            print(f"  {name}: FAILED in warm-up: {res['peers'][name]['error']}", flush=True)
    ref = outs["cuBLAS"].float() if "cuBLAS" in live else None
    rel = {}
    for name in live:
        if ref is not None:
            rel[name] = float((outs[name].float() - ref).norm() / ref.norm().clamp_min(1e-30))
    del ref
    samples = interleaved(torch, live, args.rounds, args.reps)  # drift hits every peer alike
    flops = 2.0 * M * N * K
    for name in live:
        ms = statistics.median(samples[name])
        res["peers"][name] = {
            "ms": ms,
            "tflops": flops / ms / 1e9,
            "rel_vs_cublas": rel.get(name),
            "min_ms": min(samples[name]),
            "max_ms": max(samples[name]),
            "n": len(samples[name]),
        }
    base = res["peers"].get("cuBLAS", {}).get("ms")
    for name, r in res["peers"].items():
        if base and "ms" in r:
            r["ratio"] = base / r["ms"]
    if "Triton" in live and hasattr(peers["Triton"], "best"):
        res["triton_config"] = peers["Triton"].best(M, N, K)
    return res  # A, B, outs freed with this frame


def fmt_peer(r: dict | None, with_ratio: bool = True) -> str:
    if not r:
        return "-"
    if "error" in r:
        return "FAIL"
    s = f"{r['tflops']:.1f}"
    if with_ratio and r.get("ratio") is not None:
        s += f" ({r['ratio']:.3f})"
    if r.get("rel_vs_cublas") is not None and r["rel_vs_cublas"] > 1e-2:
        s += f" rel={r['rel_vs_cublas']:.1e}!"
    return s


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--mapping",
        default="h100",
        help="comma-separated mappings of programs/gemm.cyp to build: names, .yaml paths or 'all' ('' none)",
    )
    ap.add_argument(
        "--build",
        action="append",
        default=[],
        metavar="DIR",
        help="an already-built gemm dir; repeatable",
    )
    ap.add_argument("--proto", action="store_true", help="add bench/proto's hand-written GEMM")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="n or MxNxK, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-triton", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "build" / "bench"))
    args = ap.parse_args()
    shapes = parse_shapes(args.shapes)

    import torch

    if not torch.cuda.is_available():
        print(
            "bench/gemm.py needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr
        )
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    print(
        f"[env] {torch.cuda.get_device_name()} | torch {torch.__version__} (CUDA {torch.version.cuda})",
        flush=True,
    )

    peers: dict = {"cuBLAS": None}
    errors: dict = {}
    if not args.no_triton:
        try:
            import triton

            peers["Triton"] = make_triton_matmul()
            print(f"[env] triton {triton.__version__}", flush=True)
        except Exception as e:
            errors["Triton"] = f"{type(e).__name__}: {e}"
            print(f"[peer] Triton: unavailable: {errors['Triton']}", flush=True)
    cyp, cyp_err = load_peers(args)
    peers.update(cyp)
    errors.update(cyp_err)
    names = list(peers) + [n for n in errors if n not in peers]

    results = []
    t0 = time.time()
    for M, N, K in shapes:
        t1 = time.time()
        try:
            r = bench_shape(torch, M, N, K, peers, args)
            torch.cuda.empty_cache()
        except Exception as e:
            r = {"M": M, "N": N, "K": K, "peers": {}, "error": f"{type(e).__name__}: {e}"[:500]}
            torch.cuda.empty_cache()
        results.append(r)
        line = " | ".join(f"{n} {fmt_peer(r['peers'].get(n))}" for n in names if n in r["peers"])
        print(
            f"[{M}x{N}x{K}] {line or r.get('error')}  ({time.time() - t1:.0f}s)"
            + (f"  triton: {r['triton_config']}" if r.get("triton_config") else ""),
            flush=True,
        )
        if OUT:
            Path(OUT).mkdir(parents=True, exist_ok=True)
            (Path(OUT) / "bench_gemm.json").write_text(
                json.dumps(
                    {"device": torch.cuda.get_device_name(), "errors": errors, "results": results},
                    indent=1,
                )
            )

    print(
        f"\n## GEMM fp16 (f32 accumulate), TFLOP/s (ratio to cuBLAS); {torch.cuda.get_device_name()}, "
        f"median of {args.rounds}x{args.reps} calls, {time.time() - t0:.0f}s"
    )
    print("| M | N | K | " + " | ".join(names) + " |")
    print("|---:|---:|---:|" + "---:|" * len(names))
    for r in results:
        print(
            f"| {r['M']} | {r['N']} | {r['K']} | "
            + " | ".join(fmt_peer(r["peers"].get(n), n != "cuBLAS") for n in names)
            + " |"
        )
    for n, e in errors.items():
        print(f"\n{n}: not measured: {e.splitlines()[0][:300]}")
    return (
        0
        if not errors
        and all(
            "error" not in r and all("error" not in p for p in r["peers"].values()) for r in results
        )
        else 1
    )


if __name__ == "__main__":
    sys.exit(main())
