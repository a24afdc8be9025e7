"""Block programs without a main loop (issue #38's FlashAttention backward preprocess and
postprocess, tests/programs/attn_bwd_prep.cyp and attn_bwd_post.cyp): the IR passes and both
interpreters agree with NumPy, the backend lowers them to a SIMT kernel (direct loads into
accumulator-layout fragments, no TMA, no wgmma, no barrier) and nvcc compiles it for sm_90a."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from cypressc.backend import plan as P
from cypressc.backend.emit import emit_cuda
from cypressc.ir.check import random_inputs, run_module
from cypressc.ir.happens_before import check_happens_before
from cypressc.ir.schedule_check import check_schedules
from cypressc.ir.sync_verify import verify_sync
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]
SIZES = dict(B=2, H=1, M=70, D=12)  # a ragged second row block and a D below the tile's E
POST_SIZES = {**SIZES, "scale": 0.3}


def _f64(x):
    return np.asarray(x, dtype=np.float64)


CASES = {
    "prep": (
        lambda a: {"Dsum": (_f64(a["O"]) * _f64(a["dO"])).sum(-1), "dQacc": 0 * _f64(a["dQacc"])},
        ["Dsum", "dQacc"],
        SIZES,
    ),
    "post": (lambda a: {"dQ": 0.3 * _f64(a["dQacc"])}, ["dQ"], POST_SIZES),
}


def _prog(name: str) -> Path:
    return ROOT / f"tests/programs/attn_bwd_{name}.cyp"


def _map(name: str, mapping: str) -> Path:
    return ROOT / f"tests/mappings/attn_bwd_{name}/{mapping}.yaml"


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_passes_and_both_interpreters_match_numpy(name):
    ref, outs, sizes = CASES[name]
    snaps = dict(compiled.snapshots(_prog(name), _map(name, "small"), until="sync-insertion"))
    inputs = random_inputs(snaps["dependence-analysis"], sizes, seed=5)
    want = ref(inputs)
    for step in ("dependence-analysis", "warp-specialization", "sync-insertion"):
        got = run_module(snaps[step], sizes, inputs, outs, None)
        for o in outs:
            assert not np.isnan(got[o]).any(), f"{step}: {o} has unwritten elements"
            np.testing.assert_allclose(_f64(got[o]), want[o], rtol=1e-3, atol=1e-3)
    m = snaps["sync-insertion"]
    verify_sync(m)
    assert check_happens_before(m) is None
    v = check_schedules(m, snaps["warp-specialization"], sizes=sizes, schedules=4, value_every=2)
    assert v.finding is None, v.line(name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_matches_golden(name, golden):
    plan = compiled.snapshots(_prog(name), _map(name, "h100_d128"))[-1][1].kernel
    golden.check(f"cu/attn_bwd_{name}.cu", emit_cuda(plan))


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_snapshot_reads_back_and_the_next_pass_agrees(name):
    """The printed IR (`cypressc opt`'s input) of the new leaves, `mul` and `scale` (a leaf
    named like post's float parameter), reads back, and each pass gives the same on it."""
    from cypressc.ir.printer import print_module
    from cypressc.ir.reader import parse_module
    from cypressc.passes.manager import get_pass

    snaps = compiled.snapshots(_prog(name), _map(name, "small"), until="sync-insertion")
    for k, (step, m) in enumerate(snaps):
        text = print_module(m)
        back = parse_module(text, f"{name}-{step}.ir")
        assert print_module(back) == text, step
        if k + 1 < len(snaps):
            nxt, want = snaps[k + 1]
            got = get_pass(nxt).for_module(back).apply(back)
            assert print_module(got) == print_module(want), nxt


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_kernel_is_simt_only(name):
    plan = compiled.snapshots(_prog(name), _map(name, "h100_d128"))[-1][1].kernel
    stmts = plan.consumer.all()
    assert not plan.loads and not plan.body and not plan.barriers and not plan.maps
    assert not any(isinstance(s, P.Sync) for s in stmts)
    assert plan.grid and plan.consumers == 2 and not plan.warpspecialize
    kinds = [type(s).__name__ for s in stmts]
    if name == "prep":
        assert kinds == [
            "Fill",
            "StoreDirect",
            "LoadDirect",
            "LoadDirect",
            "Add",
            "RowOp",
            "RowOp",
            "RowStore",
        ]
    else:
        assert kinds == ["LoadDirect", "Scale", "StoreDirect"]
    cu = emit_cuda(plan)
    used = set(re.findall(r"cypress::(\w+)", cu))
    assert "SIMT kernel" in cu and used <= {
        "acc_coord",
        "align_smem",
        "load2",
        "pack2",
        "warpgroup_idx",
        "warpgroup_row_sum",
    }, used
    assert "__syncthreads" not in cu and "CUtensorMap" not in cu


def test_a_block_without_a_main_loop_under_warp_specialization_is_refused(mapping_variant):
    """No loads for a producer warpgroup: E050 at the block instance, naming the knob."""
    from click.testing import CliRunner

    from cypressc.cli import main

    m = mapping_variant(_map("post", "small"), "warpspecialize: false", "warpspecialize: true")
    r = CliRunner().invoke(main, ["check", str(_prog("post")), "-m", str(m)])
    assert r.exit_code != 0 and "error[E050]" in r.output, r.output
    assert "without a main loop under `warpspecialize: true`" in r.output
    assert "m.yaml:" in r.output and "Traceback" not in r.output


@pytest.mark.full  # make test compiles it inside tests/programs/flash_attention_bwd.cyp
@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_both_kernels_compile_for_sm90a_without_spills(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    # one kernel per head dimension and dtype, the two nvcc runs side by side (seconds each)
    cus = []
    for name, mapping, dt in (("prep", "h100_d128", {"T": "bf16"}), ("post", "h100_d64", {})):
        plan = compiled.snapshots(_prog(name), _map(name, mapping), dtypes=dt)[-1][1].kernel
        cus.append(tmp_path / f"{name}_{mapping}.cu")
        cus[-1].write_text(emit_cuda(plan))
    with ThreadPoolExecutor(2) as ex:
        logs = list(ex.map(lambda cu: compiled.ptxas_report(cu, cu.with_suffix(".o")), cus))
    for cu, log in zip(cus, logs):
        spills = [ln for ln in log.splitlines() if "spill stores" in ln]
        assert spills and all(" 0 bytes spill stores" in ln for ln in spills), (cu.name, spills)
        assert "warning" not in log.replace("ptxas info", ""), (cu.name, log[-2000:])


@pytest.fixture(scope="module")
def gc():
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        yield importlib.import_module("gpu_check")
    finally:
        sys.path.remove(str(ROOT / "bench"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_check_reference_and_sizes_fit(gc, name):
    """bench/gpu_check.py's float32 reference is what the program computes (the sequential
    interpreter, small mapping), and its sizes fit both builds' ABI, some refused."""
    torch = pytest.importorskip("torch")
    from cypressc.backend.emit import build_info
    from cypressc.backend.harness import RUNTIME_DIR
    from cypressc.runtime import KernelInfo

    program = f"attn_bwd_{name}"
    ref, outs, sizes = CASES[name]
    m = compiled.snapshots(_prog(name), _map(name, "small"), until="dependence-analysis")[-1][1]
    arrays = random_inputs(m, sizes, seed=2)
    got = run_module(m, sizes, arrays, outs, None)
    inputs = {k: torch.from_numpy(v.copy()) for k, v in arrays.items()}
    refs = gc.PROGRAMS[program].reference({**inputs, **sizes})
    assert sorted(refs) == sorted(outs)
    for o in outs:
        np.testing.assert_allclose(_f64(got[o]), refs[o].double().numpy(), rtol=1e-3, atol=1e-3)
    assert gc.program_path(program) == _prog(name)
    for mapping in ("h100_d64", "h100_d128"):
        assert gc.resolve_mapping(program, mapping) == _map(name, mapping)
        plan = compiled.snapshots(_prog(name), _map(name, mapping))[-1][1].kernel
        info = KernelInfo.from_dict(build_info(plan, str(RUNTIME_DIR)))
        prog, check, small, run, why = gc.program_for(program, info)
        assert prog is gc.PROGRAMS[program] and not why, why
        assert all(list(s) == [*info.sizes, *info.floats] for s in check + small + [run])
        assert any(info.failed_requires(s) for s in check)
        assert not info.failed_requires(run) and not any(info.failed_requires(s) for s in small)
