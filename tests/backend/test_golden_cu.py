"""Golden CUDA for every program the backend lowers, and an nvcc compile of each
(sm_90a; no GPU needed — CI has nvcc)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cypressc.build import render_build
from cypressc.backend.emit import emit_cuda
from cypressc.diagnostics import CypressError
from tests.compiled import snapshots, tree

ROOT = Path(__file__).resolve().parents[2]
# goldens of a program under another mapping or dtype: name -> (program, mapping, dtypes)
EXTRA = {
    "gemm_bf16": ("gemm", "h100", {"T": "bf16"}),
    # the Tensor-Core row sums: a shared table the threads fill (swizzled stores, proxy fence,
    # the barriers before the loop and at the end of the tile), an N = 8 K-major wgmma
    "gemm_reduction_tc": ("gemm_reduction", "h100_tc", {}),
}
PROGRAMS = sorted(p.stem for p in (ROOT / "programs").glob("*.cyp")) + sorted(EXTRA)
LOWERED = {
    "gemm",
    "batched_gemm",
    "dual_gemm",
    "gemm_reduction",
}  # must keep lowering: a refusal is a regression


def _plan(program: str):
    """programs/<program>.cyp under mappings/<program>/h100.yaml, or an :data:`EXTRA` one."""
    program, mapping, dtypes = EXTRA.get(program, (program, "h100", {}))
    try:
        return snapshots(
            program, ROOT / "tests/mappings/full" / program / f"{mapping}.yaml", dtypes=dtypes
        )[-1][1].kernel
    except CypressError as e:
        assert e.code == "E050" and program not in LOWERED, e
        pytest.skip(f"{program}: backend refuses it ({e.message}) — tracked as an open issue")


@pytest.mark.parametrize("program", PROGRAMS)
def test_cuda_matches_golden(program, golden):
    golden.check(f"cu/{program}.cu", emit_cuda(_plan(program)))


# the compile shares its nvcc command with `cypressc tune` (a build directory, `make
# lib<name>.so`, ptxas verbose: tests/tune/test_tune_programs.py), so the session's nvcc cache
# (tests/tools/nvcc) compiles each program's kernel once for both; one group runs them in turn
PTXAS_V = {"EXTRA_NVCCFLAGS": "-Xptxas -v"}


# gemm_fp8 and gemm_fp8_rowwise generate gemm_fp8_blockwise's FP8 wgmma, 1-byte TMA maps and
# vector reads (per row and per column) in a subset: under make test only the blockwise kernel
# goes through nvcc (here and in `cypressc tune`'s compile), make test-full compiles all three
FULL_ONLY_KERNELS = ("gemm_fp8", "gemm_fp8_rowwise")


def kernel_group(program: str):
    marks = [pytest.mark.xdist_group(f"kernel-{program}")]
    return pytest.param(program, marks=marks + [pytest.mark.full] * (program in FULL_ONLY_KERNELS))


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("program", [kernel_group(p) for p in PROGRAMS])
def test_golden_cuda_compiles_for_sm90a(program, tmp_path):
    golden = ROOT / "tests" / "golden" / "cu" / f"{program}.cu"
    if not golden.exists():
        pytest.skip(f"no golden CUDA for {program} (the backend refuses it)")
    name, mapping, dtypes = EXTRA.get(program, (program, "h100", {}))
    maps = ROOT / "tests/mappings/full" / name / f"{mapping}.yaml"
    r = render_build(tree(name, maps, dtypes), snapshots(name, maps, dtypes=dtypes))
    assert (
        r.files[f"{r.plan.name}.cu"] == golden.read_text()
    )  # the golden, as `cypressc build` writes it
    d = tmp_path / "k"
    for rel, text in r.files.items():  # headers included by a call-external under include/
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    env = {**os.environ, **PTXAS_V}
    if shutil.which("make"):  # as cypressc.tuner.build.make_library does
        out = subprocess.run(
            ["make", "-s", "-C", str(d), f"lib{r.plan.name}.so"],
            capture_output=True,
            text=True,
            env=env,
        )
    else:
        from cypressc.tuner.build import nvcc_command

        out = subprocess.run(
            nvcc_command(d, r.plan.name, f"lib{r.plan.name}.so", PTXAS_V["EXTRA_NVCCFLAGS"]),
            cwd=d,
            capture_output=True,
            text=True,
            env=env,
        )
    assert out.returncode == 0, out.stderr[-4000:]
    log = out.stdout + out.stderr
    assert "spill stores" in log
    for line in log.splitlines():
        if "spill stores" in line:
            assert " 0 bytes spill stores" in line, line
    assert "C7508" not in log, "setmaxnreg was ignored"
