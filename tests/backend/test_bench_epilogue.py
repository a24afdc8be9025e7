"""The CPU-checkable parts of issue #14's GPU scripts: bench/gpu_check.py's ``gemm_epilogue``
entry (its reference follows the build's ACT binding; the bias is a fresh random 1-D tensor of
its own dtype) and bench/epilogue.py's checking, floor ratios and table, run on CPU tensors
with stand-in kernels (the GPU runs are bench/gpu_all.sh's ``check`` and ``epilogue`` steps)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from cypressc import runtime as rt

torch = pytest.importorskip("torch")

BENCH = str(Path(__file__).resolve().parents[2] / "bench")


@pytest.fixture(scope="module")
def mods():
    sys.path.insert(0, BENCH)
    try:
        yield importlib.import_module("gpu_check"), importlib.import_module("epilogue")
    finally:
        sys.path.remove(BENCH)


def _tree(x):
    if isinstance(x, tuple):
        return {"op": x[0], "a": _tree(x[1]), "b": _tree(x[2])}
    return {"var": x} if isinstance(x, str) else {"const": x}


def epilogue_info(t: str = "f16", bias: str = "f32") -> rt.KernelInfo:
    """The ABI programs/gemm_epilogue.cyp is specified to have (issue #14)."""
    req = lambda d: {
        "c": f"{d} % 8 == 0",
        "tree": _tree(("==", ("%", d, 8), 0)),  # noqa: E731
        "why": f"{d} must be a multiple of 8",
    }
    return rt.KernelInfo.from_dict(
        {
            "name": "gemm_epilogue",
            "params": [
                {"name": "C", "dtype": t, "dims": ["M", "N"], "reads": False, "writes": True},
                {"name": "A", "dtype": t, "dims": ["M", "K"], "reads": True, "writes": False},
                {"name": "B", "dtype": t, "dims": ["K", "N"], "reads": True, "writes": False},
                {"name": "bias", "dtype": bias, "dims": ["N"], "reads": True, "writes": False},
            ],
            "sizes": ["M", "N", "K"],
            "flops": {
                "c": "2.0 * M * N * K",
                "tree": _tree(("*", ("*", ("*", 2.0, "M"), "N"), "K")),
            },
            "requires": [req("N"), req("K")],
            "runtime_include": "",
            "cuda_arch": "90a",
        }
    )


class WithBindings:
    """A KernelInfo carrying ``bindings`` (the field the build-info is getting)."""

    def __init__(self, info, bindings):
        self._info, self.bindings = info, bindings

    def __getattr__(self, name):
        return getattr(self._info, name)


class FakeEpilogue:
    """Stands in for a loaded gemm_epilogue on CPU tensors: the loader's checks (CPU reported as
    cuda:0), C = act(A @ B + bias) with a fixed act whatever the info says, and the launcher's
    refusal (rc 1, nothing written)."""

    def __init__(self, info, act="bias_gelu", scale=1.0):
        self.info, self.name, self.act, self.scale = info, "gemm_epilogue", act, scale

    def launch(self, *ts, check_requires=True):
        descs = [rt.describe(t) for t in ts]
        descs = [
            rt.TensorDesc(d.dtype, d.dtype_str, d.shape, ("cuda", 0), d.contiguous, d.ptr, d.numel)
            for d in descs
        ]
        sizes = rt.validate(self.info, descs, check_requires=check_requires)
        if self.info.failed_requires(sizes):
            return 1
        C, A, B, bias = ts
        x = A.float() @ B.float() + bias.float()
        y = (
            torch.nn.functional.gelu(x, approximate="tanh")
            if self.act == "bias_gelu"
            else torch.nn.functional.silu(x)
        )
        C.copy_((y * self.scale).to(C.dtype))
        return 0

    def __call__(self, *ts):
        assert self.launch(*ts) == 0

    def bind(self, *ts):
        return lambda: self(*ts)


@pytest.fixture
def on_cpu(mods, monkeypatch):
    gc, ep = mods
    monkeypatch.setattr(gc, "DEVICE", "cpu")
    monkeypatch.setattr(ep, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    return gc, ep


def test_gpu_check_epilogue_reference_follows_act(on_cpu):
    gc, _ = on_cpu
    prog = gc.PROGRAMS["gemm_epilogue"]
    info = epilogue_info()
    prog_, check, _, _, why = gc.program_for("gemm_epilogue", info)
    assert prog_ is prog and not why
    assert any(info.failed_requires(s) for s in check) and {"M": 64, "N": 64, "K": 0} in check
    gelu, silu = (
        WithBindings(info, {"ACT": "bias_gelu"}),
        WithBindings(info, {"T": "f16", "ACT": "bias_silu"}),
    )
    for sizes in (
        {"M": 129, "N": 264, "K": 72},
        {"M": 1, "N": 8, "K": 8},
        {"M": 64, "N": 64, "K": 0},
    ):
        for kinfo in (info, gelu):  # no bindings yet: GELU, the program's default
            r = gc.check_size(torch, FakeEpilogue(kinfo), prog, sizes)
            assert r["ok"] and r["rel"]["C"] < 1e-3, (sizes, r)
        r = gc.check_size(torch, FakeEpilogue(silu, "bias_silu"), prog, sizes)
        assert r["ok"], (sizes, r)
    # a kernel computing the other activation is caught (K = 0: C = act(bias) alone)
    for sizes in ({"M": 1, "N": 8, "K": 8}, {"M": 64, "N": 64, "K": 0}):
        assert gc.check_size(torch, FakeEpilogue(silu, "bias_gelu"), prog, sizes)["rel"]["C"] > 1e-2
        assert gc.check_size(torch, FakeEpilogue(gelu, "bias_silu"), prog, sizes)["rel"]["C"] > 1e-2
    ref = gc.check_size(torch, FakeEpilogue(info), prog, {"M": 129, "N": 257, "K": 72})
    assert ref["expect"] == "refuse" and ref["ok"] and ref["untouched"]
    with pytest.raises(ValueError, match="unknown ACT binding 'relu'"):
        prog.reference(
            gc.make_tensors(torch, info, {"M": 2, "N": 8, "K": 8}),
            WithBindings(info, {"ACT": "relu"}),
        )


def test_gpu_check_epilogue_bias_is_fresh_random(on_cpu):
    gc, _ = on_cpu
    for bias_dt, torch_dt in (
        ("f32", torch.float32),
        ("bf16", torch.bfloat16),
        ("f16", torch.float16),
    ):
        info = epilogue_info("bf16" if bias_dt == "bf16" else "f16", bias_dt)
        a = gc.make_tensors(torch, info, {"M": 4, "N": 256, "K": 8})
        b = gc.make_tensors(torch, info, {"M": 4, "N": 256, "K": 8})
        assert a["bias"].shape == (256,) and a["bias"].dtype == torch_dt
        # randn: (nearly) no zeros — a fresh draw may round one of 256 to 0 in 16 bits
        assert int((a["bias"] == 0).sum()) <= 2 and not torch.equal(a["bias"], b["bias"])
        assert 0.5 < float(a["bias"].float().std()) < 2.0  # randn, not a constant
        assert bool(torch.isnan(a["C"].float()).all())  # the output is poisoned


def test_gpu_check_reference_info_only_where_asked(mods):
    gc, _ = mods
    t = {"A": torch.randn(3, 8), "B": torch.randn(8, 5)}
    assert not gc.PROGRAMS["gemm"].ref_takes_info
    assert torch.equal(gc.PROGRAMS["gemm"].reference(t, object())["C"], t["A"] @ t["B"])
    assert gc.binding(None, "ACT", "x") == "x" and gc.binding(epilogue_info(), "ACT", "x") == "x"
    assert (
        gc.binding(WithBindings(epilogue_info(), {"ACT": "bias_silu"}), "ACT", "x") == "bias_silu"
    )


def test_bench_epilogue_rows_and_table(on_cpu, monkeypatch, wall_clock):
    _, ep = on_cpu
    monkeypatch.setattr(ep, "interleaved", wall_clock)

    class Args:
        rounds, reps = 2, 1

    info = epilogue_info("bf16", "f32")
    good = ep.Build(
        "epi-good", Path("/x/epi-good"), FakeEpilogue(info), "fused", "bf16", "f32", "bias_gelu"
    )
    wrong = ep.Build(
        "epi-silu",
        Path("/x/epi-silu"),
        FakeEpilogue(info, "bias_silu"),
        "fused",
        "bf16",
        "f32",
        "bias_gelu",
    )
    M, N, K = 64, 128, 32
    data = ep.make_data(torch, M, N, K, "bf16")
    assert data["A"].dtype == torch.bfloat16 and data["bias32"].shape == (N,)
    assert 0.5 < float(data["mm"].std()) < 2.0  # A is scaled: A @ B about N(0, 1)
    g = ep.run_group(torch, M, N, K, "bf16", "bias_gelu", data, [good, wrong], [], {}, Args)
    rows = g["rows"]
    assert (
        rows["cypressc epi-good [bias f32]"]["ok"] and "ms" in rows["cypressc epi-good [bias f32]"]
    )
    assert (
        not rows["cypressc epi-silu [bias f32]"]["ok"]
        and "ms" not in rows["cypressc epi-silu [bias f32]"]
    )
    assert rows["cypressc epi-silu [bias f32]"]["rel"] > 1e-2
    for peer in (
        "cuBLAS mm",
        "cuBLAS+eager",
        "cuBLASLt gelu",
    ):  # the eager peers compute the reference
        assert rows[peer]["ok"] and rows[peer]["rel"] < 1e-2, (peer, rows[peer])
    assert g["floor"].keys() == {"cypressc epi-good [bias f32]"}
    fl = g["floor"]["cypressc epi-good [bias f32]"]
    assert fl["fused_over_plain_gemm"] is None and fl["fused_over_eager"] == pytest.approx(
        rows["cypressc epi-good [bias f32]"]["ms"] / rows["cuBLAS+eager"]["ms"]
    )
    text = "\n".join(ep.table([g], "cpu", Args))
    assert (
        text.startswith("## GEMM + epilogue") and "| cypressc epi-silu [bias f32] | WRONG |" in text
    )
    assert "| 64 | 128 | 32 | bf16 | bias_gelu | cypressc epi-good [bias f32] | " in text


def test_bench_epilogue_build_checks(mods):
    _, ep = mods

    class K:
        def __init__(self, info):
            self.info = info

    info = epilogue_info("bf16", "f16")
    assert ep.check_build(K(info), "fused") == ("bf16", "f16", "bias_gelu")
    assert ep.check_build(K(WithBindings(info, {"ACT": "bias_silu"})), "fused") == (
        "bf16",
        "f16",
        "bias_silu",
    )
    with pytest.raises(ValueError, match="ACT binding 'tanh'"):
        ep.check_build(K(WithBindings(info, {"ACT": "tanh"})), "fused")
    with pytest.raises(ValueError, match=r"expected \['C', 'A', 'B'\]"):
        ep.check_build(K(info), "gemm")
    b = ep.Build("x", Path("/x"), None, "fused", "bf16")
    assert ep.dtypes_to_time("auto", [b]) == ["f16", "bf16"] and ep.dtypes_to_time("bf16", []) == [
        "bf16"
    ]
