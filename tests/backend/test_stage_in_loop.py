"""A register fragment written into a shared tile inside the main loop and read by a later
wgmma of the same step (issue #38 slice S5: the attention backward's Pᵀ and dSᵀ staged for
dV += Pᵀ·dO and dK += dSᵀ·Q): tests/programs/chain_stage.cyp computes
O = T(Q[:, :64] @ K[:, :64]ᵀ)ᵀ @ V.

What is checked here: sync-insertion orders the threads' writes after the previous reader of
the stage retired (``wait_group 0``; the stage two steps back) and before the next wgmma
(``fence.proxy.async`` + a named barrier over the warpgroup), with one named barrier per step
(the write two steps later needs no barrier of its own: the previous step's barrier follows
its ``wait_group 0``, :func:`cypressc.passes.sync_prune.fold_far_barriers`); the CUDA converts
each accumulator pair into the stage buffer's swizzled chunk, where the MN-major descriptor of
the next wgmma reads it; ptxas compiles it with no spill and no injected wgmma wait.  The
values: tests/ir/test_passes_interp.py; the schedules: tests/ir/test_concurrent.py; the GPU:
bench/gpu_check.py ``chain_stage``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from cypressc.ir import interp as I
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.schedule_check import random_inputs, small_sizes
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]
PROG = "tests/programs/chain_stage.cyp"
MAP = "tests/mappings/chain_stage.yaml"


def _loop_sync() -> list:
    m = compiled.modules(PROG, MAP)["sync-insertion"]
    lp = next(o for o in m.body.ops if isinstance(o, N.For))
    return [o for o in lp.body.ops if isinstance(o, S.SYNC_OPS)]


def test_one_named_barrier_per_step_orders_the_stage_both_ways():
    bars = [o for o in _loop_sync() if isinstance(o, S.BarSync)]
    assert len(bars) == 1, bars
    kinds = {(e.src, e.dst, e.hazard, e.distance) for e in bars[0].edges}
    # the write -> wgmma read of this step, and the write two steps later (the stage's reuse)
    assert {(h, d) for _, _, h, d in kinds} == {("raw", 0), ("raw", 2), ("waw", 2), ("war", 2)}


def test_the_threads_write_the_stage_the_next_wgmma_reads():
    cu = compiled.rendered(PROG, MAP).files["chain_stage.cu"]
    loop = cu[cu.index("for (int kb = 0; kb < num_k; ++kb) {", cu.index("consumer warpgroups")) :]
    order = [
        "cypress::wait<0>();",
        "// %e7: copy %S_reg -> %P[(cw * 64).., 0..] (f32 -> f16, swizzled as a wgmma reads it)",
        "*reinterpret_cast<uint32_t*>(s_P + pipe.index * P_STAGE + (col / 64) * P_CHUNK + "
        "cypress::sw_offset<128>(row, col % 64)) = cypress::pack2<__half>(S_reg[0][2 * j], "
        "S_reg[0][2 * j + 1]);",
        "cypress::fence_proxy_async();  // %P ready (raw)",
        "cypress::named_sync(",
        "const uint64_t da = cypress::desc_mn_sw128(s_P + pipe.index * P_STAGE + "
        "(((cw * 64)) / 64) * P_CHUNK + kk * 16 * 128, P_CHUNK);",
        "cypress::wgmma<128, __half, cypress::Major::MN, cypress::Major::MN>(da, db, Oacc_reg[0]);",
    ]
    at = [loop.find(x) for x in order]
    assert -1 not in at and at == sorted(at), list(zip(order, at))
    step = loop[: loop.index("pipe.advance();")]
    assert step.count("cypress::named_sync(") == 1


@pytest.mark.full  # make test compiles it inside tests/programs/flash_attention_bwd.cyp
@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_ptxas_compiles_the_staging_kernel(tmp_path):
    cu = tmp_path / "chain_stage.cu"
    cu.write_text(compiled.rendered(PROG, MAP).files["chain_stage.cu"])
    stderr = compiled.ptxas_report(cu, tmp_path / "k.o")
    assert "C7517" not in stderr and "C7519" not in stderr, stderr[-2000:]
    spills = [ln for ln in stderr.splitlines() if "spill stores" in ln]
    assert spills and all(" 0 bytes spill stores" in ln for ln in spills), spills


def test_gpu_check_reference_is_what_the_program_computes(gc):
    """bench/gpu_check.py's float32 reference for ``chain_stage`` equals the sequential
    interpreter on the program's IR, and its table's sizes fit the kernel's ABI."""
    torch = pytest.importorskip("torch")
    assert gc.SOURCES["chain_stage"] == (PROG, MAP) and "chain_stage" not in gc.TUTORIALS
    m = compiled.modules(PROG, MAP)["warp-specialization"]
    sizes = small_sizes(m)
    arrays = random_inputs(m, sizes, seed=1)
    inputs = {k: torch.from_numpy(v.copy()) for k, v in arrays.items()}
    I.run(m, sizes, arrays, None)
    ref = gc.PROGRAMS["chain_stage"].reference(inputs)["O"].double()
    got = torch.from_numpy(arrays["O"].astype(np.float64))
    assert float((got - ref).norm() / ref.norm()) < 5e-3
    info = compiled.rendered(PROG, MAP).info
    _, check, small, run, why = gc.program_for("chain_stage", info)
    assert not why and all(list(s) == list(info.sizes) for s in check + small + [run])
    assert any(info.failed_requires(s) for s in check)
    assert not info.failed_requires(run) and not any(info.failed_requires(s) for s in small)
