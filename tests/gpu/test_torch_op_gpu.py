"""The gemm kernel as a PyTorch op on a real GPU (issue #13; marked ``gpu``): eager against
torch.matmul, ``torch.compile(fullgraph=True)`` against eager, and a CUDA graph of 10 calls
replayed on new inputs.  Skipped unless PyTorch sees a CUDA device and nvcc is on PATH;
bench/tune_gpu.py runs the same checks on the tuned kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def _rel(x, ref) -> float:
    return float((x.float() - ref).norm() / ref.norm())


@pytest.fixture(scope="module")
def gemm_op(tmp_path_factory):
    import cypressc
    from cypressc.torch import register

    kernel = cypressc.compile(
        ROOT / "programs/gemm.cyp",
        ROOT / "mappings/gemm/h100.yaml",
        kernel_root=tmp_path_factory.mktemp("kernels"),
    )
    return register(kernel, name="gemm_gpu_test")


def test_eager_matches_torch(gemm_op):
    A = torch.randn(520, 264, dtype=torch.float16, device="cuda")
    B = torch.randn(264, 1000, dtype=torch.float16, device="cuda")
    C = gemm_op(A, B)
    assert C.shape == (520, 1000) and C.dtype == torch.float16 and not C.isnan().any()
    assert _rel(C, A.float() @ B.float()) < 1e-2


def test_compile_fullgraph_matches_eager(gemm_op):
    class M(torch.nn.Module):
        def forward(self, a, b):
            return torch.relu(gemm_op(a, b)) * 2

    A = torch.randn(256, 128, dtype=torch.float16, device="cuda")
    B = torch.randn(128, 512, dtype=torch.float16, device="cuda")
    eager = M()(A, B)
    compiled = torch.compile(M(), fullgraph=True)(A, B)
    assert torch.equal(compiled, eager)
    assert _rel(eager, torch.relu(A.float() @ B.float()) * 2) < 1e-2


def test_cuda_graph_of_ten_calls_replays(gemm_op):
    A = torch.randn(384, 256, dtype=torch.float16, device="cuda")
    Bs = [torch.randn(256, 256, dtype=torch.float16, device="cuda") for _ in range(10)]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        gemm_op(A, Bs[0])  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [gemm_op(A, B) for B in Bs]
    for _ in range(2):  # replay on new inputs, written in place
        A.copy_(torch.randn_like(A))
        for B in Bs:
            B.copy_(torch.randn_like(B))
        g.replay()
        torch.cuda.synchronize()
        for B, C in zip(Bs, outs):
            assert _rel(C, A.float() @ B.float()) < 1e-2


@pytest.mark.parametrize(
    "a, b",
    [(((8, 16), "cuda"), ((24, 8), "cuda")), (((8, 16), "cuda"), ((16, 8), "cpu"))],
    ids=["sizes", "cuda-cpu"],
)
def test_refusals_match_the_fake_implementation(gemm_op, a, b):
    """Disagreeing sizes and mixed devices: the CUDA implementation raises what the fake one
    raises under FakeTensorMode, class and message (issue #35)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from cypressc.runtime import KernelError

    def call():
        return gemm_op(
            *(torch.empty(shape, dtype=torch.float16, device=dev) for shape, dev in (a, b))
        )

    with pytest.raises(KernelError) as real:
        call()
    with FakeTensorMode(), pytest.raises(KernelError) as fake:
        call()
    assert str(real.value) == str(fake.value)
