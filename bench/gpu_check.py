#!/usr/bin/env python3
"""Correctness of cypressc-built kernels on a GPU: build, make, check, sanitize (one call).

    PYTHONUNBUFFERED=1 python3 bench/gpu_check.py [--programs gemm,dual_gemm] [--mappings h100,...]
        [--dtypes f16,bf16] [--proto f16,bf16] [--build DIR ...] [--no-sanitizer] [--timeout S] [--jobs N]

Targets: every (program, mapping) pair, built with ``cypressc build programs/P.cyp -m
mappings/P/M.yaml -o build/gpu_check/P-M`` (a mapping may also be a path to a .yaml; the
programs of ``SOURCES`` live elsewhere: ``tutorial_gemm`` and ``tutorial_attention`` are
docs/tutorial.md's, mapping ``h100`` meaning the tutorial's own .yaml, ``gemm_at`` and
``chain_stage``, ``reduce_rows``, ``reduce_steps`` are tests/programs/P.cyp under
tests/mappings/P.yaml); with
``--proto``, bench/proto's hand-written GEMM wrapped in the same layout (<name>.cu launcher
with the cypressc ABI + the generated harness), as a reference point and to test this
script before the emitter exists; with ``--build DIR``, an already-built directory.

For each target: ``make`` (ptxas -v: registers, spills; SASS counts); then, in a child
process with a timeout (a hang or a broken context costs one target, not the run), through
``cypressc.runtime`` on fresh ``torch.randn`` data in the program's dtype: several sizes
(tile multiples, ragged edges, tiny, K = 0), outputs poisoned with NaN first, compared with
a float32 PyTorch reference (TF32 off; ``||out - ref|| / ||ref|| < 1e-2``, no NaN, a second
launch bitwise equal, or within rounding for a program that adds with atomics); a tensor
the kernel reads and writes (a ``reduces=`` target) starts from random values, restored
before each launch; shapes the kernel's ``requires`` refuse must raise ``KernelError`` in
Python and make the launcher return cudaErrorInvalidValue with the outputs untouched; the
loader's argument checks on real CUDA tensors; for ``gemm`` targets also the kernel as a PyTorch op
under ``torch.compile(fullgraph=True)`` and in a replayed CUDA graph (bench/op_checks.py; two rows
of the ``api`` column; for the bf16 targets of the tutorial programs, docs/tutorial.md's
PyTorch snippet itself, one more row).  Then the harness binary ``./<name>`` (its
JSON line, a refused shape, ``--dump`` checked against the reference) and compute-sanitizer
memcheck / racecheck / synccheck on it at small sizes.  A summary table is printed last and
everything is written to ``$OUT/gpu_check.json`` (and ``$OUT/gpu_check.log``) when OUT is set.
Exit status 0 only if every target passes.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from cypressc.runtime import DTYPES, KernelInfo  # noqa: E402 - after the sys.path line above

OUT = os.environ.get("OUT")
TOL = 1e-2
DEVICE = "cuda"  # tests run the checking logic on "cpu" with a fake kernel
_LOG: list[str] = []


def say(*parts: Any) -> None:
    line = " ".join(str(p) for p in parts)
    _LOG.append(line)
    print(line, flush=True)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


# --------------------------------------------------------------------------------------------
# The program table: reference (float32, from the inputs by parameter name) and sizes by
# size name.  Shapes that a kernel's `requires` refuse are expected to be refused; the rest
# must compute the reference.
# --------------------------------------------------------------------------------------------


def _mm(a, b):
    return a.float() @ b.float()


def binding(info: KernelInfo | None, name: str, default: str) -> str:
    """The build's binding of parameter ``name`` (``info.bindings``, e.g. ``{"ACT": "bias_gelu"}``),
    or ``default`` for an info without bindings (older builds, or no info at all)."""
    return (getattr(info, "bindings", None) or {}).get(name, default)


def epilogue_act(x, act: str):
    """``act`` of gemm_epilogue (its ACT binding) applied to the float32 tensor ``x``:
    ``bias_gelu`` = GELU, tanh approximation; ``bias_silu`` = x * sigmoid(x).  Raises
    ``ValueError`` for another name."""
    import torch.nn.functional as F

    if act == "bias_gelu":
        return F.gelu(x, approximate="tanh")
    if act == "bias_silu":
        return F.silu(x)
    raise ValueError(f"gemm_epilogue: unknown ACT binding {act!r} (bias_gelu or bias_silu)")


def _epilogue_ref(t: dict, info: KernelInfo | None = None) -> dict:
    # the epilogue in float32 on the float32 product, as the program computes it
    return {
        "C": epilogue_act(
            _mm(t["A"], t["B"]) + t["bias"].float(), binding(info, "ACT", "bias_gelu")
        )
    }


@dataclass
class Program:
    ref: Callable[..., dict]  # {param: tensor} [, KernelInfo] -> {written param: float32 reference}
    check: list[dict]  # sizes checked through cypressc.runtime
    small: list[dict]  # sizes for compute-sanitizer and the --dump check
    run: dict  # one larger size for the harness binary
    note: str = ""
    ref_takes_info: bool = (
        False  # ref(tensors, info): the reference depends on the build's bindings
    )
    # prepare(tensors, scalars): inputs made consistent in place after torch.randn (the
    # attention backward's LSE and Dsum from Q, K, V, dO), before the kernel and the reference
    prepare: Callable[[dict, dict], None] | None = None
    # outputs reduced with f32 atomics (red.global.add): blocks add in any order, so a second
    # launch agrees within rounding (relative 1e-5), not bitwise
    atomic: bool = False

    def reference(self, tensors: dict, info: KernelInfo | None = None) -> dict:
        """{written param: float32 reference} from the inputs by name; ``info`` (the build's
        KernelInfo) reaches ``ref`` only when ``ref_takes_info`` (its bindings may change it)."""
        return self.ref(tensors, info) if self.ref_takes_info else self.ref(tensors)


def _sdpa(q, k, v, scale: float):
    """softmax(q kᵀ · scale) v in float32 (torch's scaled_dot_product_attention) for [S, D] tensors."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(
        q.float()[None], k.float()[None], v.float()[None], scale=scale
    )[0]


def _attention_ref(t: dict) -> dict:
    """programs/flash_attention2.cyp in float32: O by torch SDPA (grouped-query heads repeated,
    ``is_causal`` top-left aligned), LSE = logsumexp of the scaled, masked scores, one head at a
    time (a [M, N] float32 matrix at most)."""
    import torch
    import torch.nn.functional as F

    q, k, v = t["Q"].float(), t["K"].float(), t["V"].float()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scale, causal = float(t["scale"]), bool(t["causal"])
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    M, N = q.shape[2], k.shape[2]
    above = torch.ones(M, N, dtype=torch.bool, device=q.device).triu(1) if causal else None
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = (q[b, h] @ k[b, h].T) * scale
            if above is not None:
                s.masked_fill_(above, float("-inf"))
            lse[b, h] = torch.logsumexp(s, dim=-1)
            del s
    return {"O": o, "LSE": lse}


def scalar_args(info: KernelInfo, sizes: dict) -> dict:
    """The keyword arguments a call needs beyond its tensors: the kernel's ``float``
    parameters and the sizes no tensor's shape determines (an ``int`` flag like ``causal``)."""
    dims = {d for p in info.params for d in p.dims}
    return {
        k: v
        for k, v in sizes.items()
        if k in getattr(info, "floats", ()) or (k in info.sizes and k not in dims)
    }


def _bindings(spec: str) -> list[str]:
    """``--dtype`` values of one --dtypes entry: ``bf16`` binds T, ``T=bf16+F8=f8e5m2`` both."""
    return [b if "=" in b else f"T={b}" for b in spec.split("+")]


def _scaled_mm(t: dict) -> dict:
    """programs/gemm_fp8.cyp in float32: scale_a * scale_b * (A @ Bᵀ) of the FP8 inputs as they
    are (their exact values, upcast), so only the kernel's accumulation and C's rounding differ."""
    return {"C": _mm(t["A"], t["B"].T) * (float(t["scale_a"]) * float(t["scale_b"]))}


def _rowwise(t: dict) -> dict:
    """programs/gemm_fp8_rowwise.cyp in float32: (A @ Bᵀ) * scale_a[r] * scale_b[c]."""
    return {
        "C": _mm(t["A"], t["B"].T) * t["scale_a"].float()[:, None] * t["scale_b"].float()[None, :]
    }


def _blockwise(t: dict) -> dict:
    """programs/gemm_fp8_blockwise.cyp in float32: Σ_k (A_k @ B_kᵀ) * SA[k][r] * SB[c // 128][k]
    over the 128-wide K blocks (the last one partial)."""
    a, b, sa, sb = t["A"].float(), t["B"].float(), t["SA"].float(), t["SB"].float()
    sb = sb.repeat_interleave(128, dim=0)[: b.shape[0]]  # column c's scale per K block
    c = a.new_zeros(a.shape[0], b.shape[0])
    for k in range(0, a.shape[1], 128):
        c += (
            (a[:, k : k + 128] @ b[:, k : k + 128].T)
            * sa[k // 128][:, None]
            * sb[:, k // 128][None, :]
        )
    return {"C": c}


# FP8 rows are K bytes: TMA's 16-byte row strides need K % 16 == 0 (K = 0: A and B empty)
FP8_CHECK = [
    dict(M=4096, N=4096, K=4096, scale_a=0.5, scale_b=0.25),
    dict(M=8192, N=8192, K=8192, scale_a=0.01, scale_b=0.02),
    dict(M=1000, N=1000, K=1008, scale_a=1.0, scale_b=1.0),
    dict(M=129, N=264, K=80, scale_a=2.0, scale_b=0.5),
    dict(M=300, N=520, K=1008, scale_a=0.125, scale_b=3.0),
    dict(M=1, N=8, K=16, scale_a=1.0, scale_b=1.0),
    dict(M=2056, N=8, K=4112, scale_a=1.0, scale_b=0.0625),
    dict(M=777, N=1304, K=64, scale_a=0.3, scale_b=0.7),
    dict(M=3000, N=4104, K=4048, scale_a=0.05, scale_b=0.05),
    dict(M=64, N=64, K=0, scale_a=1.0, scale_b=1.0),
    dict(M=129, N=257, K=80, scale_a=1.5, scale_b=1.0),
    dict(M=128, N=256, K=48, scale_a=1.0, scale_b=2.0),
]


GEMM_CHECK = [
    dict(M=4096, N=4096, K=4096),
    dict(M=8192, N=8192, K=8192),
    dict(M=1000, N=1000, K=1000),
    dict(M=129, N=264, K=72),
    dict(M=300, N=520, K=1000),
    dict(M=1, N=8, K=8),
    dict(M=2056, N=8, K=4104),
    dict(M=777, N=1304, K=64),
    dict(M=3000, N=4104, K=4040),
    dict(M=64, N=64, K=0),
    dict(M=129, N=257, K=72),
    dict(M=128, N=256, K=60),
]
GEMM_SMALL = [dict(M=256, N=256, K=256), dict(M=129, N=264, K=72)]

PROGRAMS: dict[str, Program] = {
    "gemm": Program(
        ref=lambda t: {"C": _mm(t["A"], t["B"])},
        check=GEMM_CHECK,
        small=GEMM_SMALL,
        run=dict(M=4096, N=4096, K=4096),
    ),
    # C = A @ Bᵀ with B stored N x K (a K-major wgmma B operand)
    "gemm_bt": Program(
        ref=lambda t: {"C": _mm(t["A"], t["B"].T)},
        check=GEMM_CHECK,
        small=GEMM_SMALL,
        run=dict(M=4096, N=4096, K=4096),
    ),
    # C = scale_a * scale_b * (A @ Bᵀ), A and B FP8 (K-major), C bf16/f16
    "gemm_fp8": Program(
        ref=_scaled_mm,
        check=FP8_CHECK,
        small=[
            dict(M=256, N=256, K=256, scale_a=0.5, scale_b=2.0),
            dict(M=129, N=264, K=80, scale_a=1.0, scale_b=1.0),
        ],
        run=dict(M=4096, N=4096, K=4096, scale_a=1.0, scale_b=1.0),
        note="FP8 inputs randn rounded to the format; the reference upcasts them exactly",
    ),
    # C = (A @ Bᵀ) * scale_a[r] * scale_b[c]: FP8 with a scale per row of A and per column of C
    "gemm_fp8_rowwise": Program(
        ref=_rowwise,
        check=[{k: v for k, v in c.items() if k in "MNK"} for c in FP8_CHECK],
        small=[dict(M=256, N=256, K=256), dict(M=129, N=264, K=80)],
        run=dict(M=4096, N=4096, K=4096),
        note="FP8 inputs randn rounded to the format, f32 scale vectors randn",
    ),
    # C = Σ_k (A_k @ B_kᵀ) * SA[k][r] * SB[c // 128][k]: FP8 with 1 x 128 scales of A and
    # 128 x 128 of B, two-level accumulation (KB = cdiv(K, 128), NB = cdiv(N, 128))
    "gemm_fp8_blockwise": Program(
        ref=_blockwise,
        check=[
            {
                **{k: v for k, v in c.items() if k in "MNK"},
                "KB": -(-c["K"] // 128),
                "NB": -(-c["N"] // 128),
            }
            for c in FP8_CHECK
        ],
        small=[dict(M=256, N=256, K=256, KB=2, NB=2), dict(M=129, N=264, K=80, KB=1, NB=3)],
        run=dict(M=4096, N=4096, K=4096, KB=32, NB=32),
        note="FP8 inputs randn rounded to the format, f32 scales randn",
    ),
    # tests/programs/gemm_at.cyp: C = Aᵀ @ B with A stored K x M (an MN-major wgmma A operand);
    # A's rows are M long, so M must be a multiple of 8 (TMA's 16-byte strides): M = 129 is
    # refused, and K = 0 (A and B empty)
    "gemm_at": Program(
        ref=lambda t: {"C": _mm(t["A"].T, t["B"])},
        check=[
            dict(M=4096, N=4096, K=4096),
            dict(M=1000, N=1000, K=1000),
            dict(M=136, N=264, K=72),
            dict(M=304, N=520, K=1000),
            dict(M=8, N=8, K=8),
            dict(M=2056, N=8, K=4104),
            dict(M=776, N=1304, K=64),
            dict(M=3000, N=4104, K=4040),
            dict(M=129, N=264, K=72),
            dict(M=64, N=64, K=0),
        ],
        small=[dict(M=256, N=256, K=256), dict(M=136, N=264, K=72)],
        run=dict(M=4096, N=4096, K=4096),
    ),
    "batched_gemm": Program(
        ref=lambda t: {"C": _mm(t["A"], t["B"])},  # matmul broadcasts over the batch
        check=[
            dict(L=4, M=1024, N=1024, K=1024),
            dict(L=3, M=129, N=264, K=72),
            dict(L=16, M=256, N=512, K=128),
            dict(L=1, M=1000, N=1000, K=1000),
            dict(L=2, M=1, N=8, K=8),
            dict(L=5, M=777, N=1304, K=64),
            dict(L=2, M=129, N=257, K=72),
            dict(L=2, M=128, N=256, K=60),
        ],
        small=[dict(L=2, M=256, N=256, K=256), dict(L=3, M=129, N=264, K=72)],
        run=dict(L=8, M=2048, N=2048, K=2048),
    ),
    "dual_gemm": Program(
        ref=lambda t: {"D": _mm(t["A"], t["B1"]) + _mm(t["A"], t["B2"])},
        check=[
            dict(M=4096, N=4096, K=4096),
            dict(M=1000, N=1000, K=1000),
            dict(M=129, N=264, K=72),
            dict(M=300, N=520, K=1000),
            dict(M=1, N=8, K=8),
            dict(M=777, N=1304, K=64),
            dict(M=129, N=257, K=72),
            dict(M=128, N=256, K=60),
        ],
        small=GEMM_SMALL,
        run=dict(M=4096, N=4096, K=4096),
    ),
    "gemm_reduction": Program(
        ref=lambda t: {"C": _mm(t["A"], t["B"]), "y": t["A"].float().sum(dim=1)},
        check=[
            dict(M=4096, N=4096, K=4096),
            dict(M=1000, N=1000, K=1000),
            dict(M=129, N=264, K=72),
            dict(M=300, N=520, K=1000),
            dict(M=1, N=8, K=8),
            dict(M=777, N=1304, K=64),
            dict(M=3000, N=4104, K=4040),
            dict(M=129, N=257, K=72),
            dict(M=128, N=256, K=60),
        ],
        small=GEMM_SMALL,
        run=dict(M=4096, N=4096, K=4096),
    ),
    # tests/programs/gemm_resident_a.cyp: the A panel (first 128 columns) loaded once per block,
    # before the main loop; build it with --build (not under programs/)
    "gemm_resident_a": Program(
        ref=lambda t: {"C": _mm(t["A"][:, :128], t["B"][:128])},
        check=[
            dict(M=4096, N=4096, K=128),
            dict(M=129, N=264, K=72),
            dict(M=1000, N=1000, K=128),
            dict(M=300, N=520, K=200),
            dict(M=1, N=8, K=8),
        ],
        small=[dict(M=256, N=256, K=128), dict(M=129, N=264, K=72)],
        run=dict(M=4096, N=4096, K=128),
    ),
    # tests/programs/gemm_two_loops.cyp: C = A @ B + D @ E, one main loop per product (build it with --build)
    "gemm_two_loops": Program(
        ref=lambda t: {"C": _mm(t["A"], t["B"]) + _mm(t["D"], t["E"])},
        check=[
            dict(M=4096, N=4096, K=4096, J=2048),
            dict(M=129, N=264, K=72, J=200),
            dict(M=1000, N=1000, K=1000, J=64),
            dict(M=300, N=520, K=8, J=1000),
            dict(M=1, N=8, K=8, J=8),
            dict(M=777, N=1304, K=64, J=0),
            dict(M=256, N=256, K=0, J=136),
        ],
        small=[dict(M=256, N=256, K=256, J=128), dict(M=129, N=264, K=72, J=200)],
        run=dict(M=4096, N=4096, K=4096, J=4096),
    ),
    # tests/programs/chain_gemm.cyp: O = T(Q[:, :64] @ K[:, :64]ᵀ) @ V (K read as a K-major B), the first product rounded to T
    # in registers (the program's own conversion) and fed to the second as its A operand
    "chain_gemm": Program(
        ref=lambda t: {"O": _mm(_mm(t["Q"][:, :64], t["K"][:, :64].T).to(t["Q"].dtype), t["V"])},
        check=[
            dict(M=4096, E=128, D=64, N=4096),
            dict(M=129, E=72, D=64, N=200),
            dict(M=1000, E=64, D=64, N=1000),
            dict(M=300, E=520, D=48, N=8),
            dict(M=1, E=8, D=8, N=8),
            dict(M=4096, E=256, D=64, N=16384),
        ],
        small=[dict(M=256, E=64, D=64, N=256), dict(M=129, E=72, D=64, N=200)],
        run=dict(M=8192, E=128, D=64, N=8192),
    ),
    # tests/programs/chain_stage.cyp: O = T(Q[:, :64] @ K[:, :64]ᵀ)ᵀ @ V, the first product rounded to T
    # into a shared tile inside the loop, read back MN-major as the second's A operand (issue #38 S5)
    "chain_stage": Program(
        ref=lambda t: {"O": _mm(_mm(t["Q"][:, :64], t["K"][:, :64].T).to(t["Q"].dtype).T, t["V"])},
        check=[
            dict(N=4096, E=128, M=4096, D=64),
            dict(N=200, E=136, M=129, D=64),
            dict(N=1000, E=64, M=1000, D=64),
            dict(N=8, E=520, M=300, D=48),
            dict(N=8, E=8, M=1, D=8),
            dict(N=4096, E=256, M=16384, D=64),
            dict(N=64, E=63, M=64, D=64),
        ],
        small=[dict(N=256, E=128, M=256, D=64), dict(N=200, E=136, M=129, D=64)],
        run=dict(N=8192, E=128, M=8192, D=64),
    ),
    # tests/programs/chain_gemm_softcap.cyp: chain_gemm with the user's C++ softcap (s = 30 tanh(s / 30),
    # programs/ops/scores.cuh) on S inside the main loop, before the rounding to T (build it with --build)
    "chain_gemm_softcap": Program(
        ref=lambda t: {
            "O": _mm(
                (30.0 * (_mm(t["Q"][:, :64], t["K"][:, :64].T) / 30.0).tanh()).to(t["Q"].dtype),
                t["V"],
            )
        },
        check=[
            dict(M=4096, E=128, D=64, N=4096),
            dict(M=129, E=72, D=64, N=200),
            dict(M=1000, E=64, D=64, N=1000),
            dict(M=300, E=520, D=48, N=8),
            dict(M=1, E=8, D=8, N=8),
        ],
        small=[dict(M=256, E=64, D=64, N=256), dict(M=129, E=72, D=64, N=200)],
        run=dict(M=8192, E=128, D=64, N=8192),
    ),
    # tests/programs/attention.cyp: O = softmax(Q Kᵀ · 0.125) V for one head (the FlashAttention-2 loop);
    # N a multiple of 64 and D <= 64 (the program neither masks keys nor loops over D; build it with --build)
    "attention": Program(
        ref=lambda t: {"O": _sdpa(t["Q"], t["K"], t["V"], 0.125)},
        check=[
            dict(M=4096, D=64, N=4096),
            dict(M=1000, D=64, N=1024),
            dict(M=1, D=64, N=64),
            dict(M=333, D=32, N=192),
            dict(M=4096, D=64, N=16384),
        ],
        small=[dict(M=256, D=64, N=256), dict(M=129, D=64, N=128)],
        run=dict(M=8192, D=64, N=8192),
    ),
    # programs/flash_attention2.cyp: O = softmax(Q Kᵀ · scale) V and LSE per (batch, head), GQA
    # (H / HK query heads per key/value head), causal or not, any lengths; D above the mapping's E
    # is refused (a D = 128 row on a d = 64 build is a refusal check), as is H not a multiple of HK
    "flash_attention2": Program(
        ref=_attention_ref,
        check=[
            dict(B=1, H=1, M=4096, D=64, HK=1, N=4096, causal=0, scale=0.125),
            dict(B=2, H=8, M=1000, D=64, HK=2, N=1000, causal=1, scale=0.125),
            dict(B=1, H=4, M=63, D=128, HK=1, N=63, causal=0, scale=0.08838834764831845),
            dict(B=1, H=1, M=1, D=64, HK=1, N=1, causal=1, scale=0.125),
            dict(B=1, H=1, M=1, D=128, HK=1, N=1000, causal=0, scale=0.3),
            dict(B=1, H=2, M=16384, D=128, HK=2, N=16384, causal=1, scale=0.08838834764831845),
            dict(B=2, H=4, M=4096, D=128, HK=1, N=4096, causal=0, scale=0.08838834764831845),
            dict(B=1, H=2, M=1000, D=64, HK=2, N=333, causal=0, scale=0.125),
            dict(B=1, H=4, M=200, D=64, HK=1, N=1000, causal=1, scale=0.125),
            dict(B=1, H=1, M=16384, D=64, HK=1, N=16384, causal=0, scale=0.125),
            dict(B=1, H=2, M=333, D=32, HK=1, N=200, causal=1, scale=0.17677669529663687),
            dict(B=1, H=3, M=64, D=64, HK=2, N=64, causal=0, scale=0.125),
        ],
        small=[
            dict(B=1, H=2, M=200, D=64, HK=1, N=130, causal=1, scale=0.125),
            dict(B=1, H=1, M=64, D=64, HK=1, N=64, causal=0, scale=0.125),
        ],
        run=dict(B=1, H=16, M=4096, D=64, HK=16, N=4096, causal=0, scale=0.125),
    ),
    # programs/gemm_epilogue.cyp: C = act(A @ B + bias[None, :]) in f32, rounded to T; bias [N] of
    # dtype BIAS; act per the build's ACT binding (K = 0: C = act(bias))
    "gemm_epilogue": Program(
        ref=_epilogue_ref,
        ref_takes_info=True,
        check=[
            dict(M=4096, N=4096, K=4096),
            dict(M=1000, N=1000, K=1000),
            dict(M=129, N=264, K=72),
            dict(M=300, N=520, K=1000),
            dict(M=1, N=8, K=8),
            dict(M=2056, N=8, K=4104),
            dict(M=777, N=1304, K=64),
            dict(M=64, N=64, K=0),
            dict(M=129, N=257, K=72),
            dict(M=128, N=256, K=60),
        ],
        small=GEMM_SMALL,
        run=dict(M=4096, N=4096, K=4096),
    ),
}
# programs/flash_attention3.cyp: the same interface and result as flash_attention2 (its loop software-pipelined)
PROGRAMS["flash_attention3"] = PROGRAMS["flash_attention2"]


def _tutorial_gemm_ref(t: dict) -> dict:
    """docs/tutorial/fused_gemm.cyp in float32: C = GELU_tanh(alpha * A @ B + bias[None, :])."""
    import torch.nn.functional as F

    x = float(t["alpha"]) * _mm(t["A"], t["B"]) + t["bias"].float()
    return {"C": F.gelu(x, approximate="tanh")}


def _tutorial_attention_ref(t: dict) -> dict:
    """docs/tutorial/attention.cyp in float32: O = softmax(cap * tanh(Q Kᵀ * scale / cap)) V."""
    import torch

    s = _mm(t["Q"], t["K"].T) * float(t["scale"])
    s = float(t["cap"]) * torch.tanh(s / float(t["cap"]))
    return {"O": torch.softmax(s, dim=-1) @ t["V"].float()}


# docs/tutorial.md's programs (the newcomer test of issue #37): C = act(alpha A @ B + bias) with
# alpha varied (K = 0, N or K not a multiple of 8 are refused), and soft-capped attention for
# one head (N a multiple of 64 — the program masks no keys —, D <= 64; D = 128 and D = 36 are
# refused), with caps that bite (cap 2 or 5 on scaled scores of deviation about 1) and that do not
PROGRAMS["tutorial_gemm"] = Program(
    ref=_tutorial_gemm_ref,
    check=[{**s, "alpha": a} for s, a in zip(GEMM_CHECK, [0.125, 0.0625, 1.0, -0.5] * 3)],
    small=[{**s, "alpha": 0.25} for s in GEMM_SMALL],
    run=dict(M=4096, N=4096, K=4096, alpha=0.125),
)
PROGRAMS["tutorial_attention"] = Program(
    ref=_tutorial_attention_ref,
    check=[
        dict(M=4096, D=64, N=4096, scale=0.125, cap=30.0),
        dict(M=1000, D=64, N=1024, scale=0.5, cap=5.0),
        dict(M=1, D=64, N=64, scale=0.125, cap=30.0),
        dict(M=333, D=32, N=192, scale=0.17677669529663687, cap=2.0),
        dict(M=4096, D=64, N=16384, scale=0.125, cap=50.0),
        dict(M=256, D=128, N=256, scale=0.125, cap=30.0),
        dict(M=256, D=36, N=256, scale=0.125, cap=30.0),
    ],
    small=[
        dict(M=256, D=64, N=256, scale=0.125, cap=30.0),
        dict(M=129, D=64, N=128, scale=0.5, cap=5.0),
    ],
    run=dict(M=8192, D=64, N=8192, scale=0.125, cap=30.0),
)


def _two_kernels_ref(t: dict) -> dict:
    """tests/programs/two_kernels.cyp in float32: C = A @ B, then D = C @ E with C rounded to T
    as the first kernel stores it."""
    c = _mm(t["A"], t["B"])
    return {"C": c, "D": _mm(c.to(t["A"].dtype), t["E"])}


# two GEMM kernels in one program (issue #38): the second reads what the first wrote; sizes
# with N, K, P multiples of 8 (TMA strides), ragged against the 128 x 256 tiles, K = 0 (C = 0)
# a GEMM whose block tile is split among its two warpgroups by columns (issue #38)
PROGRAMS["gemm_cols"] = Program(
    ref=lambda t: {"C": _mm(t["A"], t["B"])},
    check=GEMM_CHECK,
    small=GEMM_SMALL,
    run=dict(M=4096, N=4096, K=4096),
)
PROGRAMS["two_kernels"] = Program(
    ref=_two_kernels_ref,
    check=[
        dict(M=4096, N=4096, K=4096, P=4096),
        dict(M=1000, N=520, K=264, P=136),
        dict(M=129, N=264, K=72, P=1304),
        dict(M=1, N=8, K=8, P=8),
        dict(M=300, N=256, K=0, P=64),
    ],
    small=[dict(M=256, N=256, K=128, P=256), dict(M=129, N=264, K=72, P=72)],
    run=dict(M=4096, N=4096, K=4096, P=4096),
)


def _attn_heads(t: dict):
    """(b, h, key/value head of h, True above the causal diagonal or None) for every query head
    of the attention backward's [B, H, M, D] Q and [B, HK, N, D] K (top-left aligned: query q
    sees keys k <= q)."""
    import torch

    q, k = t["Q"], t["K"]
    g = q.shape[1] // k.shape[1]
    M, N = q.shape[2], k.shape[2]
    above = None
    if bool(t["causal"]):
        above = torch.ones(M, N, dtype=torch.bool, device=q.device).triu(1)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            yield b, h, h // g, above


def _forward_heads(t: dict, kw: dict):
    """(b, h, LSE, O) of every query head on its key/value head: the forward in float32 from
    the random Q, K, V (scores causal-masked when ``causal``)."""
    import torch

    for b, h, hk, above in _attn_heads({**t, **kw}):
        s = _mm(t["Q"][b, h], t["K"][b, hk].T) * float(kw["scale"])
        if above is not None:
            s.masked_fill_(above, float("-inf"))
        yield b, h, torch.logsumexp(s, dim=-1), torch.softmax(s, dim=-1) @ t["V"][b, hk].float()


def _attn_bwd_stats(t: dict, kw: dict) -> None:
    """LSE = logsumexp(Q Kᵀ · scale) and Dsum = rowsum(dO ∘ O) with O = softmax(Q Kᵀ · scale) V,
    per query head on its key/value head, the scores causal-masked when ``causal``, in float32
    from the random Q, K, V, dO: what the forward and the preprocess give the backward."""
    for b, h, lse, o in _forward_heads(t, kw):
        t["LSE"][b, h].copy_(lse)
        t["Dsum"][b, h].copy_((t["dO"][b, h].float() * o).sum(-1))


def _backward_ref(t: dict, dsum) -> dict:
    """The backward's formula in float32 from the given LSE and ``dsum`` (B x H x M), per query
    head h on key/value head hk: P = exp(Q Kᵀ · scale − LSE) (0 above the diagonal when
    causal), dS = P ∘ (dO Vᵀ − Dsum); dV[hk] += Pᵀ dO, dK[hk] += scale · dSᵀ Q, dQacc[h] = dS K."""
    import torch

    sc = float(t["scale"])
    dk = torch.zeros(t["K"].shape, dtype=torch.float32, device=t["K"].device)
    dv = torch.zeros_like(dk)
    dqacc = torch.zeros(t["Q"].shape, dtype=torch.float32, device=t["Q"].device)
    for b, h, hk, above in _attn_heads(t):
        q, do = t["Q"][b, h].float(), t["dO"][b, h].float()
        p = (_mm(q, t["K"][b, hk].T) * sc - t["LSE"][b, h].float()[:, None]).exp()
        if above is not None:
            p.masked_fill_(above, 0.0)
        ds = p * (_mm(do, t["V"][b, hk].T) - dsum[b, h].float()[:, None])
        dv[b, hk] += p.T @ do
        dk[b, hk] += sc * (ds.T @ q)
        dqacc[b, h] = ds @ t["K"][b, hk].float()
    return {"dV": dv, "dK": dk, "dQacc": dqacc}


def _attn_bwd_dkdv_ref(t: dict) -> dict:
    """tests/programs/attn_bwd_dkdv.cyp in float32: :func:`_backward_ref`'s dK and dV (the
    formula, for whatever LSE and Dsum)."""
    r = _backward_ref(t, t["Dsum"])
    return {"dV": r["dV"], "dK": r["dK"]}


def _one_head(t: dict) -> dict:
    """The one-head tensors of tests/programs/attn_bwd_main.cyp as a batch of one head (views:
    writes go to the originals), not causal."""
    import torch

    return {
        **{k: v[None, None] if isinstance(v, torch.Tensor) else v for k, v in t.items()},
        "causal": 0,
    }


# the attention backward's dK, dV kernel (issue #38): batch, grouped-query heads (dK, dV of a
# key/value head summed over its H / HK query heads), causal or not (top-left), ragged M and N,
# N > M causal (key blocks no query reaches: dK = dV = 0), M > N; D up to the mapping's E (64 or
# 128: D = 128 rows are refusals on a d64 build, D = 256 on both), H not a multiple of HK
# refused; LSE and Dsum consistent with the inputs (prepare)
_S128 = 0.08838834764831845
_BWD = [
    dict(B=1, H=2, HK=1, M=4096, N=4096, D=128, causal=0, scale=_S128),
    dict(B=2, H=8, HK=2, M=1000, N=777, D=128, causal=1, scale=_S128),
    dict(B=1, H=4, HK=4, M=64, N=300, D=128, causal=1, scale=0.5),
    # one query: causal it sees key 0 only and dS = 0 (dK has no scale to compare), so not causal
    dict(B=1, H=1, HK=1, M=1, N=3, D=128, causal=0, scale=_S128),
    dict(B=1, H=2, HK=1, M=333, N=4100, D=128, causal=1, scale=0.125),
    dict(B=1, H=4, HK=1, M=4100, N=333, D=128, causal=1, scale=_S128),
    dict(B=1, H=4, HK=2, M=8192, N=8192, D=128, causal=1, scale=_S128),
    dict(B=1, H=3, HK=2, M=128, N=128, D=128, causal=0, scale=_S128),
    dict(B=1, H=2, HK=1, M=128, N=128, D=256, causal=0, scale=0.0625),
]
PROGRAMS["attn_bwd_dkdv"] = Program(
    ref=_attn_bwd_dkdv_ref,
    check=_BWD + [{**s, "D": 64, "scale": 0.125} for s in _BWD[:3] + _BWD[5:6]],
    small=[
        dict(B=1, H=2, HK=1, M=256, N=256, D=128, causal=1, scale=_S128),
        dict(B=1, H=2, HK=1, M=129, N=130, D=64, causal=0, scale=0.125),
    ],
    run=dict(B=1, H=16, HK=4, M=8192, N=8192, D=128, causal=0, scale=_S128),
    prepare=_attn_bwd_stats,
)


def _attn_bwd_prep_ref(t: dict) -> dict:
    """tests/programs/attn_bwd_prep.cyp in float32: Dsum = rowsum(dO ∘ O), dQacc = 0."""
    import torch

    o = t["O"].float()
    return {"Dsum": (o * t["dO"].float()).sum(-1), "dQacc": torch.zeros_like(o)}


def _attn_bwd_post_ref(t: dict) -> dict:
    """tests/programs/attn_bwd_post.cyp in float32: dQ = scale · dQacc."""
    return {"dQ": float(t["scale"]) * t["dQacc"].float()}


# FlashAttention backward's preprocess and postprocess (issue #38): SIMT kernels (no main loop),
# memory-bound; ragged M (not a multiple of the 128-row block), D below the build's E (36, 64 on
# a d128 build), D above it and an odd D (refused), tiny and long sequences
ATTN_BWD_CHECK = [
    dict(B=2, H=8, M=1000, D=128),
    dict(B=1, H=4, M=63, D=64),
    dict(B=1, H=1, M=1, D=128),
    dict(B=1, H=3, M=333, D=36),
    dict(B=1, H=2, M=16384, D=128),
    dict(B=4, H=16, M=4096, D=64),
    dict(B=1, H=1, M=200, D=63),
]
ATTN_BWD_SMALL = [dict(B=1, H=2, M=200, D=64), dict(B=1, H=1, M=64, D=64)]
PROGRAMS["attn_bwd_prep"] = Program(
    ref=_attn_bwd_prep_ref,
    check=ATTN_BWD_CHECK,
    small=ATTN_BWD_SMALL,
    run=dict(B=4, H=16, M=8192, D=128),
)
PROGRAMS["attn_bwd_post"] = Program(
    ref=_attn_bwd_post_ref,
    check=[{**s, "scale": x} for s, x in zip(ATTN_BWD_CHECK, [0.0884, 0.125, 1.0, 0.3] * 2)],
    small=[{**s, "scale": 0.125} for s in ATTN_BWD_SMALL],
    run=dict(B=4, H=16, M=8192, D=128, scale=0.0884),
)


def _reduce_ref(t: dict) -> dict:
    """tests/programs/reduce_rows.cyp and reduce_steps.cyp in float32: C += A @ B (the entry
    holds ``reduces=["C"]``: the product is added into the C it is given)."""
    return {"C": t["C"].float() + _mm(t["A"], t["B"])}


# reductions from registers into global memory with red.global.add.v2.f32 (issue #38):
# reduce_rows (split-K: the blocks of every K slice add their tile after the main loop) and
# reduce_steps (every main-loop step adds a row tile: FlashAttention-3's dQ).  Ragged M, N, K
# against the tiles (reduce_rows: 128 x 128, K slices of 256; reduce_steps: K slices of 64,
# 128-column tiles, 128-row steps), many K slices adding into one tile (K = 4104), one row;
# refused: K = 0 (TMA needs non-empty A and B) and odd N (pairs of elements)
REDUCE_CHECK = [
    dict(M=4096, N=4096, K=4096),
    dict(M=1000, N=520, K=1000),
    dict(M=129, N=264, K=72),
    dict(M=1, N=8, K=8),
    dict(M=300, N=136, K=4104),
    dict(M=777, N=1304, K=64),
    dict(M=64, N=64, K=0),
    dict(M=64, N=63, K=64),
]
REDUCE_SMALL = [dict(M=256, N=256, K=512), dict(M=129, N=264, K=72)]
for _name in ("reduce_rows", "reduce_steps"):
    PROGRAMS[_name] = Program(
        ref=_reduce_ref,
        check=REDUCE_CHECK,
        small=REDUCE_SMALL,
        run=dict(M=4096, N=4096, K=4096),
        atomic=True,
    )


def _fab_prepare(t: dict, kw: dict) -> None:
    """LSE and O of the forward (float32, from the random Q, K, V), per query head on its
    key/value head, causal-masked when ``causal``: what the backward reads besides Q, K, V, dO."""
    for b, h, lse, o in _forward_heads(t, kw):
        t["LSE"][b, h].copy_(lse)
        t["O"][b, h].copy_(o)


def _fab_ref(t: dict) -> dict:
    """tests/programs/flash_attention_bwd.cyp in float32, by the backward's formula from the
    given LSE and O (:func:`_backward_ref` with Dsum = rowsum(dO ∘ O)): dQ = scale · dS K, dK,
    dV, and the scratch as the kernels leave it.  With the forward's LSE and O (``prepare``;
    the harness's --dump run has random ones) it is autograd's dQ, dK, dV of
    softmax(Q Kᵀ · scale) V."""
    dsum = (t["dO"].float() * t["O"].float()).sum(-1)
    r = _backward_ref(t, dsum)
    return {**r, "dQ": float(t["scale"]) * r["dQacc"], "Dsum": dsum}


def _attn_bwd_main_ref(t: dict) -> dict:
    """tests/programs/attn_bwd_main.cyp (one head) in float32: :func:`_backward_ref`'s dK and
    dV, and dQacc + dS K (the kernel adds into dQacc)."""
    one = _one_head(t)
    r = _backward_ref(one, one["Dsum"])
    return {
        "dV": r["dV"][0, 0],
        "dK": r["dK"][0, 0],
        "dQacc": t["dQacc"].float() + r["dQacc"][0, 0],
    }


# the backward's main kernel for one head (issue #38): dQ's sums added into dQacc by atomics
PROGRAMS["attn_bwd_main"] = Program(
    ref=_attn_bwd_main_ref,
    check=[
        dict(M=4096, N=4096, D=128, scale=_S128),
        dict(M=1000, N=777, D=128, scale=_S128),
        dict(M=64, N=300, D=128, scale=0.5),
        dict(M=1, N=3, D=128, scale=_S128),
        dict(M=333, N=4100, D=128, scale=0.125),
    ],
    small=[dict(M=256, N=256, D=128, scale=_S128)],
    run=dict(M=16384, N=16384, D=128, scale=_S128),
    prepare=lambda t, kw: _attn_bwd_stats(_one_head(t), {**kw, "causal": 0}),
    atomic=True,
)


# the whole attention backward (issue #38): three kernels behind one launcher; GQA (H / HK
# query heads per key/value head; H not a multiple of HK refused), causal or not, ragged M and
# N (N > M and M > N causal), D up to the build's E
_FAB = dict(scale=0.08838834764831845)
PROGRAMS["flash_attention_bwd"] = Program(
    ref=_fab_ref,
    check=[
        dict(B=2, H=4, HK=4, M=1024, N=1024, D=128, causal=0, **_FAB),
        dict(B=1, H=4, HK=2, M=1000, N=777, D=128, causal=1, **_FAB),
        dict(B=1, H=2, HK=1, M=64, N=300, D=64, causal=1, scale=0.125),
        dict(B=1, H=2, HK=2, M=1, N=3, D=128, causal=0, **_FAB),
        dict(B=1, H=4, HK=1, M=333, N=4100, D=128, causal=0, scale=0.125),
        dict(B=1, H=4, HK=1, M=4100, N=333, D=128, causal=1, **_FAB),
        dict(B=1, H=2, HK=1, M=4096, N=4096, D=128, causal=1, **_FAB),
        dict(B=1, H=3, HK=2, M=128, N=128, D=128, causal=0, **_FAB),
        # head dimension 64 (h100_d64: dQ split by keys), ragged, GQA, causal both, M = 1
        dict(B=2, H=4, HK=2, M=1000, N=777, D=64, causal=1, scale=0.125),
        dict(B=1, H=2, HK=2, M=1, N=3, D=64, causal=0, scale=0.125),
        dict(B=1, H=4, HK=1, M=4100, N=333, D=64, causal=1, scale=0.125),
    ],
    small=[
        dict(B=1, H=2, HK=1, M=256, N=256, D=128, causal=1, **_FAB),
        dict(B=1, H=1, HK=1, M=129, N=130, D=64, causal=0, scale=0.125),
    ],
    run=dict(B=4, H=16, HK=16, M=4096, N=4096, D=128, causal=0, **_FAB),
    prepare=_fab_prepare,
    atomic=True,
)
# Programs outside programs/: (the program, the mapping `--mappings h100` means), from the root;
# another mapping name is a .yaml beside that one (tests/mappings/attn_bwd_prep/h100_d64.yaml)
SOURCES = {
    "attn_bwd_dkdv": ("tests/programs/attn_bwd_dkdv.cyp", "tests/mappings/attn_bwd_dkdv.yaml"),
    "two_kernels": ("tests/programs/two_kernels.cyp", "tests/mappings/two_kernels.yaml"),
    "flash_attention_bwd": (
        "tests/programs/flash_attention_bwd.cyp",
        "tests/mappings/flash_attention_bwd/h100_d128.yaml",
    ),
    "attn_bwd_main": ("tests/programs/attn_bwd_main.cyp", "tests/mappings/attn_bwd_main.yaml"),
    "gemm_cols": ("tests/programs/gemm_cols.cyp", "tests/mappings/gemm_cols.yaml"),
    "tutorial_gemm": ("docs/tutorial/fused_gemm.cyp", "docs/tutorial/fused_gemm.yaml"),
    "tutorial_attention": ("docs/tutorial/attention.cyp", "docs/tutorial/attention.yaml"),
    "attn_bwd_prep": (
        "tests/programs/attn_bwd_prep.cyp",
        "tests/mappings/attn_bwd_prep/h100_d128.yaml",
    ),
    "attn_bwd_post": (
        "tests/programs/attn_bwd_post.cyp",
        "tests/mappings/attn_bwd_post/h100_d128.yaml",
    ),
    "gemm_at": ("tests/programs/gemm_at.cyp", "tests/mappings/gemm_at.yaml"),
    "chain_stage": ("tests/programs/chain_stage.cyp", "tests/mappings/chain_stage.yaml"),
    "reduce_rows": ("tests/programs/reduce_rows.cyp", "tests/mappings/reduce_rows.yaml"),
    "reduce_steps": ("tests/programs/reduce_steps.cyp", "tests/mappings/reduce_steps.yaml"),
}
TUTORIALS = ("tutorial_gemm", "tutorial_attention")  # SOURCES with a docs/tutorial.md snippet


def tutorial_snippet_code(program: str) -> str:
    """docs/tutorial.md's ``<!-- pytorch -->`` block that compiles ``program``'s .cyp file."""
    text = (ROOT / "docs" / "tutorial.md").read_text()
    blocks = re.findall(r"^<!-- pytorch -->\n```python\n(.*?)^```", text, re.M | re.S)
    return next(b for b in blocks if f'"{SOURCES[program][0]}"' in b)


def tutorial_snippet(program: str) -> dict:
    """Run the tutorial's PyTorch snippet for ``program`` on the GPU as a reader would (from
    the repository root: ``cypressc.compile``, the op, ``torch.testing.assert_close`` against
    its float32 reference); an ``api`` row."""
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)
        exec(compile(tutorial_snippet_code(program), "docs/tutorial.md", "exec"), {})
        ok, msg = True, "ran; assert_close against the float32 reference passed"
    except Exception as e:  # noqa: BLE001 - a row, not a crash
        ok, msg = False, f"{type(e).__name__}: {e}"[:300]
    finally:
        os.chdir(cwd)
    return {"case": "docs/tutorial.md snippet", "ok": ok, "msg": msg}


def program_path(program: str) -> Path:
    """The .cyp file of ``program``: its ``SOURCES`` entry, else programs/<program>.cyp."""
    return ROOT / (SOURCES[program][0] if program in SOURCES else f"programs/{program}.cyp")


def generic_sizes(info: KernelInfo) -> tuple[list[dict], list[dict], dict]:
    """Sizes for a program the table does not know (or whose size names differ)."""
    ragged, odd = [136, 264, 72, 200, 520], [129, 77, 257, 33, 65]
    mk = lambda vals: {s: vals[i % len(vals)] for i, s in enumerate(info.sizes)}
    check = [mk([512]), mk([1024]), mk(ragged), mk([8]), mk(odd)]
    return check, [mk([256]), mk(ragged)], mk([2048])


def _accepted_run(info: KernelInfo, run: dict, check: list[dict]) -> dict:
    """The harness binary's sizes: ``run``, or, where the kernel's launcher refuses it (a
    mapping variant whose E is below the table's D, say), the largest checked size it accepts."""
    if not info.failed_requires(run):
        return run
    ok = [s for s in check if not info.failed_requires(s)]
    return max(ok, key=lambda s: math.prod(v for v in s.values() if type(v) is int), default=run)


def program_for(
    name: str, info: KernelInfo
) -> tuple[Program | None, list[dict], list[dict], dict, str]:
    prog = PROGRAMS.get(name) or PROGRAMS.get(info.name)
    order = (*info.sizes, *getattr(info, "floats", ()))
    if prog and set(prog.check[0]) == set(order):
        # in the launcher's order: the harness binary and the sanitizer runs pass them by position
        check, small = ([{k: s[k] for k in order} for s in ss] for ss in (prog.check, prog.small))
        run = {k: prog.run[k] for k in order}
        return prog, check, small, _accepted_run(info, run, check), ""
    check, small, run = generic_sizes(info)
    why = (
        f"size names {list(info.sizes)} differ from the table's {sorted(prog.check[0])}: generic sizes"
        if prog
        else "no table entry: generic sizes, no reference (NaN/refusal checks only)"
    )
    return prog, check, small, run, why


def sizes_str(s: dict) -> str:
    return "x".join(str(v) for v in s.values())


# --------------------------------------------------------------------------------------------
# Targets and building
# --------------------------------------------------------------------------------------------


@dataclass
class Target:
    label: str
    program: str
    outdir: Path
    mapping: str | None = None  # cypressc build from a mapping
    proto_dtype: str | None = None  # bench/proto wrapped by hand
    dtype: str | None = None  # --dtype T=<dtype> for cypressc build (None: the default)
    prebuilt: bool = False
    result: dict = field(default_factory=dict)


PROTO_ADAPTER = """// gemm.cu — bench/proto/gemm_target.cu behind the cypressc launcher ABI (written by
// bench/gpu_check.py: params C, A, B; int64_t sizes), so the generated harness and
// cypressc.runtime can be tested on the hand-written kernel.
{define}#define gemm_launch cyp_proto_gemm_launch
#define gemm_config cyp_proto_gemm_config
#include "proto_gemm_target.cu"
#undef gemm_launch
#undef gemm_config
#include "gemm.h"

extern "C" int gemm_launch(void* C, const void* A, const void* B, int64_t M, int64_t N, int64_t K,
                           cudaStream_t stream) {{
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) return cudaErrorInvalidValue;
  return cyp_proto_gemm_launch(A, B, C, int(M), int(N), int(K), stream);
}}
"""

PROTO_HEADER = """// gemm.h — the cypressc launcher ABI of bench/proto's GEMM (see gemm.cu).
#pragma once
#include <cstdint>
#include <cuda_runtime.h>
extern "C" int gemm_launch(void* C, const void* A, const void* B, int64_t M, int64_t N, int64_t K,
                           cudaStream_t stream);
"""


def _op(op: str, a: dict, b: dict) -> dict:
    """A node of the info's expression trees (cypressc.runtime.eval_expr)."""
    return {"op": op, "a": a, "b": b}


def proto_info(dtype: str) -> dict:
    return {
        "name": "gemm",
        "params": [
            {"name": "C", "dtype": dtype, "dims": ["M", "N"], "reads": False, "writes": True},
            {"name": "A", "dtype": dtype, "dims": ["M", "K"], "reads": True, "writes": False},
            {"name": "B", "dtype": dtype, "dims": ["K", "N"], "reads": True, "writes": False},
        ],
        "sizes": ["M", "N", "K"],
        "flops": {
            "c": "((2.0 * M) * N) * K",
            "tree": _op(
                "*", _op("*", _op("*", {"const": 2.0}, {"var": "M"}), {"var": "N"}), {"var": "K"}
            ),
        },
        "requires": [
            {
                "c": f"{d} % 8 == 0",
                "tree": _op("==", _op("%", {"var": d}, {"const": 8}), {"const": 0}),
                "why": f"{d} must be a multiple of 8 (TMA: 16-byte row strides)",
            }
            for d in "NK"
        ],
        "runtime_include": str(ROOT / "cypressc" / "backend" / "runtime"),
        "cuda_arch": "90a",
    }


def build_proto(outdir: Path, dtype: str = "f16") -> None:
    """Lay bench/proto's GEMM out like a `cypressc build` output directory."""
    from cypressc.backend.harness import write_harness

    if dtype not in ("f16", "bf16"):
        raise ValueError(f"proto dtype must be f16 or bf16, not {dtype}")
    outdir.mkdir(parents=True, exist_ok=True)
    files = {
        "proto_gemm_target.cu": (ROOT / "bench" / "proto" / "gemm_target.cu").read_text(),
        "gemm.cu": PROTO_ADAPTER.format(define="#define CYP_BF16\n" if dtype == "bf16" else ""),
        "gemm.h": PROTO_HEADER,
    }
    for name, text in files.items():  # unchanged files keep their mtime: make is a no-op
        f = outdir / name
        if not f.exists() or f.read_text() != text:
            f.write_text(text)
    write_harness(outdir, proto_info(dtype))


def expand_mappings(program: str, spec: str) -> list[str]:
    """Comma-separated mapping names or paths; ``all`` = every mappings/<program>/*.yaml;
    ``<program>/<name>`` = mappings/<program>/<name>.yaml for that program only."""
    out: list[str] = []
    for m in [m for m in spec.split(",") if m]:
        if "/" in m and not m.endswith((".yaml", ".yml")):
            prog, name = m.split("/", 1)
            if prog == program and name not in out:
                out.append(name)
        elif m == "all":
            out += [p.stem for p in sorted((ROOT / "mappings" / program).glob("*.yaml"))]
        elif m not in out:
            out.append(m)
    return out


def resolve_mapping(program: str, mapping: str) -> Path | None:
    p = Path(mapping)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    if program in SOURCES and mapping == "h100":
        return ROOT / SOURCES[program][1]
    if program in SOURCES:
        beside = (ROOT / SOURCES[program][1]).with_name(f"{mapping}.yaml")
        return beside if beside.exists() else None
    cand = ROOT / "mappings" / program / f"{mapping}.yaml"
    return cand if cand.exists() else None


def run(cmd: list[str], cwd: Path | None = None, timeout: float = 900) -> tuple[int, str, float]:
    t0 = time.time()
    try:
        p = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=child_env()
        )
        return p.returncode, p.stdout + p.stderr, time.time() - t0
    except subprocess.TimeoutExpired as e:
        out = (
            (e.stdout or b"").decode(errors="replace")
            if isinstance(e.stdout, bytes)
            else (e.stdout or "")
        )
        return 124, out + f"\n[timeout after {timeout}s]", time.time() - t0
    except OSError as e:
        return 127, f"{cmd[0]}: {e}", time.time() - t0


# The Makefile's nvcc recipe (for machines without make) lives with the tuner's builds.
from cypressc.tuner.build import nvcc_command  # noqa: E402


def make_target(outdir: Path, name: str, target: str, extra: str = "", timeout: float = 900):
    """``make -C outdir target`` (EXTRA_NVCCFLAGS=extra), or the same nvcc command without make."""
    if shutil.which("make"):
        cmd = ["make", "-C", str(outdir), target] + ([f"EXTRA_NVCCFLAGS={extra}"] if extra else [])
        return run(cmd, None, timeout)
    return run(nvcc_command(outdir, name, target, extra), outdir, timeout)


def cypressc_build(t: Target, mapping: Path) -> tuple[int, str, float]:
    prog = program_path(t.program)
    dt = [x for b in _bindings(t.dtype) for x in ("--dtype", b)] if t.dtype else []
    return run(
        [
            sys.executable,
            "-m",
            "cypressc.cli",
            "build",
            str(prog),
            "-m",
            str(mapping),
            *dt,
            "-o",
            str(t.outdir),
        ],
        cwd=ROOT,
        timeout=300,
    )


_PTX_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTX_PROPS = re.compile(r"Function properties for (\S+)")
_PTX_SPILL = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_PTX_REGS = re.compile(r"Used (\d+) registers")


def ptxas_summary(log: str) -> dict[str, dict]:
    """Per kernel entry (harness helpers excluded): registers, stack, spills."""
    out: dict[str, dict] = {}
    cur = None
    for line in log.splitlines():
        if m := _PTX_ENTRY.search(line):
            cur = m.group(1)
        elif m := _PTX_PROPS.search(line):
            cur = m.group(1)
        elif cur and (m := _PTX_SPILL.search(line)):
            out.setdefault(cur, {}).update(
                stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3))
            )
        elif cur and (m := _PTX_REGS.search(line)):
            out.setdefault(cur, {})["regs"] = int(m.group(1))
    return {k: v for k, v in out.items() if "cyp_fill_random" not in k and "cyp_count_nan" not in k}


def sass_summary(so: Path) -> str:
    rc, s, _ = run(["cuobjdump", "-sass", str(so)], timeout=120)
    if rc:
        return f"cuobjdump rc={rc}"
    count = lambda op: sum(1 for line in s.splitlines() if op in line)
    return " ".join(
        f"{op}={count(op)}" for op in ("HGMMA", "LDL", "STL", "UTMALDG", "UTMASTG", "SYNCS")
    )


def build_target(t: Target) -> dict:
    r: dict[str, Any] = {"label": t.label, "outdir": str(t.outdir)}
    if t.proto_dtype:
        try:
            build_proto(t.outdir, t.proto_dtype)
            r["build"] = {"rc": 0, "how": f"bench/proto wrapped ({t.proto_dtype})"}
        except Exception as e:
            r["build"] = {"rc": 1, "log": f"{type(e).__name__}: {e}"}
    elif t.mapping:
        mp = resolve_mapping(t.program, t.mapping)
        if mp is None:
            r["build"] = {
                "rc": 1,
                "log": f"no mapping {t.mapping!r} (tried {t.mapping} and "
                f"mappings/{t.program}/{t.mapping}.yaml)",
            }
        else:
            if t.outdir.exists():
                shutil.rmtree(t.outdir)
            rc, log, dt = cypressc_build(t, mp)
            r["build"] = {
                "rc": rc,
                "secs": round(dt, 1),
                "log": log[-4000:],
                "cmd": f"cypressc build {program_path(t.program).relative_to(ROOT)} -m {mp.relative_to(ROOT) if mp.is_relative_to(ROOT) else mp} -o {t.outdir}",
            }
            if rc == 0 and not list(t.outdir.glob("*.json")):
                r["build"].update(
                    rc=1,
                    log=log[-3000:] + "\n[cypressc build wrote no <name>.json: was "
                    "cypressc.backend.harness.write_harness called?]",
                )
            if rc == 2 and "No such command" in log:
                r["build"]["log"] += (
                    "\n[this cypressc has no `build` command yet; --proto tests the harness]"
                )
    else:
        r["build"] = {"rc": 0, "how": "prebuilt"}
    say(
        f"[build] {t.label}: rc={r['build']['rc']} {r['build'].get('how', '')} {r['build'].get('secs', '')}"
    )
    if r["build"]["rc"]:
        say(r["build"].get("log", "")[-3000:])
        return r
    jsons = sorted(t.outdir.glob("*.json"))
    try:
        info = (
            KernelInfo.load_json(jsons[0])
            if len(jsons) == 1
            else KernelInfo.load_json(t.outdir / "gemm.json")
        )
    except Exception as e:
        r["build"] = {"rc": 1, "log": f"cannot read the kernel info in {t.outdir}: {e}"}
        say(f"[build] {t.label}: {r['build']['log']}")
        return r
    r["name"] = info.name
    r["dtypes"] = sorted({p.dtype for p in info.params})
    # make: the library with ptxas -v and the harness binary, in parallel (separate logs)
    with cf.ThreadPoolExecutor(2) as ex:
        f_lib = ex.submit(make_target, t.outdir, info.name, f"lib{info.name}.so", "-Xptxas -v")
        f_exe = ex.submit(make_target, t.outdir, info.name, info.name)
        (rc1, log1, dt1), (rc2, log2, dt2) = f_lib.result(), f_exe.result()
    warns = sorted(
        {
            line.strip()
            for line in (log1 + log2).splitlines()
            if "warning" in line.lower() and "ptxas info" not in line
        }
    )
    r["make"] = {
        "rc": rc1 or rc2,
        "secs": round(max(dt1, dt2), 1),
        "warnings": warns[:20],
        "ptxas": ptxas_summary(log1),
        "log": (log1 if rc1 else log2)[-4000:] if (rc1 or rc2) else "",
    }
    if not r["make"]["rc"]:
        r["make"]["sass"] = sass_summary(t.outdir / f"lib{info.name}.so")
    ks = r["make"]["ptxas"]
    desc = (
        "; ".join(
            f"{v.get('regs', '?')} regs, spill {v.get('spill_st', '?')}/{v.get('spill_ld', '?')}, "
            f"stack {v.get('stack', '?')}"
            for v in ks.values()
        )
        or "no ptxas info"
    )
    say(
        f"[make]  {t.label}: rc={r['make']['rc']} {r['make']['secs']}s | {desc} | {r['make'].get('sass', '')}"
        + (f" | {len(warns)} warning(s): {warns[0][:160]}" if warns else "")
    )
    if r["make"]["rc"]:
        say(r["make"]["log"][-3000:])
    return r


# --------------------------------------------------------------------------------------------
# Child: correctness through cypressc.runtime on one built directory
# --------------------------------------------------------------------------------------------


def _poison(torch, p, shape, dt):
    if DTYPES[p.dtype].floating:
        return torch.full(shape, float("nan"), dtype=dt, device=DEVICE)
    return torch.full(shape, -1234567, dtype=dt, device=DEVICE)


def _untouched(torch, t) -> bool:
    return (
        bool(torch.isnan(t.float()).all()) if t.is_floating_point() else bool((t == -1234567).all())
    )


def _rel(torch, out, ref) -> float:
    den = float(ref.double().norm())
    if out.numel() == 0:
        return 0.0
    if den == 0.0:
        return float((out.double() - ref.double()).abs().max())
    return float((out.double() - ref.double()).norm()) / den


def make_tensors(torch, info: KernelInfo, sizes: dict) -> dict:
    ts = {}
    for p in info.params:
        dt = getattr(torch, DTYPES[p.dtype].torch)
        shape = info.shape(p, sizes)
        if p.reads:
            ts[p.name] = (
                # FP8 has no randn: drawn in f32, then rounded (e4m3 saturates at 448)
                torch.randn(shape, dtype=torch.float32, device=DEVICE).to(dt)
                if DTYPES[p.dtype].floating
                else torch.randint(-8, 8, shape, dtype=dt, device=DEVICE)
            )
        else:
            ts[p.name] = _poison(torch, p, shape, dt)
    return ts


def check_size(torch, kern, prog: Program | None, sizes: dict) -> dict:
    from cypressc.runtime import KernelError

    info = kern.info
    res: dict[str, Any] = {"sizes": sizes}
    ts = make_tensors(torch, info, sizes)
    kw = scalar_args(info, sizes)
    failed = info.failed_requires(sizes)
    if prog is not None and prog.prepare is not None and not failed:
        prog.prepare(ts, kw)
    before = {p.name: ts[p.name].clone() for p in info.params if p.reads and p.writes}
    args = [ts[p.name] for p in info.params]
    outs = [p for p in info.params if p.writes]
    if failed:  # must be refused, outputs untouched
        res["expect"] = "refuse"
        try:
            kern(*args, **kw)
            res["python"] = "NOT RAISED"
        except KernelError as e:
            res["python"] = "raised"
            res["python_msg"] = str(e)[:200]
        torch.cuda.synchronize()
        rc = kern.launch(*args, check_requires=False, **kw)
        torch.cuda.synchronize()
        res["rc"] = rc
        res["untouched"] = all(
            _untouched(torch, ts[p.name])
            if not p.reads
            else torch.equal(ts[p.name], before[p.name])
            for p in outs
        )
        res["ok"] = res["python"] == "raised" and rc == 1 and res["untouched"]
        return res
    res["expect"] = "compute"
    kern(*args, **kw)
    torch.cuda.synchronize()
    first = {p.name: ts[p.name].clone() for p in outs}
    res["nan"] = {
        p.name: int(torch.isnan(ts[p.name].float()).sum()) for p in outs if DTYPES[p.dtype].floating
    }
    if prog is not None:
        inputs = {
            p.name: (before[p.name] if p.name in before else ts[p.name]) for p in info.params
        } | kw
        try:
            refs = prog.reference(inputs, info)
        except KeyError as e:
            raise RuntimeError(
                f"the reference reads parameter {e} but the kernel's params are "
                f"{[p.name for p in info.params]}: update PROGRAMS in bench/gpu_check.py"
            ) from None
        res["rel"] = {
            name: _rel(torch, first[name].float(), ref.float()) for name, ref in refs.items()
        }
        del refs
    # second launch on re-poisoned outputs: bitwise equal (a race shows as a difference)
    for p in outs:
        if p.name in before:
            ts[p.name].copy_(before[p.name])
        else:
            ts[p.name].copy_(_poison(torch, p, ts[p.name].shape, ts[p.name].dtype))
    kern(*args, **kw)
    torch.cuda.synchronize()
    res["det"] = all(_same(torch, prog, first[p.name], ts[p.name]) for p in outs)
    res["ok"] = (
        all(v == 0 for v in res["nan"].values())
        and res["det"]
        and all(v < TOL for v in res.get("rel", {}).values())
    )
    return res


def _same(torch, prog: Program | None, a, b) -> bool:
    """Whether two launches' outputs agree: bitwise, or for a program that reduces with
    atomics (``Program.atomic``) within relative 1e-5 (NaN in the same places)."""
    if prog is None or not prog.atomic or not a.is_floating_point():
        return torch.equal(a, b)
    if not torch.equal(torch.isnan(a), torch.isnan(b)):
        return False
    # f32 sums agree to ~1e-7 relative; a 16-bit output converted from them may round the
    # other way in a few elements: one unit in its last place, 2^-8 (bf16) or 2^-11 (f16)
    ulp = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}.get(a.dtype, 0.0)
    tol = max(1e-5, ulp / 8)  # a few such elements in a norm stay far below one ulp
    return _rel(torch, torch.nan_to_num(a.float()), torch.nan_to_num(b.float())) < tol


def api_checks(torch, kern, sizes: dict) -> list[dict]:
    """The loader's argument checks on real CUDA tensors: each must raise KernelError."""
    from cypressc.runtime import KernelError

    info = kern.info
    out = []
    kw = scalar_args(info, sizes)

    def expect(what: str, make_args: Callable[[dict], list]) -> None:
        ts = make_tensors(torch, info, sizes)
        snap = {p.name: ts[p.name].clone() for p in info.params if p.writes}
        try:
            kern(*make_args(ts), **kw)
            r = {"case": what, "ok": False, "msg": "no KernelError"}
        except KernelError as e:
            torch.cuda.synchronize()
            same = all(
                torch.equal(snap[n], ts[n])
                or (torch.isnan(snap[n].float()).all() and torch.isnan(ts[n].float()).all())
                for n in snap
            )
            r = {
                "case": what,
                "ok": same,
                "msg": str(e)[:160] + ("" if same else " [OUTPUT CHANGED]"),
            }
        except Exception as e:
            r = {"case": what, "ok": False, "msg": f"{type(e).__name__}: {e}"[:200]}
        out.append(r)

    names = [p.name for p in info.params]
    p0 = info.params[-1]  # an input, usually
    other = {
        "f16": torch.float32,
        "bf16": torch.float16,
        "f32": torch.float16,
        "i32": torch.float32,
        "f8e4m3": torch.float8_e5m2,
        "f8e5m2": torch.float8_e4m3fn,
    }[p0.dtype]
    expect(
        f"dtype of {p0.name}",
        lambda ts: [ts[n] if n != p0.name else ts[n].to(other) for n in names],
    )
    expect(f"{p0.name} on cpu", lambda ts: [ts[n] if n != p0.name else ts[n].cpu() for n in names])
    expect("missing tensor", lambda ts: [ts[n] for n in names[:-1]])
    pr = next((p for p in info.params if len(p.dims) >= 2), None)
    if pr is not None:

        def noncontig(ts):
            t = ts[pr.name]
            return [
                ts[n] if n != pr.name else t.transpose(-1, -2).contiguous().transpose(-1, -2)
                for n in names
            ]

        expect(f"non-contiguous {pr.name}", noncontig)

        def misaligned(ts):
            t = ts[pr.name]
            buf = torch.empty(t.numel() + 1, dtype=t.dtype, device=DEVICE)[1:].view(t.shape)
            buf.copy_(t)
            return [ts[n] if n != pr.name else buf for n in names]

        expect(f"misaligned {pr.name}", misaligned)

        def wrong_extent(ts):
            t = ts[pr.name]
            bigger = list(t.shape)
            bigger[0] += 1
            return [
                ts[n] if n != pr.name else torch.zeros(bigger, dtype=t.dtype, device=DEVICE)
                for n in names
            ]

        expect(f"inconsistent {pr.name}.shape[0]", wrong_extent)
    return out


def child(outdir: str, program: str, label: str) -> None:
    import torch

    from cypressc import runtime

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    kern = runtime.load(outdir)
    prog, check, small, _, why = program_for(program, kern.info)
    res: dict[str, Any] = {
        "label": label,
        "kernel": kern.name,
        "sizes_note": why,
        "checks": [],
        "api": [],
    }
    if why:
        print(f"[{label}] note: {why}", flush=True)
    broken = None  # a sticky CUDA error ends the checks
    for sizes in check:
        t0 = time.time()
        if broken:
            r = {
                "sizes": sizes,
                "ok": False,
                "error": f"skipped: the CUDA context is broken ({broken})",
            }
        else:
            try:
                r = check_size(torch, kern, prog, sizes)
            except Exception as e:
                r = {"sizes": sizes, "ok": False, "error": f"{type(e).__name__}: {e}"[:400]}
                try:
                    torch.cuda.synchronize()
                except Exception as e2:
                    broken = f"{type(e2).__name__}: {e2}"[:200]
        r["secs"] = round(time.time() - t0, 2)
        res["checks"].append(r)
        print(
            f"[{label}] {sizes_str(sizes):>18s}: {cell(r):<24s} ({r['secs']}s)"
            + (f" {r['error']}" if "error" in r else ""),
            flush=True,
        )
        if not broken:
            try:
                torch.cuda.empty_cache()
            except Exception as e:
                broken = f"{type(e).__name__}: {e}"[:200]
    if broken:
        res["broken"] = broken
        print("RESULT " + json.dumps(res), flush=True)
        return
    # bind(): the fast path gives the same result as the checked call
    try:
        ok_sizes = next(s for s in check if not kern.info.failed_requires(s))
        ts = make_tensors(torch, kern.info, ok_sizes)
        args = [ts[p.name] for p in kern.info.params]
        kw = scalar_args(kern.info, ok_sizes)
        rw = {p.name: ts[p.name].clone() for p in kern.info.params if p.reads and p.writes}
        kern(*args, **kw)
        torch.cuda.synchronize()
        first = {p.name: ts[p.name].clone() for p in kern.info.params if p.writes}
        for n, x in rw.items():  # a tensor read and written (added into) starts over
            ts[n].copy_(x)
        kern.bind(*args, **kw)()
        torch.cuda.synchronize()
        prog = PROGRAMS.get(program)
        res["bind_ok"] = all(_same(torch, prog, first[n], ts[n]) for n in first)
    except Exception as e:
        res["bind_ok"] = False
        res["bind_error"] = f"{type(e).__name__}: {e}"[:300]
    try:
        res["api"] = api_checks(
            torch, kern, next(s for s in small + check if not kern.info.failed_requires(s))
        )
    except Exception as e:
        res["api"] = [{"case": "api checks", "ok": False, "msg": f"{type(e).__name__}: {e}"[:300]}]
    if (
        program == "gemm"
    ):  # the kernel as a PyTorch op: torch.compile(fullgraph=True) and a CUDA graph
        from op_checks import as_api_rows, op_checks

        try:
            res["api"] += as_api_rows(op_checks(torch, kern, "gemm_check"))
        except Exception as e:
            res["api"].append(
                {"case": "PyTorch op", "ok": False, "msg": f"{type(e).__name__}: {e}"[:300]}
            )
    if program in TUTORIALS and kern.info.params[0].dtype == "bf16":  # the snippets are bf16
        res["api"].append(tutorial_snippet(program))
    for a in res["api"]:
        print(
            f"[{label}] api: {a['case']:<28s} {'ok' if a['ok'] else 'FAIL'}  {a['msg'][:110]}",
            flush=True,
        )
    print("RESULT " + json.dumps(res), flush=True)


def cell(r: dict) -> str:
    if "error" in r:
        return "ERROR"
    if r.get("expect") == "refuse":
        return (
            ("refused" if r["ok"] else "BAD-REFUSE")
            + f" py={r['python']} rc={r['rc']}"
            + ("" if r["untouched"] else " WRITTEN")
        )
    rel = max(r.get("rel", {}).values(), default=float("nan"))
    bad_nan = sum(r["nan"].values())
    return (
        ("ok " if r["ok"] else "BAD ")
        + (f"{rel:.1e}" if r.get("rel") else "no-ref")
        + (f" nan={bad_nan}" if bad_nan else "")
        + ("" if r["det"] else " nondet")
    )


def run_child(t: Target, timeout: float) -> dict | None:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(t.outdir),
        "--program",
        t.program,
        "--label",
        t.label,
    ]
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env()
    )
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    result, tail = None, []
    try:
        for line in p.stdout:
            line = line.rstrip("\n")
            if line.startswith("RESULT "):
                result = json.loads(line[7:])
            else:
                say(line)
                tail = (tail + [line])[-40:]
        p.wait()
    finally:
        timed_out = not timer.is_alive() and p.returncode not in (0, None) and result is None
        timer.cancel()
    if result is None:
        why = (
            f"TIMEOUT after {timeout}s (hang?)"
            if timed_out
            else f"child exited rc={p.returncode} without a result"
        )
        say(f"[{t.label}] {why}")
        return {"error": why, "tail": tail}
    return result


# --------------------------------------------------------------------------------------------
# The harness binary: JSON line, refusal, --dump against the reference; compute-sanitizer
# --------------------------------------------------------------------------------------------


def _load_npy(path: Path, dtype: str):
    import numpy as np
    import torch

    a = np.load(path)
    if dtype == "bf16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    if DTYPES[dtype].itemsize == 1:  # FP8: raw bits ('|u1')
        return (
            torch.from_numpy(np.ascontiguousarray(a))
            .view(getattr(torch, DTYPES[dtype].torch))
            .float()
        )
    return torch.from_numpy(np.ascontiguousarray(a))


def harness_checks(
    t: Target,
    info: KernelInfo,
    prog: Program | None,
    check: list[dict],
    small: list[dict],
    run_sizes: dict,
) -> dict:
    exe = t.outdir / info.name
    res: dict[str, Any] = {}
    rc, log, dt = run([str(exe), *map(str, run_sizes.values()), "--iters", "20"], timeout=120)
    line = _last_json(log)
    res["run"] = {
        "sizes": run_sizes,
        "rc": rc,
        "json": line,
        # a program whose inputs must agree with each other (``prepare``: the backward's LSE
        # and O) gets the harness's unrelated random ones: 16-bit overflow there is no finding
        "ok": rc in ((0, 3) if prog is not None and prog.prepare is not None else (0,))
        and bool(line)
        and line.get("ms") is not None
        and (
            (prog is not None and prog.prepare is not None)
            or not any((line.get("nan") or {}).values())
        ),
    }
    if not res["run"]["ok"]:
        res["run"]["log"] = log[-1500:]
    say(
        f"[harness] {t.label}: ./{info.name} {sizes_str(run_sizes)} rc={rc} -> {json.dumps(line) if line else log[-300:]}"
    )
    bad = next((s for s in check if info.failed_requires(s)), None)
    if bad:
        rc, log, _ = run([str(exe), *map(str, bad.values()), "--iters", "1"], timeout=60)
        line = _last_json(log)
        res["refuse"] = {
            "sizes": bad,
            "rc": rc,
            "ok": rc == 1 and bool(line) and line.get("rc") == 1,
        }
        say(
            f"[harness] {t.label}: ./{info.name} {sizes_str(bad)} (refused shape) rc={rc} "
            f"{'ok' if res['refuse']['ok'] else 'BAD'} | {log.strip().splitlines()[0][:160] if log.strip() else ''}"
        )
    sz = next((s for s in reversed(small) if not info.failed_requires(s)), None)
    if sz is not None and prog is not None:
        d = t.outdir / "dump"
        shutil.rmtree(d, ignore_errors=True)
        rc, log, _ = run(
            [str(exe), *map(str, sz.values()), "--iters", "1", "--warmup", "0", "--dump", str(d)],
            timeout=60,
        )
        try:
            ins = {}
            for p in info.params:
                f = d / (f"{p.name}.in.npy" if p.reads and p.writes else f"{p.name}.npy")
                ins[p.name] = _load_npy(f, p.dtype)
            refs = prog.reference(ins | scalar_args(info, sz), info)
            rels = {
                n: _rel(
                    __import__("torch"),
                    _load_npy(d / f"{n}.npy", info.param(n).dtype).float(),
                    r.float(),
                )
                for n, r in refs.items()
            }
            shapes_ok = all(
                tuple(_load_npy(d / f"{p.name}.npy", p.dtype).shape) == info.shape(p, sz)
                for p in info.params
            )
            res["dump"] = {
                "sizes": sz,
                "rc": rc,
                "rel": rels,
                "ok": rc == 0 and shapes_ok and all(v < TOL for v in rels.values()),
            }
        except Exception as e:
            res["dump"] = {
                "sizes": sz,
                "rc": rc,
                "ok": False,
                "error": f"{type(e).__name__}: {e}"[:300],
            }
        say(f"[harness] {t.label}: --dump {sizes_str(sz)} -> {res['dump']}")
    return res


def _last_json(log: str) -> dict | None:
    for line in reversed(log.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def sanitize(t: Target, info: KernelInfo, small: list[dict]) -> list[dict]:
    rows = []
    if shutil.which("compute-sanitizer") is None:
        return [{"tool": "compute-sanitizer", "ok": False, "summary": "not on PATH"}]
    exe = t.outdir / info.name
    for sz in [s for s in small if not info.failed_requires(s)]:
        for tool in ("memcheck", "racecheck", "synccheck"):
            cmd = [
                "compute-sanitizer",
                "--tool",
                tool,
                "--error-exitcode",
                "99",
                str(exe),
                *map(str, sz.values()),
                "--warmup",
                "0",
                "--iters",
                "1",
            ]
            # racecheck of a ping-pong kernel with one tile took 1-143 s on an H200 (session 13,
            # 18 runs, all clean): the mbarrier try_wait loops sleep while racecheck serializes warps
            rc, log, dt = run(cmd, timeout=300)
            lines = log.strip().splitlines()
            summ = [x for x in lines if "ERROR SUMMARY" in x or "RACECHECK SUMMARY" in x]
            summary = (
                (summ[-1] if summ else (lines[-1] if lines else ""))
                .replace("=========", "")
                .strip()
            )
            rows.append(
                {
                    "tool": tool,
                    "sizes": sz,
                    "rc": rc,
                    "ok": rc == 0,
                    "summary": summary[:120],
                    "secs": round(dt, 1),
                }
            )
            if rc:
                rows[-1]["log"] = "\n".join(lines[-60:])
            say(
                f"[sanitizer] {t.label} {tool:9s} {sizes_str(sz):>12s} rc={rc} {summary[:100]} ({dt:.1f}s)"
            )
    return rows


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def environment() -> dict:
    env: dict[str, Any] = {}
    rc, s, _ = run(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit",
            "--format=csv,noheader",
        ],
        timeout=60,
    )
    env["gpu"] = s.strip() if rc == 0 else f"nvidia-smi rc={rc}"
    rc, s, _ = run(["nvcc", "--version"], timeout=60)
    env["nvcc"] = s.strip().splitlines()[-1] if rc == 0 and s.strip() else "nvcc missing"
    rc, s, _ = run(
        [
            sys.executable,
            "-c",
            "import torch; print(torch.__version__, torch.version.cuda, "
            "torch.cuda.is_available() and torch.cuda.get_device_name())",
        ],
        timeout=120,
    )
    env["torch"] = s.strip()
    return env


def verdict(r: dict) -> tuple[bool, list[str]]:
    why = []
    if r.get("build", {}).get("rc"):
        return False, ["build failed"]
    if r.get("make", {}).get("rc"):
        return False, ["make failed"]
    ch = r.get("check") or {}
    if "error" in ch:
        why.append(ch["error"])
    bad = [sizes_str(c["sizes"]) for c in ch.get("checks", []) if not c.get("ok")]
    if bad:
        why.append("wrong at " + ",".join(bad[:6]))
    if [a["case"] for a in ch.get("api", []) if not a["ok"]]:
        why.append("api checks")
    if ch and not ch.get("bind_ok", True):
        why.append("bind()")
    h = r.get("harness", {})
    for k in ("run", "refuse", "dump"):
        if k in h and not h[k]["ok"]:
            why.append(f"harness {k}")
    for s in r.get("sanitizer", []):
        if not s["ok"]:
            why.append(f"{s['tool']} {sizes_str(s.get('sizes', {}))}")
    for v in r.get("make", {}).get("ptxas", {}).values():
        if v.get("spill_st") or v.get("spill_ld"):
            why.append("spills")  # reported, counted as a failure: the emitter promises none
            break
    return not why, why


def summary_table(targets: list[Target]) -> list[str]:
    L = [
        "",
        "== gpu_check summary (rel = ||out-ref||/||ref|| vs float32 reference; pass < 1e-2)",
        f"{'target':24s} {'build':>6s} {'regs/spill':>12s} {'checks':>8s} {'max rel':>8s} {'refused':>8s} "
        f"{'api':>5s} {'harness':>8s} {'TFLOP/s':>8s} {'memchk':>6s} {'racechk':>7s} {'syncchk':>7s}  verdict",
    ]
    for t in targets:
        r = t.result
        ok, why = verdict(r)
        b = (
            "ok"
            if not r.get("build", {}).get("rc") and not r.get("make", {}).get("rc", 1)
            else "FAIL"
        )
        ks = list(r.get("make", {}).get("ptxas", {}).values())
        regs = (
            f"{max(k.get('regs', 0) for k in ks)}/{max(k.get('spill_st', 0) + k.get('spill_ld', 0) for k in ks)}"
            if ks
            else "-"
        )
        ch = r.get("check") or {}
        comp = [c for c in ch.get("checks", []) if c.get("expect") == "compute" or "error" in c]
        refs = [c for c in ch.get("checks", []) if c.get("expect") == "refuse"]
        rels = [v for c in comp for v in c.get("rel", {}).values()]
        api = ch.get("api", [])
        h = r.get("harness", {})
        hok = [v["ok"] for k, v in h.items() if isinstance(v, dict) and "ok" in v]
        tfl = (h.get("run", {}).get("json") or {}).get("tflops")
        san = {s["tool"]: s for s in r.get("sanitizer", [])}
        sanc = lambda tool: (
            "-"
            if tool not in san
            else "ok"
            if all(s["ok"] for s in r["sanitizer"] if s["tool"] == tool)
            else "FAIL"
        )
        L.append(
            f"{t.label:24s} {b:>6s} {regs:>12s} "
            f"{(str(sum(c.get('ok', False) for c in comp)) + '/' + str(len(comp))) if comp else '-':>8s} "
            f"{(f'{max(rels):.1e}' if rels else '-'):>8s} "
            f"{(str(sum(c['ok'] for c in refs)) + '/' + str(len(refs))) if refs else '-':>8s} "
            f"{(str(sum(a['ok'] for a in api)) + '/' + str(len(api))) if api else '-':>5s} "
            f"{(str(sum(hok)) + '/' + str(len(hok))) if hok else '-':>8s} {(f'{tfl:.1f}' if tfl else '-'):>8s} "
            f"{sanc('memcheck'):>6s} {sanc('racecheck'):>7s} {sanc('synccheck'):>7s}  "
            + ("PASS" if ok else "FAIL: " + "; ".join(why)[:200])
        )
    return L


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--programs",
        default="gemm",
        help="comma-separated programs/<name>.cyp (default gemm), or tutorial_gemm and "
        "tutorial_attention (docs/tutorial/), gemm_at and chain_stage (tests/programs/)",
    )
    ap.add_argument(
        "--mappings",
        default="h100",
        help="comma-separated mapping names (mappings/<program>/<m>.yaml), .yaml paths, or "
        "'all' (every mapping of the program); '' for none",
    )
    ap.add_argument(
        "--dtypes",
        default="f16",
        help="comma-separated bindings of the programs' dtype parameter T (f16,bf16), or of "
        "several parameters joined by '+' (T=bf16+F8=f8e5m2); f16 targets are named "
        "<program>-<mapping>, others get -<binding> appended",
    )
    ap.add_argument(
        "--proto", default="", help="also check bench/proto's GEMM in the same layout: f16,bf16"
    )
    ap.add_argument(
        "--build",
        action="append",
        default=[],
        metavar="DIR",
        help="an already-built directory (program taken from its <name>.json); repeatable",
    )
    ap.add_argument(
        "--out", default=str(ROOT / "build" / "gpu_check"), help="where targets are built"
    )
    ap.add_argument("--no-sanitizer", action="store_true")
    ap.add_argument(
        "--timeout", type=float, default=240, help="seconds for one target's correctness child"
    )
    ap.add_argument("--jobs", type=int, default=4, help="targets built in parallel")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--program", help=argparse.SUPPRESS)
    ap.add_argument("--label", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.program, a.label)
        return 0

    t_start = time.time()
    out = Path(a.out)
    targets: list[Target] = []
    for prog in [p for p in a.programs.split(",") if p]:
        for m in expand_mappings(prog, a.mappings):
            for dt in [d for d in a.dtypes.split(",") if d]:
                tag = dt.replace("+", "-").replace("=", "")
                label = f"{prog}-{Path(m).stem}" + ("" if dt == "f16" else f"-{tag}")
                targets.append(Target(label, prog, out / label, mapping=m, dtype=dt))
    for dt in [d for d in a.proto.split(",") if d]:
        targets.append(Target(f"proto-{dt}", "gemm", out / f"proto-{dt}", proto_dtype=dt))
    for d in a.build:
        dp = Path(d).resolve()
        js = sorted(dp.glob("*.json"))
        name = js[0].stem if js else "gemm"
        targets.append(Target(f"{dp.name}", name, dp, prebuilt=True))
    if not targets:
        ap.error("nothing to check: give --programs/--mappings, --proto or --build")

    env = environment()
    say(f"[env] gpu: {env['gpu']} | {env['nvcc']} | torch {env['torch']}")
    say(f"[env] targets: {', '.join(t.label for t in targets)}")

    with cf.ThreadPoolExecutor(max(1, a.jobs)) as ex:
        for t, r in zip(targets, ex.map(build_target, targets)):
            t.result = r
    say(f"[build] all done in {time.time() - t_start:.0f}s")

    for t in targets:
        r = t.result
        if r.get("build", {}).get("rc") or r.get("make", {}).get("rc", 1):
            continue
        info = KernelInfo.load_json(t.outdir / f"{r['name']}.json")
        prog, check, small, run_sizes, _ = program_for(t.program, info)
        t0 = time.time()
        r["check"] = run_child(t, a.timeout)
        say(f"[{t.label}] correctness done in {time.time() - t0:.0f}s")
        try:
            r["harness"] = harness_checks(t, info, prog, check, small, run_sizes)
        except Exception as e:
            r["harness"] = {"run": {"ok": False, "error": f"{type(e).__name__}: {e}"}}
            say(f"[harness] {t.label}: {r['harness']['run']['error']}")
        if not a.no_sanitizer:
            r["sanitizer"] = sanitize(t, info, small)
        _write(env, targets, t_start)

    lines = summary_table(targets)
    for line in lines:
        say(line)
    say(f"[gpu_check] {time.time() - t_start:.0f}s")
    _write(env, targets, t_start)
    return 0 if all(verdict(t.result)[0] for t in targets) else 1


def _write(env: dict, targets: list[Target], t_start: float) -> None:
    if not OUT:
        return
    Path(OUT).mkdir(parents=True, exist_ok=True)
    data = {
        "env": env,
        "secs": round(time.time() - t_start, 1),
        "targets": {t.label: {**t.result, "verdict": verdict(t.result)} for t in targets},
    }
    (Path(OUT) / "gpu_check.json").write_text(json.dumps(data, indent=1, default=str))
    (Path(OUT) / "gpu_check.log").write_text("\n".join(_LOG) + "\n")


if __name__ == "__main__":
    sys.exit(main())
