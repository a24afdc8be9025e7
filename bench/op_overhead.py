#!/usr/bin/env python3
"""Host time of one cypressc kernel call (issue #38): ``Kernel.__call__`` (every argument
check each call) against a ``Kernel.launcher`` run (checked once per signature), on the op's
forward kernel at a tiny size, where the launch is all host work.  Median of 200 calls each
(``time.perf_counter`` around the Python call, the stream not synchronized).  Needs a GPU."""

from __future__ import annotations

import statistics
import time

import torch

from cypressc.torch.attention import _kernel


def main() -> None:
    kern = _kernel("forward", 64, torch.bfloat16)
    q, k, v = (torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = torch.empty_like(q), q.new_empty((1, 1, 128), dtype=torch.float32)
    run = kern.launcher(o, lse, q, k, v, scale=0.125, causal=0)
    ways = {
        "Kernel.__call__": lambda: kern(o, lse, q, k, v, scale=0.125, causal=0),
        "Kernel.launcher run": lambda: run(o, lse, q, k, v),
    }
    for name, fn in ways.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        us = []
        for _ in range(200):
            t = time.perf_counter()
            fn()
            us.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
        print(f"| {name} | {statistics.median(us):.1f} us |")


if __name__ == "__main__":
    main()
