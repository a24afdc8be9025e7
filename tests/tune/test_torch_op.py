"""Kernels as PyTorch ops on a CPU-only machine: registration, the fake implementation under
FakeTensorMode, and ``torch.compile(fullgraph=True)`` tracing a module that calls the op
(the CUDA path runs in bench/tune_gpu.py on a GPU).  Needs a CPU build of PyTorch
(``make install`` brings torch==2.13.0)."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import cypressc  # noqa: E402
import cypressc.torch as ctorch  # noqa: E402
from cypressc.backend.harness import RUNTIME_DIR  # noqa: E402
from cypressc.backend.emit import build_info  # noqa: E402
from cypressc.cli.common import load_program as _front_end  # noqa: E402
from cypressc.pipeline import compile_module  # noqa: E402
from cypressc.runtime import Kernel, KernelError, KernelInfo  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.xdist_group("tune")


@functools.cache
def info_of(program: str, mapping: str, **dtypes: str) -> KernelInfo:
    tree = _front_end(
        str(ROOT / "programs" / f"{program}.cyp"),
        str(ROOT / "tests/mappings/full" / program / f"{mapping}.yaml"),
        dtypes,
    )
    return KernelInfo.from_dict(build_info(compile_module(tree)[-1][1].kernel, str(RUNTIME_DIR)))


def test_signature_and_fake_shapes():
    op = ctorch.register(info_of("gemm", "h100"), name="gemm_info")
    assert str(op.default._schema) == "cypressc::gemm_info(Tensor A, Tensor B) -> Tensor"
    with FakeTensorMode():
        C = op(torch.empty(300, 72, dtype=torch.float16), torch.empty(72, 520, dtype=torch.float16))
        assert C.shape == (300, 520) and C.dtype == torch.float16
        with pytest.raises(
            KernelError, match=r"B\.shape\[0\] \(K\) is 24, but K = 16 from A\.shape\[1\]"
        ):
            op(torch.empty(8, 16, dtype=torch.float16), torch.empty(24, 8, dtype=torch.float16))
        with pytest.raises(KernelError, match="must be torch.float16"):
            op(torch.empty(8, 16, dtype=torch.bfloat16), torch.empty(16, 8, dtype=torch.bfloat16))


def test_fp8_operands_and_float_scales():
    """programs/gemm_fp8.cyp as an op: FP8 tensors in (torch.float8_e4m3fn), the per-tensor
    scales as floats, C in the bound output type; another FP8 format is refused by name."""
    op = ctorch.register(info_of("gemm_fp8", "h100"), name="gemm_fp8_info")
    assert str(op.default._schema) == (
        "cypressc::gemm_fp8_info(Tensor A, Tensor B, float scale_a, float scale_b) -> Tensor"
    )
    f8 = torch.float8_e4m3fn
    with FakeTensorMode():
        C = op(torch.empty(300, 64, dtype=f8), torch.empty(520, 64, dtype=f8), 0.5, 2.0)
        assert C.shape == (300, 520) and C.dtype == torch.bfloat16
        with pytest.raises(KernelError, match="must be torch.float8_e4m3fn"):
            e5 = torch.float8_e5m2
            op(torch.empty(8, 16, dtype=e5), torch.empty(8, 16, dtype=e5), 1.0, 1.0)


def test_two_outputs_and_bf16():
    op = ctorch.register(info_of("gemm_reduction", "h100", T="bf16"), name="gemm_reduction_bf16")
    assert str(op.default._schema).endswith("(Tensor A, Tensor B) -> (Tensor, Tensor)")
    with FakeTensorMode():
        C, y = op(
            torch.empty(256, 64, dtype=torch.bfloat16), torch.empty(64, 128, dtype=torch.bfloat16)
        )
    assert (C.shape, C.dtype, y.shape, y.dtype) == (
        (256, 128),
        torch.bfloat16,
        (256,),
        torch.float32,
    )


def f16(*shape, device="cpu", dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device=device)


# (A, B) calls of the gemm op that both implementations refuse, and what they say
BAD_CALLS = [
    (
        lambda: (f16(8, 16), f16(24, 8)),
        r"gemm: B\.shape\[0\] \(K\) is 24, but K = 16 from A\.shape\[1\]",
    ),
    (
        lambda: (f16(8, 16, device="meta"), f16(24, 8, device="meta")),
        r"B\.shape\[0\] \(K\) is 24, but K = 16",
    ),
    (
        lambda: (f16(8, 16, dtype=torch.bfloat16), f16(16, 8)),
        r"gemm: A must be torch\.float16, got torch\.bfloat16",
    ),
    (
        lambda: (f16(8, 16), f16(16, 8, 1)),
        r"gemm: B must have rank 2 \(f16\[K, N\]\), got shape \[16, 8, 1\]",
    ),
    (
        lambda: (f16(8, 16, device="meta"), f16(16, 8)),
        r"gemm: B is on cpu but A is on meta; all tensors must be on one device",
    ),
    (
        lambda: (f16(8, 16), f16(16, 8, device="meta")),
        r"gemm: B is on meta but A is on cpu; all tensors must be on one device",
    ),
]


@pytest.mark.parametrize(
    "call, message", BAD_CALLS, ids=["sizes", "sizes-meta", "dtype", "rank", "meta-cpu", "cpu-meta"]
)
def test_fake_and_cuda_implementations_refuse_alike(call, message):
    """The fake (meta) implementation raises what the CUDA one raises: the same class, the
    same message (both run on CPU tensors here: the CUDA one checks before any CUDA call)."""
    info = info_of("gemm", "h100")
    kernel = Kernel.__new__(Kernel)  # a Kernel without a library: never launched
    kernel.info, kernel.library = info, "libgemm.so"
    fake, cuda, _ = ctorch._implementations(kernel, info, "cypressc::gemm")
    got = []
    for impl in (fake, cuda):
        with pytest.raises(KernelError, match=message) as e:
            impl(*call())
        got.append((type(e.value), str(e.value)))
    assert got[0] == got[1]
    # and through the registered op: on meta tensors, under FakeTensorMode
    op = ctorch.register(info, name="gemm_info")
    with pytest.raises(KernelError, match=message) as e, FakeTensorMode(allow_non_fake_inputs=True):
        op(*call())
    assert str(e.value) == got[0][1]


def test_mixed_meta_and_cpu_tensors_are_refused_not_computed():
    """A meta tensor beside a CPU one used to dispatch to the fake implementation and return
    an uninitialised CPU tensor."""
    op = ctorch.register(info_of("gemm", "h100"), name="gemm_info")
    for A, B in [(f16(8, 16), f16(16, 8, device="meta")), (f16(8, 16, device="meta"), f16(16, 8))]:
        with pytest.raises(KernelError, match="all tensors must be on one device"):
            op(A, B)
    assert op(f16(8, 16, device="meta"), f16(16, 8, device="meta")).device.type == "meta"
    with pytest.raises(KernelError, match="runs on CUDA tensors only"):
        op(f16(8, 16), f16(16, 8))


@pytest.mark.parametrize(
    "kw, error, message",
    [
        ({"name": "a-b"}, ValueError, r"name 'a-b' is not an identifier"),
        ({"name": "a.b"}, ValueError, r"name 'a\.b' is not an identifier"),
        ({"name": ""}, ValueError, r"name '' is not an identifier"),
        ({"name": "1gemm"}, ValueError, r"not an identifier"),
        ({"name": "gemm x"}, ValueError, r"not an identifier"),
        ({"name": "gémm"}, ValueError, r"not an identifier"),
        ({"name": "def"}, ValueError, r"name 'def' is a keyword"),
        ({"name": "None"}, ValueError, r"is a keyword"),
        ({"name": "name"}, ValueError, r"name 'name' is taken by torch\.ops\.cypressc itself"),
        ({"name": "__class__"}, ValueError, r"taken by torch\.ops\.cypressc itself"),
        ({"namespace": "a.b"}, ValueError, r"namespace 'a\.b' is not an identifier"),
        ({"namespace": "a::b"}, ValueError, r"not an identifier"),
        ({"namespace": "aten"}, ValueError, r"namespace 'aten' is reserved by PyTorch"),
        ({"namespace": "prim"}, ValueError, r"reserved by PyTorch"),
        ({"namespace": "prims"}, ValueError, r"reserved by PyTorch"),
        ({"namespace": "_"}, ValueError, r"reserved by PyTorch"),
        ({"namespace": "_c10d_functional"}, ValueError, r"reserved by PyTorch"),
        ({"namespace": "higher_order"}, ValueError, r"reserved by PyTorch"),
        ({"namespace": "loaded_libraries"}, ValueError, r"reserved by PyTorch"),
        ({"namespace": "load_library"}, ValueError, r"reserved by PyTorch"),
        ({"namespace": "torchvision"}, ValueError, r"reserved by PyTorch"),
        ({"name": 3}, TypeError, r"name must be a str, got int"),
        ({"namespace": None}, TypeError, r"namespace must be a str, got NoneType"),
    ],
)
def test_register_refuses_bad_names_before_torch_sees_them(kw, error, message):
    before = dict(ctorch._REGISTERED)
    with pytest.raises(error, match=message):
        ctorch.register(info_of("gemm", "h100"), **kw)
    assert ctorch._REGISTERED == before


@pytest.mark.parametrize(
    "what", ["gemm", "programs/gemm.cyp", Path("build/gemm"), None, 3, {"name": "gemm"}]
)
def test_register_takes_a_kernel_or_its_info(what):
    with pytest.raises(
        TypeError, match=r"register takes a cypressc\.runtime\.Kernel or KernelInfo, got"
    ) as e:
        ctorch.register(what)
    if isinstance(what, (str, Path)):
        assert "pass cypressc.compile(PROGRAM, MAPPING) or cypressc.runtime.load(BUILD_DIR)" in str(
            e.value
        )


def test_an_op_another_library_defined_is_a_value_error():
    lib = torch.library.Library("cypressc_elsewhere", "FRAGMENT")
    lib.define("gemm(Tensor a) -> Tensor")
    with pytest.raises(ValueError, match=r"cannot define torch\.ops\.cypressc_elsewhere\.gemm"):
        ctorch.register(info_of("gemm", "h100"), namespace="cypressc_elsewhere")
    assert (
        ctorch.register(info_of("gemm", "h100"), name="gemm_here", namespace="cypressc_elsewhere")
        is torch.ops.cypressc_elsewhere.gemm_here
    )


class Block(torch.nn.Module):
    def forward(self, x, w1, w2):
        h = torch.ops.cypressc.gemm_info(x * 2, w1).relu()
        return torch.ops.cypressc.gemm_info(h, w2).float().sum(dim=1)


def test_torch_compile_traces_without_graph_breaks():
    ctorch.register(info_of("gemm", "h100"), name="gemm_info")
    args = [
        torch.empty(256, 64, dtype=torch.float16, device="meta"),
        torch.empty(64, 128, dtype=torch.float16, device="meta"),
        torch.empty(128, 32, dtype=torch.float16, device="meta"),
    ]
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(Block(), fullgraph=True, backend=backend)(*args)
    assert out.shape == (256,) and out.dtype == torch.float32
    assert len(graphs) == 1
    calls = [
        n for n in graphs[0].graph.nodes if n.op == "call_function" and "cypressc" in str(n.target)
    ]
    assert len(calls) == 2
    explained = torch._dynamo.explain(Block())(*args)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    # AOT autograd traces the op through its fake implementation too
    torch._dynamo.reset()
    assert torch.compile(Block(), fullgraph=True, backend="aot_eager")(*args).shape == (256,)


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_compiled_kernel_as_op(tune_cache):
    kern = cypressc.compile(
        ROOT / "programs/gemm.cyp", ROOT / "tests/mappings/full/gemm/h100_plain.yaml", dtype="f16"
    )
    again = cypressc.compile(
        ROOT / "programs/gemm.cyp", ROOT / "tests/mappings/full/gemm/h100_plain.yaml", dtype="f16"
    )
    assert again.library == kern.library  # the second one came from the cache
    op = ctorch.register(kern, name="gemm_plain")
    assert ctorch.register(kern, name="gemm_plain") is op
    with pytest.raises(ValueError, match="registered for another kernel"):
        ctorch.register(info_of("gemm", "h100"), name="gemm_plain")
    with pytest.raises(KernelError, match="runs on CUDA tensors only"):
        op(torch.randn(8, 16).half(), torch.randn(16, 8).half())
    with FakeTensorMode():
        assert op(
            torch.empty(8, 16, dtype=torch.float16), torch.empty(16, 8, dtype=torch.float16)
        ).shape == (8, 8)
