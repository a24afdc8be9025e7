#!/usr/bin/env python3
"""FP8 GEMM speed (issue #39): cypressc's programs/gemm_fp8.cyp (per-tensor scales),
gemm_fp8_rowwise.cyp (a scale per row of A and per column of C) and gemm_fp8_blockwise.cyp (1 x
128 scales of A, 128 x 128 of B, two-level accumulation) vs cuBLASLt through ``torch._scaled_mm`` (per-tensor and
row-wise), in one process on the same inputs.

    PYTHONUNBUFFERED=1 python3 bench/fp8.py --build DIR [--build DIR ...]
        [--shapes 4096,8192,4096x7168x16384,16384,8192x8192x1024] [--rounds 5] [--reps 10]

C = scale_a * scale_b * (A @ Bᵀ): A M x K and B N x K e4m3 (row-major, K contiguous: the
layout FP8 wgmma and ``_scaled_mm(A, B.t())`` both want), per-tensor f32 scales, C bf16.
Peers: ``_scaled_mm`` per-tensor and row-wise (scale_a M x 1, scale_b 1 x N, in [0.5, 1.5)),
each with ``use_fast_accum=True`` (the whole K in the Tensor Core's FP8 accumulator, as the
cypressc kernels do) and ``False`` (cuBLASLt's default, which promotes partial sums to f32),
and cuBLAS f16 (``torch.matmul`` on the same values in f16) for scale.
Each output is checked against a float32 reference from the same FP8 values
(rel = ||C - ref|| / ||ref||, flagged above 1e-2).  Timing: ``cypressc.tuner.timing.interleaved``
(each peer in turn, CUDA events, behind a GPU sleep), median per call, TFLOP/s = 2MNK / time,
ratio to ``_scaled_mm`` fast-accum of the same scaling mode (> 1 is faster).  A markdown table is printed last; the
numbers go to $OUT/bench_fp8.json when OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_SHAPES = "4096,8192,4096x7168x16384,16384,8192x8192x1024"
BASE = "scaled_mm fast"


def parse_shapes(s: str) -> list[tuple[int, int, int]]:
    """``4096`` (M = N = K) or ``MxNxK``, comma-separated."""
    out = []
    for x in s.split(","):
        d = [int(v) for v in x.split("x")]
        out.append((d[0], d[0], d[0]) if len(d) == 1 else tuple(d))
    return out


def bench_shape(torch, M: int, N: int, K: int, kernels: dict, args) -> dict:
    """Times every peer on one shape; returns {peer: {ms, tflops, rel, ratio}}: a per-tensor
    kernel's ratio is to ``scaled_mm fast``, a row-wise one's (params C, A, B, scale_a,
    scale_b) to ``rowwise fast``."""
    from cypressc.abi.dtypes import DTYPES
    from cypressc.tuner.timing import interleaved

    f8 = torch.float8_e4m3fn
    A = torch.randn(M, K, device="cuda").to(f8)
    B = torch.randn(N, K, device="cuda").to(f8)
    sa, sb = 0.5, 0.25
    ta = torch.tensor(sa, device="cuda")
    tb = torch.tensor(sb, device="cuda")
    ra = torch.rand(M, 1, device="cuda") + 0.5  # row-wise scales: scale_a M x 1, scale_b 1 x N
    rb = torch.rand(1, N, device="cuda") + 0.5
    prod = A.float() @ B.float().T
    refs = {"tensor": prod * (sa * sb), "row": prod * ra * rb}
    del prod
    kb = -(-K // 128)
    if any(len(k.info.params) == 5 and k.info.params[3].name == "SA" for k in kernels.values()):
        SA = torch.rand(kb, M, device="cuda") + 0.5  # 1 x 128 scales of A, KB x M
        SB = torch.rand(-(-N // 128), kb, device="cuda") + 0.5  # 128 x 128 of B, NB x KB
        sbk = SB.repeat_interleave(128, dim=0)[:N]  # each column's scale per K block: N x KB
        ref = torch.zeros(M, N, device="cuda")
        for k in range(kb):
            blk = slice(128 * k, 128 * k + 128)
            ref += (A[:, blk].float() @ B[:, blk].float().T) * SA[k][:, None] * sbk[:, k][None, :]
        refs["block"] = ref
    A16, B16 = A.half(), B.half()
    outs, fns, mode = {}, {}, {}
    for fast in (True, False):
        tag = " fast" if fast else ""
        fns["scaled_mm" + tag] = lambda fast=fast: torch._scaled_mm(
            A, B.t(), scale_a=ta, scale_b=tb, out_dtype=torch.bfloat16, use_fast_accum=fast
        )
        fns["rowwise" + tag] = lambda fast=fast: torch._scaled_mm(
            A, B.t(), scale_a=ra, scale_b=rb, out_dtype=torch.bfloat16, use_fast_accum=fast
        )
        mode["scaled_mm" + tag], mode["rowwise" + tag] = "tensor", "row"
    C16 = torch.empty(M, N, dtype=torch.float16, device="cuda")
    fns["cuBLAS f16"] = lambda: torch.matmul(A16, B16.t(), out=C16)
    mode["cuBLAS f16"] = "tensor"
    for label, k in kernels.items():
        ct = getattr(torch, DTYPES[k.info.params[0].dtype].torch)
        C = torch.full((M, N), float("nan"), dtype=ct, device="cuda")
        outs[label] = C
        if len(k.info.params) == 5 and k.info.params[3].name == "SA":  # 1 x 128 block scales
            mode[label] = "block"
            # SB: NB x KB (a 128 x 128 block's scale); a build before it took KB x N (a scale per
            # column per K block): the same values repeated over each block's columns
            old = tuple(k.info.params[4].dims) == ("KB", "N")
            fns[label] = k.bind(C, A, B, SA, sbk.T.contiguous() if old else SB)
        elif len(k.info.params) == 5:  # row-wise: the scale vectors are tensors
            mode[label] = "row"
            fns[label] = k.bind(C, A, B, ra.view(M), rb.view(N))
        else:
            mode[label] = "tensor"
            fns[label] = k.bind(C, A, B, scale_a=sa, scale_b=sb)
    res: dict = {"M": M, "N": N, "K": K, "peers": {}}
    live = {}
    for name, fn in fns.items():
        try:
            got = fn()
            torch.cuda.synchronize()
            out = outs.get(name, got)
            if name == "cuBLAS f16":
                out = C16.float() * (sa * sb)
            ref = refs[mode[name]]
            rel = float((out.float() - ref).norm() / ref.norm().clamp_min(1e-30))
            live[name] = fn
            res["peers"][name] = {"rel": rel}
        except Exception as e:  # a peer that fails is reported, the others still run
            res["peers"][name] = {"error": f"{type(e).__name__}: {e}"[:300]}
    del refs
    samples = interleaved(torch, live, args.rounds, args.reps)
    for name in live:
        ms = statistics.median(samples[name])
        res["peers"][name].update(ms=ms, tflops=2.0 * M * N * K / ms / 1e9)
    for name, r in res["peers"].items():
        base = res["peers"].get(BASE if mode[name] == "tensor" else "rowwise fast", {}).get("ms")
        # a block-scaled kernel's ratio is to the row-wise fast peer too (no block-scaled
        # cuBLASLt on Hopper through torch): its extra work is the per-block promotion
        if base and "ms" in r:
            r["ratio"] = base / r["ms"]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", action="append", default=[], help="a built gemm_fp8 directory")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    import torch

    from cypressc import runtime

    kernels = {}
    for d in args.build:
        k = runtime.load(Path(d))
        if [p.name for p in k.info.params] not in (
            ["C", "A", "B"],
            ["C", "A", "B", "scale_a", "scale_b"],
            ["C", "A", "B", "SA", "SB"],
        ):
            raise SystemExit(f"{d}: not a gemm_fp8[_rowwise|_blockwise] build: {k!r}")
        if k.info.params[1].dtype != "f8e4m3":  # cuBLASLt has no e5m2 x e5m2: not comparable
            print(f"[skip] {d}: A and B are {k.info.params[1].dtype}; the peers take e4m3")
            continue
        kernels[Path(d).name] = k
    rows = []
    for M, N, K in parse_shapes(args.shapes):
        r = bench_shape(torch, M, N, K, kernels, args)
        rows.append(r)
        print(json.dumps(r), flush=True)
    names = list(rows[0]["peers"]) if rows else []
    print(f"\n| M x N x K | {' | '.join(names)} |")
    print("|---" * (len(names) + 1) + "|")
    for r in rows:
        cells = []
        for n in names:
            p = r["peers"].get(n, {})
            if "ms" not in p:
                cells.append("FAIL")
                continue
            c = f"{p['tflops']:.0f}" + (
                f" ({p['ratio']:.3f})" if n not in (BASE, "rowwise fast") else ""
            )
            cells.append(c + (f" rel={p['rel']:.1e}!" if p["rel"] > 1e-2 else ""))
        print(f"| {r['M']}x{r['N']}x{r['K']} | {' | '.join(cells)} |")
    print(
        "rel (vs float32 of the FP8 values):",
        {n: f"{rows[-1]['peers'][n].get('rel', 0):.1e}" for n in names} if rows else {},
    )
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "bench_fp8.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
