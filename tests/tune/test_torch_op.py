"""Kernels as PyTorch ops on a CPU-only machine: registration, the fake implementation under
FakeTensorMode, and ``torch.compile(fullgraph=True)`` tracing a module that calls the op
(the CUDA path runs in bench/tune_gpu.py on a GPU).  Needs a CPU build of PyTorch
(``make install`` brings torch==2.13.0)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import cypressc  # noqa: E402
import cypressc.torch as ctorch  # noqa: E402
from cypressc.backend.build import RUNTIME_DIR  # noqa: E402
from cypressc.backend.emit import build_info  # noqa: E402
from cypressc.cli import _front_end  # noqa: E402
from cypressc.passes.manager import compile_module  # noqa: E402
from cypressc.runtime import KernelError, KernelInfo  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.xdist_group("tune")


def info_of(program: str, mapping: str, **dtypes: str) -> KernelInfo:
    tree = _front_end(str(ROOT / "programs" / f"{program}.cyp"), str(ROOT / "mappings" / program / f"{mapping}.yaml"),
                      dtypes)
    return KernelInfo.from_dict(build_info(compile_module(tree)[-1][1].kernel, str(RUNTIME_DIR)))


def test_signature_and_fake_shapes():
    op = ctorch.register(info_of("gemm", "h100"), name="gemm_info")
    assert str(op.default._schema) == "cypressc::gemm_info(Tensor A, Tensor B) -> Tensor"
    with FakeTensorMode():
        C = op(torch.empty(300, 72, dtype=torch.float16), torch.empty(72, 520, dtype=torch.float16))
        assert C.shape == (300, 520) and C.dtype == torch.float16
        with pytest.raises(Exception, match="disagrees"):
            op(torch.empty(8, 16, dtype=torch.float16), torch.empty(24, 8, dtype=torch.float16))
        with pytest.raises(KernelError, match="must be torch.float16"):
            op(torch.empty(8, 16, dtype=torch.bfloat16), torch.empty(16, 8, dtype=torch.bfloat16))


def test_two_outputs_and_bf16():
    op = ctorch.register(info_of("gemm_reduction", "h100", T="bf16"), name="gemm_reduction_bf16")
    assert str(op.default._schema).endswith("(Tensor A, Tensor B) -> (Tensor, Tensor)")
    with FakeTensorMode():
        C, y = op(torch.empty(256, 64, dtype=torch.bfloat16), torch.empty(64, 128, dtype=torch.bfloat16))
    assert (C.shape, C.dtype, y.shape, y.dtype) == ((256, 128), torch.bfloat16, (256,), torch.float32)


class Block(torch.nn.Module):
    def forward(self, x, w1, w2):
        h = torch.ops.cypressc.gemm_info(x * 2, w1).relu()
        return torch.ops.cypressc.gemm_info(h, w2).float().sum(dim=1)


def test_torch_compile_traces_without_graph_breaks():
    ctorch.register(info_of("gemm", "h100"), name="gemm_info")
    args = [torch.empty(256, 64, dtype=torch.float16, device="meta"),
            torch.empty(64, 128, dtype=torch.float16, device="meta"),
            torch.empty(128, 32, dtype=torch.float16, device="meta")]
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(Block(), fullgraph=True, backend=backend)(*args)
    assert out.shape == (256,) and out.dtype == torch.float32
    assert len(graphs) == 1
    calls = [n for n in graphs[0].graph.nodes if n.op == "call_function" and "cypressc" in str(n.target)]
    assert len(calls) == 2
    explained = torch._dynamo.explain(Block())(*args)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    # AOT autograd traces the op through its fake implementation too
    torch._dynamo.reset()
    assert torch.compile(Block(), fullgraph=True, backend="aot_eager")(*args).shape == (256,)


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_compiled_kernel_as_op(tune_cache):
    kern = cypressc.compile(ROOT / "programs/gemm.cyp", ROOT / "mappings/gemm/h100_plain.yaml", dtype="f16")
    again = cypressc.compile(ROOT / "programs/gemm.cyp", ROOT / "mappings/gemm/h100_plain.yaml", dtype="f16")
    assert again.library == kern.library                       # the second one came from the cache
    op = ctorch.register(kern, name="gemm_plain")
    assert ctorch.register(kern, name="gemm_plain") is op
    with pytest.raises(ValueError, match="registered for another kernel"):
        ctorch.register(info_of("gemm", "h100"), name="gemm_plain")
    with pytest.raises(KernelError, match="runs on CUDA tensors only"):
        op(torch.randn(8, 16).half(), torch.randn(16, 8).half())
    with FakeTensorMode():
        assert op(torch.empty(8, 16, dtype=torch.float16), torch.empty(16, 8, dtype=torch.float16)).shape == (8, 8)
