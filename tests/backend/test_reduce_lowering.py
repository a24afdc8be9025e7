"""Reductions from registers (issue #38, slice S4): a ``reduces=`` argument whose private copy
the mapping keeps in registers (NONE above the threads, REGISTER at THREAD) is added into
global memory with ``red.global.v2.f32.add``, each thread its accumulator fragment.

Two programs: tests/programs/reduce_rows.cyp (split-K C += A·B: each block adds its tile
after the main loop) and tests/programs/reduce_steps.cyp (each main-loop step adds its
product into another row tile of C: FlashAttention-3's dQ).  Copy elimination forwards the
``copy.add`` out of the unmaterialized private copy into the store task's register copy
(passes/copy_reduce.py), inside the loop for reduce_steps; every snapshot equals NumPy,
schedules and happens-before are clean; a loop that writes one piece again each step is not
forwarded (teeth: that would add it once per step).  The Hopper builds compile with ptxas
(no spills).  A private copy in shared memory (tests/mappings/reduce_rows_smem.yaml) is staged
as f32 boxes and added with TMA reduce-adds.  The GPU check: ``reduce_rows`` (mappings
``h100`` and ``reduce_rows_smem``) and ``reduce_steps`` in bench/gpu_check.py."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from cypressc.diagnostics import CypressError
from cypressc.frontend import front_end
from cypressc.ir import nodes as N
from cypressc.ir.check import random_inputs, run_module
from cypressc.ir.happens_before import check_happens_before
from cypressc.ir.interp import LATEST_FIRST
from cypressc.ir.schedule_check import check_schedules
from cypressc.ir.subst import walk_ops
from cypressc.lang.kinds import Mem
from cypressc.pipeline import compile_module
from tests.compiled import ROOT, modules, ptxas_report, rendered, snapshots

ROWS = ("tests/programs/reduce_rows.cyp", "tests/mappings/reduce_rows_regs_small.yaml")
STEPS = ("tests/programs/reduce_steps.cyp", "tests/mappings/reduce_steps_small.yaml")
HOPPER = {
    "reduce_rows": ("tests/programs/reduce_rows.cyp", "tests/mappings/reduce_rows.yaml"),
    "reduce_steps": ("tests/programs/reduce_steps.cyp", "tests/mappings/reduce_steps.yaml"),
}
# ragged against the small tiles; several K slices add into each tile, several steps
SIZES = {ROWS: dict(M=40, N=24, K=40), STEPS: dict(M=72, N=24, K=40)}
SCHED = {ROWS: dict(M=64, N=32, K=64), STEPS: dict(M=128, N=32, K=64)}


def _snaps(case) -> dict[str, N.Module]:
    return modules(*case, until="sync-insertion")


def _reductions(m: N.Module) -> list[tuple[N.Copy, bool]]:
    """Each ``copy.add`` of ``m`` and whether a sequential loop holds it."""
    out = []

    def visit(b: N.Block, looped: bool) -> None:
        for o in b.ops:
            if isinstance(o, N.Copy) and o.reduce:
                out.append((o, looped))
            if isinstance(o, (N.For, N.PFor)):
                visit(o.body, looped or isinstance(o, N.For))

    visit(m.body, False)
    return out


@pytest.mark.parametrize("case", [ROWS, STEPS], ids=["rows", "steps"])
def test_the_reduction_is_forwarded_into_the_register_copy(case):
    m = _snaps(case)["copy-elimination"]
    allocs = {o.name: o for o in walk_ops(m.body) if isinstance(o, N.Alloc)}
    ((red, looped),) = _reductions(m)
    assert allocs[red.src.name].mem == Mem.REGISTER  # the store task's fragment, no private copy
    assert not any(a.mem == Mem.NONE and a.layout is not None for a in allocs.values())
    assert looped == (case is STEPS)  # reduce_steps adds once per main-loop step


@pytest.mark.parametrize("case", [ROWS, STEPS], ids=["rows", "steps"])
def test_every_pass_adds_the_product_into_c(case):
    snaps = _snaps(case)
    sizes = SIZES[case]
    inputs = random_inputs(snaps["dependence-analysis"], sizes, seed=3)
    f64 = np.float64
    want = inputs["C"].astype(f64) + inputs["A"].astype(f64) @ inputs["B"].astype(f64)
    for name, seed in (
        ("dependence-analysis", None),
        ("copy-elimination", LATEST_FIRST),
        ("sync-insertion", None),
        ("sync-insertion", 0),
    ):
        got = run_module(snaps[name], sizes, inputs, [], seed)["C"]
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 1e-5, f"{name} seed {seed}: relative error {err}"


@pytest.mark.parametrize("case", [ROWS, STEPS], ids=["rows", "steps"])
def test_schedules_and_happens_before_are_clean(case):
    snaps = _snaps(case)
    sync = snaps["sync-insertion"]
    v = check_schedules(sync, snaps["warp-specialization"], sizes=SCHED[case], schedules=3)
    assert v.finding is None, v.line(case[0])
    for seed in range(2):
        assert check_happens_before(sync, SCHED[case], seed=seed) is None


def test_teeth_a_loop_writing_one_piece_each_step_is_not_forwarded(tmp_path):
    """Sequentially, the private copy keeps the last step's product and the reduction adds it
    once; adding at every write would add every step's: the pattern must not fire, and the
    unmaterialized private copy is then E044."""
    src = (ROOT / STEPS[0]).read_text()
    old = '        launch("store", P, Cp[i, 0])\n'
    assert old in src
    prog = tmp_path / "reduce_steps.cyp"
    prog.write_text(src.replace(old, '        launch("store", P, Cp[0, 0])\n'))
    tree = front_end(prog, ROOT / STEPS[1], include_dirs=(ROOT / "programs",))
    with pytest.raises(CypressError) as ei:
        compile_module(tree, until="copy-elimination")
    assert ei.value.code == "E044", str(ei.value)


@pytest.mark.parametrize("name", sorted(HOPPER))
def test_hopper_build_adds_fragments_with_red(name):
    built = rendered(*HOPPER[name])
    cu = built.files[f"{name}.cu"]
    kernel = cu[cu.index("regs_alloc") : cu.index('extern "C"')]
    loop = kernel[kernel.index("for (int kb = 0;") : kernel.index("pipe.advance();\n      }")]
    red = "cypress::red_add2(C + size_t(r) * N + c, "
    # two copies of the loop: a tile inside C adds every pair untested, one at C's edge tests each
    assert kernel.count(red) == 2 and kernel.count("if (r < M && c < N)\n") == 1
    assert re.search(r"if \(\(.*\) \+ \d+ <= M && \(.*\) \+ \d+ <= N\) \{", kernel)
    assert (red in loop) == (name == "reduce_steps")  # in the main loop, or after it
    rw = {
        p["name"]: (p["reads"], p["writes"])
        for p in json.loads(built.files[f"{name}.json"])["params"]
    }
    assert rw["C"] == (True, True)  # the reduction adds into the value C holds
    launcher = cu[cu.index('extern "C"') :]
    assert "if (!(N % 2 == 0)) return cudaErrorInvalidValue;" in launcher
    assert "if (reinterpret_cast<uintptr_t>(C) & 7) return cudaErrorInvalidValue;" in launcher


@pytest.mark.full  # make test compiles red_add2 in a main loop in flash_attention_bwd.cyp's dQ
def test_the_in_loop_reduction_compiles(tmp_path):
    """The same statement after the loop and inside it: one ptxas run covers both."""
    cu = rendered(*HOPPER["reduce_steps"]).files["reduce_steps.cu"]
    (tmp_path / "reduce_steps.cu").write_text(cu)
    report = ptxas_report(tmp_path / "reduce_steps.cu", tmp_path / "reduce_steps.o")
    spills = [ln for ln in report.splitlines() if "spill stores" in ln]
    assert spills and all(" 0 bytes spill stores" in ln for ln in spills), spills


SMEM = ("tests/programs/reduce_rows.cyp", "tests/mappings/reduce_rows_smem.yaml")


def test_a_shared_private_copy_is_added_with_tma_reduce_adds(tmp_path):
    """The private copy in shared memory: the threads stage their f32 fragments in 64 x 32
    boxes (128-byte swizzled rows), then the first warpgroup's leader adds every warpgroup's
    boxes into C through an f32 TMA map, committed and waited for as a store."""
    built = rendered(*SMEM)
    cu = built.files["reduce_rows.cu"]
    kernel = cu[cu.index("regs_alloc") : cu.index('extern "C"')]
    assert (
        "*reinterpret_cast<float2*>(box + cypress::sw128_offset(rc.x, 2 * (rc.y % 32)))" in kernel
    )
    add = kernel[kernel.index("TMA reduce-add") :]
    assert add.index("if (leader && cw == 0) {") < add.index("for (int g = 0; g < 2; ++g) {")
    assert (
        "cypress::tma_reduce_add_2d(&tm_C_64x32, smem + C_smem_SMEM + g * C_smem_TILE + b * 8192, "
        "((b1 * 128)) + 32 * b, ((b0 * 128)) + g * 64);" in add
    )
    assert (
        add.index("tma_reduce_add_2d")
        < add.index("tma_store_commit")
        < add.index("tma_store_wait<0>")
    )
    launcher = cu[cu.index('extern "C"') :]
    assert "make_tma_map(&tm_C_64x32, C, false, N, M, 1, 32, 64, 2, 128, 4)" in launcher
    assert "if (!(N % 4 == 0)) return cudaErrorInvalidValue;" in launcher  # 16-byte f32 rows
    (tmp_path / "reduce_rows.cu").write_text(cu)
    report = ptxas_report(tmp_path / "reduce_rows.cu", tmp_path / "reduce_rows.o")
    spills = [ln for ln in report.splitlines() if "spill stores" in ln]
    assert spills and all(" 0 bytes spill stores" in ln for ln in spills), spills


@pytest.mark.parametrize("name", sorted(HOPPER))
def test_gpu_check_reference_and_sizes_fit(gc, name):
    """bench/gpu_check.py's float32 reference (C plus the product) is what the program
    computes, and its sizes fit the Hopper build's ABI (K = 0 and odd N refused)."""
    torch = pytest.importorskip("torch")
    from cypressc.backend.emit import build_info
    from cypressc.backend.harness import RUNTIME_DIR
    from cypressc.runtime import KernelInfo

    case = ROWS if name == "reduce_rows" else STEPS
    m = _snaps(case)["dependence-analysis"]
    arrays = random_inputs(m, SIZES[case], seed=5)
    inputs = {k: torch.from_numpy(v.copy()) for k, v in arrays.items()}
    got = run_module(m, SIZES[case], arrays, [], None)["C"]
    ref = gc.PROGRAMS[name].reference(inputs)["C"].double().numpy()
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=1e-4, atol=1e-4)
    assert gc.PROGRAMS[name].atomic and gc.SOURCES[name] == HOPPER[name]
    assert gc.program_path(name) == ROOT / HOPPER[name][0]
    assert gc.resolve_mapping(name, "h100") == ROOT / HOPPER[name][1]
    builds = [HOPPER[name]] + [SMEM] * (name == "reduce_rows")
    if name == "reduce_rows":  # `--mappings reduce_rows_smem`: the .yaml beside the h100 one
        assert gc.resolve_mapping(name, "reduce_rows_smem") == ROOT / SMEM[1]
    for build in builds:
        plan = snapshots(*build)[-1][1].kernel
        info = KernelInfo.from_dict(build_info(plan, str(RUNTIME_DIR)))
        _, check, small, run, why = gc.program_for(name, info)
        assert not why and all(list(s) == list(info.sizes) for s in check + small + [run])
        assert sum(bool(info.failed_requires(s)) for s in check) == 2
        assert not info.failed_requires(run) and not any(info.failed_requires(s) for s in small)


def test_gpu_check_compares_atomic_outputs_within_rounding(gc):
    torch = pytest.importorskip("torch")
    a = torch.tensor([1.0, 2.0, float("nan")])
    b = a + torch.tensor([1e-7, 0.0, 0.0])
    prog = gc.PROGRAMS["reduce_rows"]
    assert gc._same(torch, prog, a, b) and not gc._same(torch, gc.PROGRAMS["gemm"], a, b)
    assert not gc._same(torch, prog, a, a + 1e-3)
    assert not gc._same(torch, prog, a, torch.tensor([1.0, float("nan"), 3.0]))


class _FakeReduce:
    """Stands in for the reduce_rows kernel on CPU tensors: C += A @ B with a rounding
    difference from launch to launch (atomics add in any order)."""

    def __init__(self, info):
        self.info, self.name, self.launches = info, "reduce_rows", 0

    def __call__(self, C, A, B):
        self.launches += 1
        C += (A.float() @ B.float()) * (1 + 1e-7 * self.launches)


def test_gpu_check_logic_with_a_fake_reduction(gc, monkeypatch):
    """check_size starts C from random values, compares with C + A·B, restores C before the
    second launch and accepts a rounding difference between launches (not bitwise)."""
    torch = pytest.importorskip("torch")
    from cypressc.backend.emit import build_info
    from cypressc.backend.harness import RUNTIME_DIR
    from cypressc.runtime import KernelInfo

    monkeypatch.setattr(gc, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    plan = snapshots(*HOPPER["reduce_rows"])[-1][1].kernel
    info = KernelInfo.from_dict(build_info(plan, str(RUNTIME_DIR)))
    r = gc.check_size(torch, _FakeReduce(info), gc.PROGRAMS["reduce_rows"], dict(M=9, N=8, K=8))
    assert r["ok"] and r["det"] and r["rel"]["C"] < 1e-5, r
    bitwise = gc.check_size(torch, _FakeReduce(info), gc.PROGRAMS["gemm"], dict(M=9, N=8, K=8))
    assert not bitwise["det"]  # teeth: a program without atomics compares bitwise
