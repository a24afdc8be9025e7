"""An A operand stored K x M, read MN-major from shared memory (issue #38 slice S5: the
attention backward's dV += Pᵀ·dO and dK += dSᵀ·Q): tests/programs/gemm_at.cyp computes
C = Aᵀ @ B with ``warpgroup_mma_at`` (cypressc/lib/hopper_at.cyp's ``mma_at``).

What is checked here: the lowering addresses each warpgroup's 64 columns of A's K x M stage
tile as a whole swizzle chunk and each k16 step 16 rows further (``desc_mn_sw``, as an
MN-major B), the instruction gets ``Major::MN`` for A, the FLOPs count M x N x K (A's global
shape swapped), and ptxas compiles the kernel with no spill and no injected wgmma wait.  The
values: tests/ir/test_passes_interp.py (every pass = NumPy) and tests/ir/test_concurrent.py
(clean schedules, teeth, happens-before); the GPU: bench/gpu_check.py ``gemm_at``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from cypressc.backend import lower_mma
from cypressc.ir import interp as I
from cypressc.ir import nodes as N
from cypressc.ir.schedule_check import random_inputs, small_sizes
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]
PROG = "tests/programs/gemm_at.cyp"
MAP = "tests/mappings/gemm_at.yaml"


def _cu() -> str:
    return compiled.rendered(PROG, MAP).files["gemm_at.cu"]


def test_each_warpgroup_reads_its_chunk_of_a_mn_major():
    cu = _cu()
    assert "// %e5: warpgroup_mma, 4 k16 step(s), A MN-major" in cu
    # warpgroup cw's 64 columns are chunk cw of the 128-column tile; k16 step kk is 16 rows down
    assert (
        "const uint64_t da = cypress::desc_mn_sw128(s_A_smem + pipe.index * A_smem_STAGE + "
        "(((cw * 64)) / 64) * A_smem_CHUNK + kk * 16 * 128, A_smem_CHUNK);"
    ) in cu
    assert (
        "cypress::wgmma<256, __half, cypress::Major::MN, cypress::Major::MN>(da, db, Cacc_reg[0]);"
        in cu
    )
    assert "desc_k_sw" not in cu
    # A's TMA boxes: 64 K-rows x 64 M-columns at (M, K) = (block's columns + 64 j, k tile)
    assert "&tm_A_64x64, &full_A_smem_B_smem[pipe.index], (b0 * 128) + 64 * j, (kb * 64));" in cu


def test_flops_count_a_as_m_by_k():
    info = compiled.rendered(PROG, MAP).info
    assert info.flops_at({"M": 3, "N": 5, "K": 7}) == 2.0 * 3 * 5 * 7


def test_a_chunk_start_must_be_provable():
    i, c = N.IVar("cw"), N.IConst
    assert lower_mma._multiple(N.IBin("*", i, c(64)), 64)
    assert lower_mma._multiple(N.IBin("+", N.IBin("*", c(128), i), c(64)), 32)
    assert not lower_mma._multiple(N.IBin("*", i, c(32)), 64)
    assert not lower_mma._multiple(N.IBin("/", N.IBin("*", i, c(128)), c(2)), 64)


@pytest.mark.full  # make test compiles it inside tests/programs/flash_attention_bwd.cyp
@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_ptxas_compiles_the_mn_major_a_kernel(tmp_path):
    cu = tmp_path / "gemm_at.cu"
    cu.write_text(_cu())
    stderr = compiled.ptxas_report(cu, tmp_path / "k.o")
    assert "C7517" not in stderr and "C7519" not in stderr, stderr[-2000:]
    spills = [ln for ln in stderr.splitlines() if "spill stores" in ln]
    assert spills and all(" 0 bytes spill stores" in ln for ln in spills), spills


def test_gpu_check_reference_is_what_the_program_computes(gc):
    """bench/gpu_check.py's float32 reference for ``gemm_at`` equals the sequential interpreter
    on the program's IR, and its table's sizes fit the kernel's ABI (some refused)."""
    torch = pytest.importorskip("torch")
    assert gc.SOURCES["gemm_at"] == (PROG, MAP) and "gemm_at" not in gc.TUTORIALS
    m = compiled.modules(PROG, MAP)["warp-specialization"]
    sizes = small_sizes(m)
    arrays = random_inputs(m, sizes, seed=1)
    inputs = {k: torch.from_numpy(v.copy()) for k, v in arrays.items()}
    I.run(m, sizes, arrays, None)
    ref = gc.PROGRAMS["gemm_at"].reference(inputs)["C"].double()
    got = torch.from_numpy(arrays["C"].astype(np.float64))
    assert float((got - ref).norm() / ref.norm()) < 5e-3
    info = compiled.rendered(PROG, MAP).info
    _, check, small, run, why = gc.program_for("gemm_at", info)
    assert not why and all(list(s) == list(info.sizes) for s in check + small + [run])
    assert sum(bool(info.failed_requires(s)) for s in check) == 2
    assert not info.failed_requires(run) and not any(info.failed_requires(s) for s in small)
    assert gc.program_path("gemm_at") == ROOT / PROG
    assert gc.resolve_mapping("gemm_at", "h100") == ROOT / MAP
