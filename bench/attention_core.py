"""Time tests/programs/attention.cyp (one head, O = softmax(Q Kᵀ · 0.125) V, the FlashAttention-2
loop) against torch's scaled_dot_product_attention with the Flash and cuDNN backends, in one
process on the same random data (interleaved rounds of CUDA-event-timed calls, median).

    python bench/attention_core.py --build build/resident/attention [--sizes 16384x8192 ...]

Sizes are MxN (queries x keys, D = 64, one head: the peers get [1, 1, M, 64] tensors).  Each
build is checked against the float32 reference first; a wrong build is reported, not timed.
Prints one line per (build, size): milliseconds, TFLOP/s (4·M·N·D flops, FlashAttention's count)
and each peer's time / cypressc's time.
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
    ap.add_argument("--sizes", nargs="*", default=["16384x4096", "32768x8192", "16384x16384"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from cypressc.runtime import load

    rc = 0
    for d in args.build:
        kern = load(d)
        dt = {"f16": torch.float16, "bf16": torch.bfloat16}[kern.info.param("Q").dtype]
        for s in args.sizes:
            M, N = (int(x) for x in s.split("x"))
            g = torch.Generator(device="cuda").manual_seed(0)
            Q = torch.randn(M, 64, device="cuda", dtype=dt, generator=g)
            K = torch.randn(N, 64, device="cuda", dtype=dt, generator=g)
            V = torch.randn(N, 64, device="cuda", dtype=dt, generator=g)
            O = torch.full((M, 64), float("nan"), device="cuda", dtype=dt)
            kern(O, Q, K, V)
            torch.cuda.synchronize()
            ref = F.scaled_dot_product_attention(Q.float()[None], K.float()[None], V.float()[None], scale=0.125)[0]
            rel = ((O.float() - ref).norm() / ref.norm()).item()
            if not rel < 1e-2 or torch.isnan(O).any():
                print(f"{Path(d).name} {s}: WRONG (rel {rel:.2e}), not timed")
                rc = 1
                continue
            q4, k4, v4 = Q[None, None], K[None, None], V[None, None]

            def peer(backend):
                def f():
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q4, k4, v4, scale=0.125)
                return f

            fns = {"cypressc": kern.bind(O, Q, K, V), "flash": peer(SDPBackend.FLASH_ATTENTION),
                   "cudnn": peer(SDPBackend.CUDNN_ATTENTION)}
            t = interleaved(torch, fns, args.rounds, args.reps)
            ms = {k: statistics.median(v) for k, v in t.items()}
            flop = 4.0 * M * N * 64
            print(f"{Path(d).name} {s}: rel {rel:.1e}  " + "  ".join(
                f"{k} {v:.3f} ms {flop / v / 1e9:.0f} TFLOP/s" for k, v in ms.items())
                + f"  flash/cypressc {ms['flash'] / ms['cypressc']:.2f}  cudnn/cypressc {ms['cudnn'] / ms['cypressc']:.2f}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
