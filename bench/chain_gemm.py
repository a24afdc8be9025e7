"""Time tests/programs/chain_gemm.cyp (O = T(Q[:, :64] @ K[:, :64]ᵀ) @ V, the first product kept in
registers as the second's A operand) against its PyTorch peer, two cuBLAS matmuls with S in
global memory, in one process on the same random data (the method of cypressc tune:
interleaved rounds of CUDA-event-timed calls, median).

    python bench/chain_gemm.py --build build/resident/chain_gemm [--sizes 8192x128x8192 ...]

Sizes are MxExN (D = 64).  Each build is checked against the float32 reference first; a build
that is wrong is reported and not timed.  Prints one line per (build, size): milliseconds,
TFLOP/s (2·M·N·64 + 2·M·N·E flops) and torch time / cypressc time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cypressc.tuner.timing import interleaved  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="append", required=True, metavar="DIR")
    ap.add_argument(
        "--sizes", nargs="*", default=["8192x128x8192", "16384x64x4096", "4096x256x16384"]
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()

    import torch

    from cypressc.runtime import load

    rc = 0
    for d in args.build:
        kern = load(d)
        dt = {"f16": torch.float16, "bf16": torch.bfloat16}[kern.info.param("Q").dtype]
        for s in args.sizes:
            M, E, N = (int(x) for x in s.split("x"))
            g = torch.Generator(device="cuda").manual_seed(0)
            Q = torch.randn(M, 64, device="cuda", dtype=dt, generator=g)
            K = torch.randn(N, 64, device="cuda", dtype=dt, generator=g)
            V = torch.randn(N, E, device="cuda", dtype=dt, generator=g)
            O = torch.full((M, E), float("nan"), device="cuda", dtype=dt)
            kern(O, Q, K, V)
            torch.cuda.synchronize()
            ref = (Q.float() @ K.float().T).to(dt).float() @ V.float()
            rel = ((O.float() - ref).norm() / ref.norm()).item()
            if not rel < 1e-2 or torch.isnan(O).any():
                print(f"{Path(d).name} {s}: WRONG (rel {rel:.2e}), not timed")
                rc = 1
                continue
            cyp = kern.bind(O, Q, K, V)
            peer = lambda: torch.matmul(torch.matmul(Q, K.T), V)  # noqa: E731
            t = interleaved(torch, {"cypressc": cyp, "torch": peer}, args.rounds, args.reps)
            ms = {k: statistics.median(v) for k, v in t.items()}
            flop = 2.0 * M * N * 64 + 2.0 * M * N * E
            print(
                f"{Path(d).name} {s}: cypressc {ms['cypressc']:.3f} ms ({flop / ms['cypressc'] / 1e9:.0f} TFLOP/s), "
                f"torch {ms['torch']:.3f} ms ({flop / ms['torch'] / 1e9:.0f} TFLOP/s), "
                f"ratio {ms['torch'] / ms['cypressc']:.3f} (rel err {rel:.1e})"
            )
    return rc


if __name__ == "__main__":
    sys.exit(main())
