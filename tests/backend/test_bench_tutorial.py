"""The CPU-checkable part of the tutorial's GPU check (issue #37, "a newcomer test"):
``bench/gpu_check.py --programs tutorial_gemm,tutorial_attention`` builds docs/tutorial's
programs and compares each kernel with a float32 PyTorch reference.  Here: that reference is
what the program means — the sequential interpreter on the program's IR (the user's C++ as
its NumPy twin, docs/tutorial/ops.py) computes the same values on the same inputs — and the
table's sizes fit each kernel's ABI (names, the harness's argument order, some refused)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cypressc.backend.emit import build_info
from cypressc.backend.harness import RUNTIME_DIR
from cypressc.ir import interp as I
from cypressc.ir.schedule_check import random_inputs, small_sizes, written_params
from cypressc.runtime import KernelInfo
from tests import compiled

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
BENCH = str(ROOT / "bench")
TUTORIAL = ["tutorial_gemm", "tutorial_attention"]


@pytest.fixture(scope="module")
def gc():
    sys.path.insert(0, BENCH)
    try:
        yield importlib.import_module("gpu_check")
    finally:
        sys.path.remove(BENCH)


def _snapshots(gc, program: str) -> dict:
    src, mapping = gc.SOURCES[program]
    return compiled.modules(src, mapping)


# a float per program that changes the result (alpha scales; a cap of 2 bites on scores of
# deviation about 1, and scale 0.5 moves them off the interpreter's default 0.75)
FLOATS = {"tutorial_gemm": {"alpha": -0.5}, "tutorial_attention": {"scale": 0.5, "cap": 2.0}}


@pytest.mark.parametrize("program", TUTORIAL)
def test_reference_is_what_the_program_computes(gc, program):
    m = _snapshots(gc, program)["warp-specialization"]  # the IR before synchronization
    sizes = {**small_sizes(m), **FLOATS[program]}
    arrays = random_inputs(m, sizes, seed=1)
    inputs = {k: torch.from_numpy(v.copy()) for k, v in arrays.items()}
    I.run(m, sizes, arrays, None)  # in program order
    refs = gc.PROGRAMS[program].reference({**inputs, **FLOATS[program]})
    assert list(refs) == written_params(m)
    for name, ref in refs.items():
        got = torch.from_numpy(arrays[name].astype(np.float64))
        rel = float((got - ref.double()).norm() / ref.double().norm())
        assert rel < 5e-3, (program, name, rel)  # T rounding of the output (and of P)


@pytest.mark.parametrize("program", TUTORIAL)
def test_table_sizes_fit_the_kernel(gc, program):
    src, mapping = gc.SOURCES[program]
    mod = _snapshots(gc, program)["cuda-lowering"]
    info = KernelInfo.from_dict(build_info(mod.kernel, str(RUNTIME_DIR)))
    prog, check, small, run, why = gc.program_for(program, info)
    assert prog is gc.PROGRAMS[program] and not why, why
    order = [*info.sizes, *info.floats]  # the harness takes the sizes, then the floats
    assert all(list(s) == order for s in check + small + [run]), order
    assert any(info.failed_requires(s) for s in check)  # refusal checks
    assert not info.failed_requires(run) and all(not info.failed_requires(s) for s in small)
    assert gc.program_path(program) == ROOT / src and gc.resolve_mapping(program, "h100") == (
        ROOT / mapping
    )


def test_gpu_check_runs_its_cpu_side():
    """The command line parses (the GPU run: see docs/tutorial.md §8)."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0 and "tutorial_gemm" in r.stdout, r.stderr


@pytest.mark.parametrize("program", TUTORIAL)
def test_gpu_check_finds_the_tutorial_snippet(gc, program):
    """The snippet gpu_check runs on the GPU is the block docs/tutorial.md shows for the program
    (tests/lang/test_tutorial.py runs the same block on meta tensors)."""
    code = gc.tutorial_snippet_code(program)
    assert "cypressc.compile(" in code and f'"{gc.SOURCES[program][0]}"' in code
    assert 'device="cuda"' in code
