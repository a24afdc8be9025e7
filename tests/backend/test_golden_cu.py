"""Golden CUDA for every program the backend lowers, and an nvcc compile of each
(sm_90a; no GPU needed — CI has nvcc)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cypressc.backend.emit import emit_cuda
from cypressc.diagnostics import CypressError
from tests.compiled import snapshots

ROOT = Path(__file__).resolve().parents[2]
# goldens of a program under another mapping or dtype: name -> (program, mapping, dtypes)
EXTRA = {"gemm_bf16": ("gemm", "h100", {"T": "bf16"}),
         # the Tensor-Core row sums: a shared table the threads fill (swizzled stores, proxy fence,
         # the barriers before the loop and at the end of the tile), an N = 8 K-major wgmma
         "gemm_reduction_tc": ("gemm_reduction", "h100_tc", {})}
PROGRAMS = sorted(p.stem for p in (ROOT / "programs").glob("*.cyp")) + sorted(EXTRA)
RUNTIME = ROOT / "cypressc" / "backend" / "runtime"
LOWERED = {"gemm", "batched_gemm", "dual_gemm", "gemm_reduction"}  # must keep lowering: a refusal is a regression


def _plan(program: str):
    """programs/<program>.cyp under mappings/<program>/h100.yaml, or an :data:`EXTRA` one."""
    program, mapping, dtypes = EXTRA.get(program, (program, "h100", {}))
    try:
        return snapshots(program, ROOT / "mappings" / program / f"{mapping}.yaml", dtypes=dtypes)[-1][1].kernel
    except CypressError as e:
        assert e.code == "E050" and program not in LOWERED, e
        pytest.skip(f"{program}: backend refuses it ({e.message}) — tracked as an open issue")


@pytest.mark.parametrize("program", PROGRAMS)
def test_cuda_matches_golden(program, golden):
    golden.check(f"cu/{program}.cu", emit_cuda(_plan(program)))


def _cutlass_include() -> str:
    import cutlass_library

    return os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include")


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("program", PROGRAMS)
def test_golden_cuda_compiles_for_sm90a(program, tmp_path):
    golden = ROOT / "tests" / "golden" / "cu" / f"{program}.cu"
    if not golden.exists():
        pytest.skip(f"no golden CUDA for {program} (the backend refuses it)")
    # a build directory keeps copies of the program's headers under include/ (call-external)
    for line in golden.read_text().splitlines():
        if line.startswith('#include "include/'):
            name = line.split('"')[1].removeprefix("include/")
            (tmp_path / "include" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / "programs" / name, tmp_path / "include" / name)
    src = tmp_path / golden.name
    shutil.copy(golden, src)
    out = subprocess.run(
        ["nvcc", "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", f"-I{RUNTIME}",
         f"-I{_cutlass_include()}", "-Xcompiler", "-fPIC", "-shared", "-Xptxas", "-v",
         "-o", str(tmp_path / "lib.so"), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "spill stores" in out.stderr
    for line in out.stderr.splitlines():
        if "spill stores" in line:
            assert " 0 bytes spill stores" in line, line
    assert "C7508" not in out.stderr, "setmaxnreg was ignored"
