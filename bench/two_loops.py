"""Time tests/programs/gemm_two_loops.cyp (C = A @ B + D @ E, two main loops per block into one
accumulator) against two PyTorch peers in one process on the same random data (interleaved
rounds of CUDA-event-timed calls, median, as cypressc tune times): the composition
``A @ B + D @ E`` (two cuBLAS GEMMs and an add, the intermediate in global memory) and one
cuBLAS GEMM over the concatenated K (``[A | D] @ [B ; E]``, the concatenation made once,
outside the timing: the roofline of a fused kernel).

    python bench/two_loops.py --build build/resident/gemm_two_loops [--sizes 4096x4096x4096x4096 ...]

Sizes are MxNxKxJ.  Each build is checked against the float32 reference first (outputs poisoned
with NaN); a wrong build is reported and not timed.  Prints one line per (build, size):
milliseconds, TFLOP/s (2·M·N·(K + J)) and the peers' time / cypressc time.
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
        "--sizes",
        nargs="*",
        default=["4096x4096x4096x4096", "8192x8192x4096x4096", "8192x8192x8192x1024"],
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()

    import torch

    from cypressc.runtime import load

    rc = 0
    for d in args.build:
        kern = load(d)
        dt = {"f16": torch.float16, "bf16": torch.bfloat16}[kern.info.param("A").dtype]
        for s in args.sizes:
            M, N, K, J = (int(x) for x in s.split("x"))
            g = torch.Generator(device="cuda").manual_seed(0)
            A, B = (
                torch.randn(*sh, device="cuda", dtype=dt, generator=g) for sh in ((M, K), (K, N))
            )
            D, E = (
                torch.randn(*sh, device="cuda", dtype=dt, generator=g) for sh in ((M, J), (J, N))
            )
            C = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
            kern(C, A, B, D, E)
            torch.cuda.synchronize()
            ref = A.float() @ B.float() + D.float() @ E.float()
            rel = ((C.float() - ref).norm() / ref.norm()).item()
            if not rel < 1e-2 or torch.isnan(C).any():
                print(f"{Path(d).name} {s}: WRONG (rel {rel:.2e}), not timed")
                rc = 1
                continue
            AD, BE = torch.cat([A, D], 1), torch.cat([B, E], 0)
            out1, out2, tmp = torch.empty_like(C), torch.empty_like(C), torch.empty_like(C)

            def composed():
                torch.matmul(A, B, out=tmp)
                torch.matmul(D, E, out=out1)
                torch.add(tmp, out1, out=out1)

            fns = {
                "cypressc": kern.bind(C, A, B, D, E),
                "2xcuBLAS+add": composed,
                "cuBLAS[K+J]": lambda: torch.matmul(AD, BE, out=out2),
            }
            t = interleaved(torch, fns, args.rounds, args.reps)
            ms = {k: statistics.median(v) for k, v in t.items()}
            flop = 2.0 * M * N * (K + J)
            line = ", ".join(
                f"{k} {v:.3f} ms ({flop / v / 1e9:.0f} TFLOP/s)" for k, v in ms.items()
            )
            print(
                f"{Path(d).name} {s}: {line}; cypressc / cuBLAS[K+J] {ms['cuBLAS[K+J]'] / ms['cypressc']:.3f}, "
                f"/ composed {ms['2xcuBLAS+add'] / ms['cypressc']:.3f} (rel err {rel:.1e})"
            )
    return rc


if __name__ == "__main__":
    sys.exit(main())
