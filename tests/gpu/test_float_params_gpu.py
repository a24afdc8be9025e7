"""A ``float`` entry parameter on a real GPU (marked ``gpu``): tests/programs/gemm_alpha.cyp
(C = alpha + A @ B, the accumulator filled with ``alpha``) built with ``cypressc build`` and
called through :mod:`cypressc.runtime` — ``__call__``, ``launch``, ``bind`` — and as a
PyTorch op, each against alpha + A @ B in float32.  The ABI and the checks before a launch
are tested without a GPU in tests/backend/test_float_params.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kern(tmp_path_factory):
    from cypressc import runtime

    d = tmp_path_factory.mktemp("gemm_alpha_gpu") / "out"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "cypressc.cli",
            "build",
            str(ROOT / "tests/programs/gemm_alpha.cyp"),
            "-m",
            str(ROOT / "mappings/gemm/h100.yaml"),
            "-o",
            str(d),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    p = subprocess.run(["make", "-C", str(d), "libgemm_alpha.so"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-4000:]
    return runtime.load(d)


def _check(C, A, B, alpha: float) -> None:
    torch.cuda.synchronize()
    ref = alpha + A.float() @ B.float()
    assert not torch.isnan(C).any()
    rel = float((C.float() - ref).norm() / ref.norm())
    assert rel < 1e-2, (alpha, rel)


@pytest.mark.parametrize(
    "M, N, K, alpha", [(256, 256, 128, 0.5), (129, 264, 72, -3.25), (512, 512, 512, 0)]
)
def test_alpha_reaches_the_accumulator(kern, M, N, K, alpha):
    torch.backends.cuda.matmul.allow_tf32 = False
    A = torch.randn(M, K, dtype=torch.float16, device="cuda")
    B = torch.randn(K, N, dtype=torch.float16, device="cuda")
    C = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
    kern(C, A, B, alpha=alpha)
    _check(C, A, B, alpha)


def test_launch_bind_and_op(kern):
    import cypressc.torch as ctorch

    A = torch.randn(256, 64, dtype=torch.float16, device="cuda")
    B = torch.randn(64, 256, dtype=torch.float16, device="cuda")
    C = torch.full((256, 256), float("nan"), dtype=torch.float16, device="cuda")
    assert kern.launch(C, A, B, alpha=2.0) == 0
    _check(C, A, B, 2.0)
    run = kern.bind(C, A, B, alpha=-1.5)
    C.fill_(float("nan"))
    run()
    _check(C, A, B, -1.5)
    op = ctorch.register(kern, name="gemm_alpha_gpu")
    _check(op(A, B, 0.25), A, B, 0.25)
