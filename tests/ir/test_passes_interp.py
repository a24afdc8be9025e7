"""Every pass preserves each program's result: the interpreter runs the IR after each
pass on fresh random data, in program order, latest-first (the ready op that comes last in
program order runs first: a missing edge lets a later op overtake the one it needs) and
under random schedules that respect only the events (4, or 2 for attention; 20 and 4 under
``make test-full``), and compares with a NumPy reference in float64.
tests/ir/test_teeth.py shows that this set catches every removed edge that 20 random
schedules catch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cypressc.ir.check import random_inputs, run_module
from cypressc.ir.interp import LATEST_FIRST
from tests.budget import pick
from tests.compiled import snapshots

ROOT = Path(__file__).resolve().parents[2]
SCHEDULES = pick(4, 20)  # random ones, besides program order and latest-first
SCHEDULE_ORDERS = [None, LATEST_FIRST]


def _f64(x):
    return x.astype(np.float64)


def ref_gemm(a):
    return {"C": _f64(a["A"]) @ _f64(a["B"])}


def ref_batched(a):
    return {"C": np.einsum("lmk,lkn->lmn", _f64(a["A"]), _f64(a["B"]))}


def ref_dual(a):
    return {"D": _f64(a["A"]) @ _f64(a["B1"]) + _f64(a["A"]) @ _f64(a["B2"])}


def ref_reduction(a):
    return {"C": _f64(a["A"]) @ _f64(a["B"]), "y": _f64(a["A"]).sum(axis=1)}


def ref_chain(a):
    s = (_f64(a["Q"])[:, :64] @ _f64(a["K"])[:, :64].T).astype(
        a["Q"].dtype
    )  # the program rounds S to T
    return {"O": _f64(s) @ _f64(a["V"])}


def ref_epilogue(a):
    v = _f64(a["A"]) @ _f64(a["B"]) + _f64(a["bias"])  # bias broadcast along the rows
    return {"C": 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v**3)))}


def ref_softcap(a):
    s = _f64(a["Q"])[:, :64] @ _f64(a["K"])[:, :64].T
    s = (30.0 * np.tanh(s / 30.0)).astype(
        a["Q"].dtype
    )  # the user's softcap, then the program's rounding
    return {"O": _f64(s) @ _f64(a["V"])}


def ref_flash_attention2(sizes):
    """O and LSE of programs/flash_attention2.cyp at ``sizes`` (grouped-query, causal per the
    ``causal`` flag, top-left aligned), in float64."""

    def ref(a):
        g = sizes["H"] // sizes["HK"]
        q = _f64(a["Q"])
        k, v = (np.repeat(_f64(a[n]), g, axis=1) for n in "KV")
        s = q @ np.swapaxes(k, -1, -2) * sizes["scale"]
        if sizes["causal"]:
            s = np.where(np.arange(s.shape[-1]) <= np.arange(s.shape[-2])[:, None], s, -np.inf)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return {
            "O": p / p.sum(axis=-1, keepdims=True) @ v,
            "LSE": s.max(axis=-1) + np.log(p.sum(axis=-1)),
        }

    return ref


FA2_SIZES = dict(B=1, H=2, HK=1, M=40, N=48, D=12, causal=1, scale=0.3)


def ref_gemm_at(a):
    return {"C": _f64(a["A"]).T @ _f64(a["B"])}


def ref_chain_stage(a):
    s = (_f64(a["Q"])[:, :64] @ _f64(a["K"])[:, :64].T).astype(
        a["Q"].dtype
    )  # the program rounds S to T (into shared memory)
    return {"O": _f64(s).T @ _f64(a["V"])}


def ref_two_loops(a):
    return {"C": _f64(a["A"]) @ _f64(a["B"]) + _f64(a["D"]) @ _f64(a["E"])}


def ref_fp8_rowwise(a):
    """programs/gemm_fp8_rowwise.cyp: the FP8 inputs (already rounded to e4m3) multiplied in
    float64, scale_a per row and scale_b per column."""
    c = _f64(a["A"]) @ _f64(a["B"]).T
    return {"C": c * _f64(a["scale_a"])[:, None] * _f64(a["scale_b"])[None, :]}


# program -> (small mapping, sizes, reference, outputs); sizes leave partial tiles everywhere
CASES = {
    "gemm": ("tests/mappings/gemm_small.yaml", dict(M=50, N=24, K=40), ref_gemm, ["C"]),
    "batched_gemm": (
        "tests/mappings/batched_gemm_small.yaml",
        dict(L=2, M=40, N=24, K=24),
        ref_batched,
        ["C"],
    ),
    "dual_gemm": ("tests/mappings/dual_gemm_small.yaml", dict(M=50, N=24, K=40), ref_dual, ["D"]),
    "gemm_reduction": (
        "tests/mappings/gemm_reduction_small.yaml",
        dict(M=50, N=40, K=40),
        ref_reduction,
        ["C", "y"],
    ),
    # the same program's Tensor-Core row sums (variant gemm_reduction_block_tc: a shared tile of
    # 1/8 filled by the threads, an N = 8 wgmma per step, the row sum of the 8 equal columns)
    "programs/gemm_reduction.cyp": (
        "tests/mappings/gemm_reduction_tc_small.yaml",
        dict(M=50, N=40, K=40),
        ref_reduction,
        ["C", "y"],
    ),
    # a test program: the second wgmma's A operand is the first's result, converted in registers
    "tests/programs/chain_gemm.cyp": (
        "tests/mappings/chain_gemm_small.yaml",
        dict(M=40, E=12, D=64, N=24),
        ref_chain,
        ["O"],
    ),
    # the user's C++ epilogue (call-external), run through its NumPy reference (programs/ops/epilogue.py)
    "gemm_epilogue": (
        "tests/mappings/gemm_epilogue_small.yaml",
        dict(M=50, N=40, K=40),
        ref_epilogue,
        ["C"],
    ),
    # a test program: a user C++ leaf function between the two wgmmas of each step (-I programs)
    "tests/programs/chain_gemm_softcap.cyp": (
        "tests/mappings/chain_gemm_softcap_small.yaml",
        dict(M=40, E=12, D=64, N=24),
        ref_softcap,
        ["O"],
    ),
    # FlashAttention-2 (online softmax: row max, exp2, row sum, rescale; masks; LSE): two query
    # heads sharing one key/value head, causal, ragged M, N and D; fewer random schedules per
    # snapshot (one schedule of this case costs what 5 of a GEMM's do: under make test one
    # besides the two fixed orders, FlashAttention-3's the same program reordered)
    "flash_attention2": (
        "tests/mappings/flash_attention2_small.yaml",
        FA2_SIZES,
        ref_flash_attention2(FA2_SIZES),
        ["O", "LSE"],
        pick(1, 4),
    ),
    # FlashAttention-3: the same program with step k + 1's scores issued beside step k's O += P V
    # (the peeled first step, the carried P, the last O += P V after the loop)
    "flash_attention3": (
        "tests/mappings/flash_attention3_small.yaml",
        FA2_SIZES,
        ref_flash_attention2(FA2_SIZES),
        ["O", "LSE"],
        pick(1, 4),
    ),
    # a test program: C = Aᵀ @ B with A stored K x M, read MN-major (warpgroup_mma_at); two
    # warpgroups, each its 64 columns of A's tile (one block: fewer random schedules)
    "tests/programs/gemm_at.cyp": (
        "tests/mappings/gemm_at_small.yaml",
        dict(M=100, N=12, K=40),
        ref_gemm_at,
        ["C"],
        pick(1, 4),
    ),
    # a test program: the first wgmma's result converted into a shared tile inside the loop and
    # read back by the second as its A operand stored K x M (warpgroup_mma_at)
    "tests/programs/chain_stage.cyp": (
        "tests/mappings/chain_stage_small.yaml",
        dict(N=40, E=12, D=64, M=100),
        ref_chain_stage,
        ["O"],
        pick(1, 4),
    ),
    # FP8 operands (k32 wgmmas, the interpreter rounds A and B to e4m3) and a user C++ leaf
    # reading a per-row and a per-column vector (M != N: the two cannot be confused)
    "gemm_fp8_rowwise": (
        "tests/mappings/gemm_fp8_rowwise_small.yaml",
        dict(M=70, N=40, K=48),
        ref_fp8_rowwise,
        ["C"],
        pick(0, 4),  # program order and latest-first only: its schedule is gemm_epilogue's
    ),
    # a test program: two pipelined loops per block accumulating into one accumulator
    "tests/programs/gemm_two_loops.cyp": (
        "tests/mappings/gemm_two_loops_small.yaml",
        dict(M=40, N=24, K=24, J=16),
        ref_two_loops,
        ["C"],
    ),
}


def _compile(program: str, mapping: str):
    return snapshots(program, mapping, until="warp-specialization")


@pytest.mark.parametrize("program", sorted(CASES))
def test_every_pass_matches_numpy_under_random_schedules(program):
    mapping, sizes, ref, outs, *schedules = CASES[program]
    snaps = _compile(program, mapping)
    assert [n for n, _ in snaps] == [
        "dependence-analysis",
        "vectorization",
        "copy-elimination",
        "resource-allocation",
        "warp-specialization",
    ]
    inputs = random_inputs(snaps[0][1], sizes, seed=7)
    expected = ref(inputs)
    for name, m in snaps:
        for seed in SCHEDULE_ORDERS + list(range(schedules[0] if schedules else SCHEDULES)):
            got = run_module(m, sizes, inputs, outs, seed)
            for o in outs:
                assert not np.isnan(got[o]).any(), f"{name} seed {seed}: {o} has unwritten elements"
                err = np.linalg.norm(_f64(got[o]) - expected[o]) / np.linalg.norm(expected[o])
                assert err < 1e-2, f"{name} seed {seed}: {o} relative error {err}"


def test_bf16_binding_runs_in_bf16():
    """``--dtype T=bf16``: the interpreter stores A, B and C in bf16 (8-bit mantissa), so the
    result matches the f64 reference to bf16 precision but not to f16 precision."""
    mapping, sizes, ref, outs = CASES["gemm"]
    m = snapshots("gemm", mapping, until="warp-specialization", dtypes={"T": "bf16"})[-1][1]
    assert {p.name: p.dtype for p in m.params} == {"C": "bf16", "A": "bf16", "B": "bf16"}
    inputs = random_inputs(m, sizes, seed=3)
    for x in inputs.values():  # inputs are bf16 values: the low 16 bits of each f32 are zero
        assert not (x.astype(np.float32).view(np.uint32) & 0xFFFF).any()
    got = run_module(m, sizes, inputs, outs, 5)["C"]
    assert not (got.astype(np.float32).view(np.uint32) & 0xFFFF).any()
    err = np.linalg.norm(_f64(got) - ref(inputs)["C"]) / np.linalg.norm(ref(inputs)["C"])
    assert 1e-4 < err < 1e-2, err
