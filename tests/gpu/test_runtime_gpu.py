"""cypressc.runtime on a real GPU: a built GEMM against torch.matmul (marked ``gpu``).

Skipped unless PyTorch sees a CUDA device and nvcc is on PATH.  Builds programs/gemm.cyp
with mappings/gemm/h100.yaml (``cypressc build`` + ``make``); where that build fails, it
falls back to bench/proto's hand-written GEMM in the same layout, so the loader is tested
either way (the test output says which).  bench/gpu_check.py is the thorough version.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gemm(tmp_path_factory):
    from cypressc import runtime

    d = tmp_path_factory.mktemp("gemm_gpu")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "cypressc.cli",
            "build",
            str(ROOT / "programs" / "gemm.cyp"),
            "-m",
            str(ROOT / "mappings" / "gemm" / "h100.yaml"),
            "-o",
            str(d),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_check import build_proto, make_target

    if p.returncode or not (d / "gemm.json").exists():
        print(
            f"cypressc build failed (rc={p.returncode}); testing bench/proto instead:\n{p.stderr[-800:]}"
        )
        build_proto(d, "f16")
    rc, log, _ = make_target(d, "gemm", "libgemm.so")
    assert rc == 0, log[-4000:]
    return runtime.load(d)


def _operands(M, N, K, dt=torch.float16):
    A = torch.randn(M, K, dtype=dt, device="cuda")
    B = torch.randn(K, N, dtype=dt, device="cuda")
    C = torch.full((M, N), float("nan"), dtype=dt, device="cuda")
    return C, A, B


@pytest.mark.parametrize(
    "M, N, K", [(256, 256, 256), (129, 264, 72), (1000, 1000, 1000), (1, 8, 8), (777, 1304, 64)]
)
def test_matches_torch(gemm, M, N, K):
    torch.backends.cuda.matmul.allow_tf32 = False
    C, A, B = _operands(M, N, K)
    gemm(C, A, B)
    torch.cuda.synchronize()
    ref = A.float() @ B.float()
    assert not torch.isnan(C).any()
    rel = float((C.float() - ref).norm() / ref.norm())
    assert rel < 1e-2


def test_refused_shape_leaves_output_untouched(gemm):
    from cypressc.runtime import KernelError

    C, A, B = _operands(129, 257, 72)
    with pytest.raises(KernelError, match="multiple of 8"):
        gemm(C, A, B)
    assert gemm.launch(C, A, B, check_requires=False) == 1  # cudaErrorInvalidValue
    torch.cuda.synchronize()
    assert torch.isnan(C).all()


def test_argument_errors(gemm):
    from cypressc.runtime import KernelError

    C, A, B = _operands(256, 256, 256)
    with pytest.raises(KernelError, match="expected dtype float16"):
        gemm(C, A.float(), B)
    with pytest.raises(KernelError, match="is on cpu"):
        gemm(C, A.cpu(), B)
    with pytest.raises(KernelError, match="not contiguous"):
        gemm(C, A.t().contiguous().t(), B)
    with pytest.raises(KernelError, match="16-byte aligned"):
        gemm(C, torch.empty(A.numel() + 1, dtype=A.dtype, device="cuda")[1:].view(A.shape), B)
    with pytest.raises(KernelError, match=r"dimension 0 \(K\) is 255, but K = 256"):
        gemm(C, A, B[:255].contiguous())
    assert torch.isnan(C).all()


def test_stream_and_bind(gemm):
    C, A, B = _operands(512, 512, 512)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # the operands were made on the default stream
    with torch.cuda.stream(s):
        gemm(C, A, B)  # the current stream
    gemm(C, A, B, stream=s)  # an explicit one
    s.synchronize()
    first = C.clone()
    run = gemm.bind(C, A, B)
    C.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    assert torch.equal(first, C)
    assert run.sizes == {"M": 512, "N": 512, "K": 512}
