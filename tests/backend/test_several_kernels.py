"""A program of several kernels builds to one ``.cu`` behind one launcher and one ABI
(issue #38): tests/programs/two_kernels.cyp (C = A·B, then D = C·E).  Each kernel's code is
in a namespace of its name with a ``check`` and a ``launch``; the program's
``two_kernels_launch`` checks both before it launches either, then launches them in order on
its stream.  The ABI is the entry task's: C read and written, the sum of both GEMMs' flops,
both kernels' requirements, and the kernels' names.  nvcc compiles it (sm_90a, no GPU); the
GPU check is ``two_kernels`` in bench/gpu_check.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cypressc.abi.info import KernelInfo
from cypressc.build import render_build
from tests.compiled import ptxas_report, spill_lines, tree

ROOT = Path(__file__).resolve().parents[2]
PROG = ROOT / "tests" / "programs" / "two_kernels.cyp"
MAP = ROOT / "tests" / "mappings" / "two_kernels.yaml"
KERNELS = ["two_kernels_gemm_block", "two_kernels_gemm_block_2"]


@pytest.fixture(scope="module")
def built():
    return render_build(tree(PROG, MAP))


def test_cuda_matches_golden(built, golden):
    golden.check("cu/two_kernels.cu", built.files["two_kernels.cu"])


def test_one_launcher_checks_every_kernel_before_launching_any(built):
    cu = built.files["two_kernels.cu"]
    body = cu[cu.index('extern "C" int two_kernels_launch(') :]
    calls = [ln.strip() for ln in body.splitlines() if "::" in ln]
    assert [c.split("((e = ")[1].split("(")[0] for c in calls] == [
        f"{KERNELS[0]}::check",
        f"{KERNELS[1]}::check",
        f"{KERNELS[0]}::launch",
        f"{KERNELS[1]}::launch",
    ]
    # each kernel gets the tensors it touches: kernel 1 writes C, kernel 2 reads it
    assert f"{KERNELS[0]}::launch(C, A, B, M, P, N, K, stream)" in body
    assert f"{KERNELS[1]}::launch(D, C, E, M, P, N, K, stream)" in body
    for k in KERNELS:
        assert f"namespace {k} {{" in cu and "__global__ void" in cu.split(f"namespace {k} {{")[1]


def test_the_abi_is_the_entry_tasks(built):
    info = json.loads(built.files["two_kernels.json"])
    assert info["name"] == "two_kernels" and info["kernels"] == KERNELS
    rw = {p["name"]: (p["reads"], p["writes"]) for p in info["params"]}
    assert list(rw) == ["D", "C", "A", "B", "E"]  # the entry task's order
    assert rw == {
        "D": (False, True),
        "C": (True, True),
        "A": (True, False),
        "B": (True, False),
        "E": (True, False),
    }
    ki = KernelInfo.from_dict(info)
    sizes = {"M": 3, "N": 5, "K": 7, "P": 11}
    assert ki.flops_at(sizes) == 2 * 3 * 5 * 7 + 2 * 3 * 11 * 5
    # the harness and the header declare the program's launcher alone
    assert "two_kernels_launch(" in built.files["two_kernels.h"]
    assert "gemm_block" not in built.files["two_kernels.h"]
    assert "two_kernels_launch(" in built.files["main.h"]


@pytest.mark.full  # make test compiles flash_attention_bwd's three below
def test_nvcc_compiles_both_kernels(built, tmp_path):
    cu = tmp_path / "two_kernels.cu"
    cu.write_text(built.files["two_kernels.cu"])
    report = ptxas_report(cu, tmp_path / "two_kernels.o")
    for k in KERNELS:
        assert f"{k}_kernel" in report, report[-2000:]
    assert "spill" not in report.replace("0 bytes spill", ""), report[-2000:]


FAB = ROOT / "tests" / "programs" / "flash_attention_bwd.cyp"
FAB_MAP = ROOT / "tests" / "mappings" / "flash_attention_bwd" / "h100_d128.yaml"


def test_the_attention_backward_compiles_without_spills(tmp_path):
    """The three kernels of the attention backward in one nvcc run (the emission of several
    kernels, the SIMT kernels, the in-loop register→shared staging, the MN-major A and the
    per-warpgroup B columns of dQ, its red.global.add in the main loop, the key-major causal
    mask): each entry function without spills, the main kernel in FlashAttention-3's 240
    registers."""
    r = render_build(tree(FAB, FAB_MAP))
    for name, text in r.files.items():  # the .cu and its copy of the user's header
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    report = ptxas_report(tmp_path / "flash_attention_bwd.cu", tmp_path / "k.o", host=True)
    entries = [ln for ln in report.splitlines() if "Compiling entry function" in ln]
    assert len(entries) == 3 and all(
        k in report for k in ("prep_block", "dkdv_block", "post_block")
    )
    spills = [ln for ln in report.splitlines() if "spill stores" in ln]
    assert len(spills) == 3 and all(" 0 bytes spill stores" in ln for ln in spills), spills
    assert r.kernels[1].consumer_registers == 240 and r.kernels[1].producer_registers == 24
    # LSE and Dsum (SHARED in the mapping): each step's 64-element piece TMA-copied by the
    # producer from the 16-byte boundary at or before it (68 elements, 272 bytes expected),
    # through a flattened map (no 16-byte row stride asked of M), read past that start
    cu = r.files["flash_attention_bwd.cu"]
    for v in ("LSE", "Dsum"):
        assert f"cypress::make_tma_map_1d(&tm_{v}_68, {v}, B * H * M, 68, 4)" in cu, v
        assert f"cypress::arrive_expect_tx(&full_{v}_smem[pipe.index], 272);" in cu, v
        assert cu.count(f"cypress::tma_load_1d(s_{v}_smem + pipe.index * {v}_smem_STAGE") == 1
        assert f"constexpr int {v}_smem_STAGE = 384;" in cu, v
    assert "M % 4" not in cu and "(LSE + size_t(" not in cu
    assert cu.count("// the piece, past the copy's aligned start") == 2


FAB_D64 = FAB_MAP.with_name("h100_d64.yaml")


@pytest.fixture(scope="module")
def d64():
    return render_build(tree(FAB, FAB_D64))


def test_at_head_dimension_64_each_warpgroup_multiplies_its_own_keys(d64):
    """dQ split by keys (h100_d64.yaml, variant dq_keys): warpgroup cw reads K rows and staged
    dSᵀ rows 64·cw.. (MN-major operands at a K row: the descriptor's start 64·cw rows of 128 B
    on) and adds its whole 64 x 64 dQ piece; no column split, which a 64-column K tile's one
    swizzle chunk could not give two warpgroups."""
    cu = d64.files["flash_attention_bwd.cu"]
    assert (
        "cypress::desc_mn_sw128(s_K_smem + ((cw * 64)) * 128 + kk * 16 * 128, K_smem_CHUNK);" in cu
    )
    assert "((cw * 64)) * 128 + kk * 16 * 128, dSs_CHUNK);" in cu
    assert (
        "cypress::wgmma<64, __half, cypress::Major::MN, cypress::Major::MN>(da, db, dQi_reg[0]"
        in cu
    )
    assert "if (!(D <= 64)) return cudaErrorInvalidValue;" in cu


@pytest.mark.full  # make test compiles the d128 kernels above; the GPU check builds this one
def test_at_head_dimension_64_the_kernels_compile_without_spills(d64, tmp_path):
    spills = spill_lines(d64.files, tmp_path, "flash_attention_bwd.cu")
    assert len(spills) == 3 and all(" 0 bytes spill stores" in ln for ln in spills), spills
