"""``cypressc.torch.flash_attention`` without a GPU (issue #38): forward and backward trace
through fake tensors as the two custom ops (what ``torch.compile(fullgraph=True)`` sees), the
fake and the real implementation refuse bad arguments with the same :class:`KernelError`, and
the programs the op launches take their tensors in the order it passes them.  The GPU half
(gradients, a training run against SDPA, compile, CUDA graphs) is
tests/gpu/test_flash_attention_op_gpu.py."""

from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from cypressc.lang.parser import parse_file  # noqa: E402
from cypressc.runtime import KernelError  # noqa: E402
from cypressc.torch import flash_attention  # noqa: E402
from cypressc.torch.attention import KERNELS, ROOT, head_bucket  # noqa: E402


def _qkv(dtype=torch.bfloat16, q=(2, 8, 100, 64), kv=(2, 2, 70, 64)):
    return (
        torch.randn(q, dtype=dtype).requires_grad_(),
        torch.randn(kv, dtype=dtype).requires_grad_(),
        torch.randn(kv, dtype=dtype).requires_grad_(),
    )


def test_forward_and_backward_trace_as_the_two_ops():
    def step(q, k, v):
        o = flash_attention(q, k, v, causal=True)
        return (o, *torch.autograd.grad(o.float().square().sum(), (q, k, v)))

    q, k, v = _qkv()
    g = make_fx(step, tracing_mode="fake")(q, k, v)
    ops = [str(n.target) for n in g.graph.nodes if "cypressc" in str(n.target)]
    assert ops == [
        "cypressc.flash_attention_forward.default",
        "cypressc.flash_attention_backward.default",
    ]
    with FakeTensorMode():
        q, k, v = _qkv(torch.float16, (1, 4, 33, 128), (1, 1, 65, 128))
        o = flash_attention(q, k, v)
        o.float().sum().backward()
        assert (o.shape, o.dtype) == ((1, 4, 33, 128), torch.float16)
        assert [t.grad.shape for t in (q, k, v)] == [q.shape, k.shape, k.shape]
        assert all(t.grad.dtype == torch.float16 for t in (q, k, v))


@pytest.mark.parametrize(
    "shapes, dtype, message",
    [
        (((1, 4, 8, 256), (1, 4, 8, 256)), torch.float16, "head dimension 256"),
        (((1, 6, 8, 64), (1, 4, 8, 64)), torch.float16, "6 query heads are not a multiple of 4"),
        (((1, 4, 8, 64), (1, 4, 8, 32)), torch.float16, "k's head dimension 32 is not q's 64"),
        (((4, 8, 64), (4, 8, 64)), torch.float16, r"q must be \[B, H, S, D\]"),
        (((1, 4, 8, 64), (1, 4, 8, 64)), torch.float32, "float16 or bfloat16"),
    ],
)
def test_fake_and_real_refuse_alike(shapes, dtype, message):
    def call():
        q = torch.empty(shapes[0], dtype=dtype)
        k = torch.empty(shapes[1], dtype=dtype)
        return flash_attention(q, k, k.clone())

    with pytest.raises(KernelError, match=message) as real:
        call()
    with FakeTensorMode(), pytest.raises(KernelError) as fake:
        call()
    assert str(real.value) == str(fake.value)


def test_cpu_tensors_are_refused():
    with pytest.raises(KernelError, match="runs on CUDA tensors only"):
        flash_attention(*_qkv())


def test_head_buckets():
    assert [head_bucket(d) for d in (1, 64, 65, 128)] == [64, 64, 128, 128]
    with pytest.raises(KernelError):
        head_bucket(129)


ORDER = {  # the tensors in the order the op passes them to each kernel
    "forward": ["O", "LSE", "Q", "K", "V"],
    "backward": ["dQ", "dK", "dV", "Dsum", "dQacc", "Q", "K", "V", "O", "dO", "LSE"],
}
ORDER["deterministic backward"] = ORDER["backward"]


@pytest.mark.parametrize("key", sorted(KERNELS), ids=lambda k: f"{k[0]}-d{k[1]}")
def test_the_programs_take_the_tensors_in_the_ops_order(key):
    import yaml

    program, mapping = (ROOT / p for p in KERNELS[key])
    m = yaml.safe_load(mapping.read_text())
    entry = next(i for i in m["instances"] if i["instance"] == m["entrypoint"])
    variant = entry.get("variant", entry["instance"])
    (v,) = [v for v in parse_file(str(program), {}).variants if variant in (v.name, v.task)]
    tensors = [p.name for p in v.params if hasattr(p.type, "rank")]
    assert tensors == ORDER[key[0]]
    assert [p.name for p in v.params if not hasattr(p.type, "rank")] == ["scale", "causal"]
