"""The CPU-checkable parts of bench/attention.py (issue #11's FlashAttention-2 bench): the head
dimension inferred from a real build's ``requires``, the ABI check, the chunked float32
reference (O and LSE, grouped-query heads, the causal mask), and one group's checking, n/a
peers, timing, ratios and table, run on CPU tensors with stand-in kernels (the GPU run is
bench/gpu_all.sh's ``attention`` step)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc import runtime as rt
from cypressc.cli import main

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
BENCH = str(ROOT / "bench")
FA2 = ROOT / "programs" / "flash_attention2.cyp"


@pytest.fixture(scope="module")
def ba():
    sys.path.insert(0, BENCH)
    try:
        yield importlib.import_module("attention")
    finally:
        sys.path.remove(BENCH)


@pytest.fixture(scope="module")
def infos(tmp_path_factory):
    """Kernel infos of real builds: {"d64", "d128", "d64_bf16"}."""
    out = {}
    for key, mapping, extra in (
        ("d64", "h100_d64", []),
        ("d128", "h100_d128", []),
        ("d64_bf16", "h100_d64", ["--dtype", "T=bf16"]),
    ):
        d = tmp_path_factory.mktemp(key)
        yaml = ROOT / "tests/mappings/full" / "flash_attention2" / f"{mapping}.yaml"
        r = CliRunner().invoke(main, ["build", str(FA2), "-m", str(yaml), "-o", str(d), *extra])
        assert r.exit_code == 0, r.output
        out[key] = rt.KernelInfo.from_dict(json.loads((d / "flash_attention2.json").read_text()))
    return out


def naive(q, k, v, scale, causal):
    """softmax(q kᵀ·scale) v and the row log-sum-exp, dense, K/V repeated to the query heads."""
    G = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(G, 1), v.float().repeat_interleave(G, 1)
    s = q.float() @ k.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


class FakeFA2:
    """Stands in for a loaded flash_attention2 on CPU tensors: the runtime's argument checks and
    ``requires`` (CPU reported as cuda:0, KernelError on a refusal), then the dense attention;
    ``ignore_causal`` makes it wrong for causal calls."""

    def __init__(self, info, ignore_causal=False):
        self.info, self.ignore_causal = info, ignore_causal

    def __call__(self, O, LSE, Q, K, V, **kw):
        sizes, floats = rt.split_keywords(self.info, kw)
        descs = [rt.describe(t) for t in (O, LSE, Q, K, V)]
        descs = [dataclasses.replace(d, device=("cuda", 0)) for d in descs]
        rt.validate(self.info, descs, sizes)
        o, lse = naive(Q, K, V, floats["scale"], sizes["causal"] and not self.ignore_causal)
        O.copy_(o.to(O.dtype))
        LSE.copy_(lse)

    def bind(self, *ts, **kw):
        return lambda: self(*ts, **kw)

    def __repr__(self):
        return "<FakeFA2>"


def fake_triton(q, k, v, scale, causal, out=None, lse=None):
    o, ls = naive(q, k, v, scale, causal)
    out.copy_(o.to(out.dtype))
    lse.copy_(ls)
    return out, lse


fake_triton.best = lambda M, N, D, causal: "128x64 w4 s3"


def test_bench_attention_infers_d_and_checks_the_abi(ba, infos):
    assert ba.infer_d(infos["d64"]) == 64 and ba.infer_d(infos["d128"]) == 128
    assert ba.parse_build_spec("build/x:128") == ("build/x", 128)
    assert ba.parse_build_spec("build/x") == ("build/x", None)
    assert (ba.heads_for(128), ba.heads_for(64)) == (16, 32)

    class K:
        def __init__(self, info):
            self.info = info

    assert (
        ba.check_build(K(infos["d64"])) == "f16" and ba.check_build(K(infos["d64_bf16"])) == "bf16"
    )
    d64 = infos["d64"]
    narrow = dataclasses.replace(
        d64,
        requires=tuple(
            dataclasses.replace(r, tree={"op": "<=", "a": {"var": "D"}, "b": {"const": 32}})
            if "at most 64" in r.why
            else r
            for r in d64.requires
        ),
    )
    with pytest.raises(ValueError, match="refuses both D = 128 and D = 64: D=128: .*at most 64"):
        ba.infer_d(narrow)
    no_floats = dataclasses.replace(d64, floats=())
    with pytest.raises(ValueError, match="with a float 'scale'"):
        ba.check_build(K(no_floats))


@pytest.mark.parametrize("causal", [0, 1])
def test_bench_attention_reference_in_chunks(ba, monkeypatch, causal):
    monkeypatch.setattr(ba, "DEVICE", "cpu")
    monkeypatch.setattr(ba, "REF_CHUNK", 3 * 40 * 56)  # 3 heads a chunk: 2·6 heads split 3+3+3+3
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 6, 40, 64, generator=g).half()
    k = torch.randn(2, 3, 56, 64, generator=g).half()  # G = 2, N != M (top-left aligned mask)
    v = torch.randn(2, 3, 56, 64, generator=g).half()
    o, lse = ba.reference(torch, q, k, v, 0.125, bool(causal))
    ro, rl = naive(q, k, v, 0.125, causal)
    assert o.dtype == lse.dtype == torch.float32 and o.shape == q.shape and lse.shape == (2, 6, 40)
    torch.testing.assert_close(o, ro, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, rl, atol=1e-5, rtol=1e-5)
    other = naive(q, k, v, 0.125, 1 - causal)
    assert (lse - other[1]).abs().max() > 0.1  # the mask matters at these sizes


def test_bench_attention_group_rows_and_table(ba, infos, monkeypatch, wall_clock):
    monkeypatch.setattr(ba, "DEVICE", "cpu")
    monkeypatch.setattr(ba, "interleaved", wall_clock)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)

    class Args:
        rounds, reps, scale = 2, 1, None

    good = ba.Build("fa-good", Path("/x/fa-good"), FakeFA2(infos["d64"]), 64, "f16", "inferred")
    wrong = ba.Build(
        "fa-nocausal",
        Path("/x/fa-nocausal"),
        FakeFA2(infos["d64"], ignore_causal=True),
        64,
        "f16",
        "inferred",
    )
    data = ba.make_data(torch, 2, 4, 2, 96, 64, "f16")
    assert (
        data["q"].shape == (2, 4, 96, 64)
        and data["k"].shape == (2, 2, 96, 64)
        and data["q"].dtype == torch.float16
    )
    assert torch.equal(
        data["q"], ba.make_data(torch, 2, 4, 2, 96, 64, "f16")["q"]
    )  # one seed per (D, seq)
    g = ba.run_group(torch, [good, wrong], 96, 1, data, Args, fake_triton)
    rows = g["rows"]
    assert rows["cypressc fa-good"]["ok"] and "ms" in rows["cypressc fa-good"]
    assert rows["cypressc fa-good"]["lse_err"] < 1e-3
    assert not rows["cypressc fa-nocausal"]["ok"] and "ms" not in rows["cypressc fa-nocausal"]
    assert rows["cypressc fa-nocausal"]["rel"] > 1e-2
    assert rows["flash"]["ok"] and rows["flash"]["lse_err"] is None and "ms" in rows["flash"]
    assert "error" in rows["cudnn"] and "ms" not in rows["cudnn"]  # no cuDNN on the CPU: n/a
    assert rows["triton"]["ok"] and rows["triton"]["config"] == "128x64 w4 s3"
    assert g["scale"] == 0.125 and g["flop"] == 4.0 * 2 * 4 * 96 * 96 * 64 / 2
    g["builds"] = ba.build_rows(g, [good, wrong])
    rec = g["builds"][0]
    assert rec["flash/cypressc"] == pytest.approx(
        rows["flash"]["ms"] / rows["cypressc fa-good"]["ms"]
    )
    assert rec["cudnn/cypressc"] is None and g["builds"][1]["triton/cypressc"] is None
    assert "cudnn n/a" in ba.line(g, rec) and "triton: 128x64 w4 s3" in ba.line(g, rec)
    text = "\n".join(ba.table([g], "cpu", Args))
    assert text.startswith("## attention")
    assert "| fa-good | 64 | f16 | 96 | 2 | 4 | 2 | 1 | " in text
    assert "| fa-nocausal | 64 | f16 | 96 | 2 | 4 | 2 | 1 | WRONG |" in text

    # a head dimension above the mapping's E: the runtime refuses it, the row is FAILED
    data = ba.make_data(torch, 1, 2, 2, 64, 128, "f16")
    g = ba.run_group(torch, [good], 64, 0, data, Args, None)
    assert (
        "D must be at most 64" in g["rows"]["cypressc fa-good"]["error"]
        and "triton" not in g["rows"]
    )
    g["builds"] = ba.build_rows(g, [good])
    assert "| fa-good | 128 | f16 | 64 | 1 | 2 | 2 | 0 | FAILED |" in "\n".join(
        ba.table([g], "cpu", Args)
    )


def test_gpu_check_attention_reference_and_keywords(infos):
    """bench/gpu_check.py's flash_attention2 entry: its reference (O, LSE) against the dense
    one, GQA and causal, M != N; the keyword arguments a call needs (the float scale and the
    causal flag, which no tensor shape gives); its size table matches the kernel's names."""
    sys.path.insert(0, BENCH)
    try:
        gc = importlib.import_module("gpu_check")
    finally:
        sys.path.remove(BENCH)
    g = torch.Generator().manual_seed(3)
    q, k, v = (
        torch.randn(2, 4, 37, 16, generator=g),
        torch.randn(2, 2, 53, 16, generator=g),
        torch.randn(2, 2, 53, 16, generator=g),
    )
    for causal in (0, 1):
        got = gc._attention_ref({"Q": q, "K": k, "V": v, "scale": 0.3, "causal": causal})
        want_o, want_lse = naive(q, k, v, 0.3, causal)
        assert torch.allclose(got["O"], want_o, atol=1e-5) and torch.allclose(
            got["LSE"], want_lse, atol=1e-5
        )
    info = infos["d64"]
    sizes = gc.PROGRAMS["flash_attention2"].check[1]
    assert gc.scalar_args(info, sizes) == {"causal": sizes["causal"], "scale": sizes["scale"]}
    prog, check, *_, why = gc.program_for("flash_attention2", info)
    assert why == "" and check == gc.PROGRAMS["flash_attention2"].check
    # the table's D = 128 rows are refusal checks on a d = 64 build, so is H not a multiple of HK
    refused = [s for s in check if info.failed_requires(s)]
    assert {(s["D"], s["H"] % s["HK"]) for s in refused} == {(128, 0), (64, 1)}
