"""``float`` entry parameters from ``Module.floats`` to the user: the kernel and launcher
signatures, the ABI (``"floats"`` in ``<name>.json``, :class:`KernelInfo`), the Python
runtime's keyword checks and ctypes argument types, the host harness's positional float, the
PyTorch op schema and ``cypressc tune --float``.

tests/programs/gemm_alpha.cyp is programs/gemm.cyp with the accumulator started at
``alpha: float`` (``fill(C, alpha)`` at the leaf), so C = alpha + A @ B.  No GPU needed: nvcc
compiles the build directory (skipped where it is missing), the runtime's checks run on CPU
tensors, and the harness reports its missing GPU; where a GPU is visible the harness's dump
is checked against alpha + A @ B (tests/gpu/test_float_params_gpu.py runs the loaded kernel).
"""

from __future__ import annotations

import ctypes
import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cypressc import runtime as rt
from cypressc.backend.harness import RUNTIME_DIR
from cypressc.build import render_build
from cypressc.backend.emit import build_info
from cypressc.cli import main
from cypressc.cli.common import load_program as _front_end
from cypressc.pipeline import compile_module

ROOT = Path(__file__).resolve().parents[2]
ALPHA = ROOT / "tests" / "programs" / "gemm_alpha.cyp"
GEMM = ROOT / "programs" / "gemm.cyp"
H100 = ROOT / "tests/mappings/full" / "gemm" / "h100.yaml"

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
# one worker builds gemm_alpha (the module's `out`) once: split over two, each built it
pytestmark = pytest.mark.xdist_group("gemm_alpha")


@pytest.fixture(scope="module")
def rendered():
    """The build of gemm_alpha, in memory."""
    return render_build(_front_end(str(ALPHA), str(H100)))


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    """``cypressc build`` of gemm_alpha into a fresh directory (nothing made yet)."""
    d = tmp_path_factory.mktemp("gemm_alpha") / "out"
    r = CliRunner().invoke(main, ["build", str(ALPHA), "-m", str(H100), "-o", str(d)])
    assert r.exit_code == 0, r.output
    assert r.output.rstrip().endswith(f"{d}/gemm_alpha 4096 4096 4096 1.0"), (
        r.output
    )  # the suggested run
    return d


def _made(d: Path) -> Path:
    """``make`` both targets (a no-op once built)."""
    r = subprocess.run(["make", "-C", str(d), "-j2"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return d


# --------------------------------------------------------------------------------------------
# The kernel, the launcher and the ABI
# --------------------------------------------------------------------------------------------


def test_kernel_and_launcher_take_the_float_after_the_sizes(rendered):
    cu, h = rendered.files["gemm_alpha.cu"], rendered.files["gemm_alpha.h"]
    sig = (
        'extern "C" int gemm_alpha_launch(void* C, const void* A, const void* B, int64_t M, int64_t N, '
        "int64_t K, float alpha, cudaStream_t stream)"
    )
    assert sig + " {" in cu and sig + ";" in h
    assert "__half* __restrict__ C, int M, int N, int K, float alpha) {" in cu
    assert "static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha);" in cu
    assert "Cacc_reg[0][i] = alpha;" in cu  # the leaf's scalar operand is the argument
    assert (
        "alpha <" not in cu and "alpha)) return" not in cu
    )  # the launcher does not check the value
    assert rendered.plan.floats == ["alpha"] and rendered.plan.sizes == ["M", "N", "K"]


def test_info_lists_the_floats_and_round_trips(rendered):
    info = json.loads(rendered.files["gemm_alpha.json"])
    assert info["floats"] == ["alpha"] and info["sizes"] == ["M", "N", "K"]
    ki = rt.KernelInfo.from_dict(info)
    assert ki.floats == ("alpha",)
    assert ki.to_dict() == info and list(ki.to_dict()) == list(info)  # same keys, same order


def test_a_program_without_floats_has_no_floats_key():
    info = build_info(
        compile_module(_front_end(str(GEMM), str(H100)))[-1][1].kernel, str(RUNTIME_DIR)
    )
    assert "floats" not in info
    ki = rt.KernelInfo.from_dict(info)
    assert ki.floats == () and ki.to_dict() == info


@pytest.mark.parametrize(
    "floats, message",
    [
        ("alpha", "'floats' must be a list of names, got 'alpha'"),
        (["1alpha"], "float '1alpha' is not a C identifier"),
        (["cyp_alpha"], "reserved prefix cyp_"),
        ([0.5], "float 0.5 is not a C identifier"),
        (["alpha", "alpha"], "float names must be distinct"),
        (["K"], "float names must be distinct from each other and from the param and size names"),
        (["A"], "float names must be distinct from each other and from the param and size names"),
    ],
)
def test_info_floats_are_validated(rendered, floats, message):
    info = json.loads(rendered.files["gemm_alpha.json"])
    info["floats"] = floats
    with pytest.raises(ValueError) as e:
        rt.KernelInfo.from_dict(info)
    assert message in str(e.value)


# --------------------------------------------------------------------------------------------
# The runtime's keywords (pure Python)
# --------------------------------------------------------------------------------------------


def test_keywords_split_into_sizes_and_floats(rendered):
    ki = rt.KernelInfo.from_dict(json.loads(rendered.files["gemm_alpha.json"]))
    assert rt.split_keywords(ki, {"alpha": 0.125, "M": 64}) == ({"M": 64}, {"alpha": 0.125})
    sizes, floats = rt.split_keywords(ki, {"alpha": 2})
    assert floats == {"alpha": 2.0} and type(floats["alpha"]) is float
    assert rt.split_keywords(ki, {"alpha": np.float32(0.5)})[1] == {"alpha": 0.5}
    assert math.isnan(
        rt.split_keywords(ki, {"alpha": float("nan")})[1]["alpha"]
    )  # the caller's business
    assert rt.split_keywords(ki, {}, require_floats=False) == ({}, {})
    with pytest.raises(
        rt.KernelError, match=r"gemm_alpha: missing the float parameter alpha; pass alpha=\.\.\."
    ):
        rt.split_keywords(ki, {"M": 64})
    for bad, shown in (
        (True, "bool True"),
        ("0.5", "str '0.5'"),
        (None, "NoneType None"),
        (10**400, "int"),
    ):
        with pytest.raises(rt.KernelError) as e:
            rt.split_keywords(ki, {"alpha": bad})
        assert f"float parameter alpha must be a number (int or float), got {shown}" in str(e.value)


# --------------------------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------------------------


def test_harness_takes_the_float_after_the_sizes(rendered):
    """main.h's tables: the positional arguments are the sizes then the float (main.cu's usage
    and argument count come from them), and the launch passes the float last."""
    head = rendered.files["main.h"]
    assert 'kSizes = {{"M", "N", "K"}};' in head and 'kFloats = {{"alpha"}};' in head
    assert "gemm_alpha_launch(d[0], d[1], d[2], s[0], s[1], s[2], f[0], stream)" in head
    assert "int64_t K, float alpha, cudaStream_t stream);" in head
    assert [ln.split('"')[1] for ln in head.splitlines() if "CypType::" in ln] == ["C", "A", "B"]


@needs_nvcc
def test_nvcc_compiles_the_kernel_and_the_harness_cleanly(out, clean_ptxas):
    clean_ptxas(out, "libgemm_alpha.so")
    clean_ptxas(out, "gemm_alpha")


@needs_nvcc
@pytest.mark.parametrize(
    "args, stderr",
    [
        (["64", "64", "64"], "usage:"),
        (["64", "64", "64", "0.5", "1"], "usage:"),
        (["64", "64", "64", "x"], "float alpha must be a number (in float range), got 'x'"),
        (["64", "64", "64", "0.5x"], "got '0.5x'"),
        (["64", "64", "64", ""], "got ''"),
        (["64", "64", "64", "1e39"], "got '1e39'"),
        (["64", "64", "64", "-x"], "unknown option -x"),
    ],
)
def test_harness_rejects_a_bad_float(out, args, stderr):
    p = subprocess.run(
        [str(_made(out) / "gemm_alpha"), *args], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2 and p.stdout == "" and stderr in p.stderr, (p.returncode, p.stderr)


@needs_nvcc
@pytest.mark.parametrize("alpha, value", [("-.5", -0.5), ("0.125", 0.125), ("-3", -3.0)])
def test_harness_runs_with_the_float_or_reports_the_missing_gpu(out, tmp_path, alpha, value):
    p = subprocess.run(
        [
            str(_made(out) / "gemm_alpha"),
            "128",
            "256",
            "64",
            alpha,
            "--iters",
            "2",
            "--dump",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = json.loads(p.stdout.strip().splitlines()[-1])
    assert line["name"] == "gemm_alpha" and line["sizes"] == {"M": 128, "N": 256, "K": 64}
    if p.returncode == 1:  # no GPU here: a CUDA error before the launch
        assert line["error"].startswith("cuda") and "error:" in p.stderr
        return
    assert p.returncode == 0, p.stderr
    assert line["floats"] == {"alpha": value} and line["ms"] > 0 and line["nan"] == {"C": 0}
    assert json.loads((tmp_path / "d" / "meta.json").read_text())["floats"] == {"alpha": value}
    A, B, C = (np.load(tmp_path / "d" / f"{n}.npy").astype(np.float64) for n in "ABC")
    ref = value + A @ B
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < 1e-2


# --------------------------------------------------------------------------------------------
# The loaded kernel: ctypes types and the checks before a launch (CPU tensors)
# --------------------------------------------------------------------------------------------


@needs_nvcc
def test_runtime_passes_a_c_float_and_checks_the_keyword(out):
    torch = pytest.importorskip("torch")
    k = rt.load(_made(out))
    assert k.info.floats == (
        "alpha",
    ) and "(C: f16[M, N], A: f16[M, K], B: f16[K, N], alpha: float)" in repr(k)
    assert k._fn.argtypes == [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 3 + [
        ctypes.c_float,
        ctypes.c_void_p,
    ]
    C, A, B = (
        torch.empty(64, 32, dtype=torch.float16),
        torch.empty(64, 16, dtype=torch.float16),
        torch.empty(16, 32, dtype=torch.float16),
    )
    for call in (k, k.launch, k.bind):
        with pytest.raises(
            rt.KernelError, match=r"missing the float parameter alpha; pass alpha=\.\.\."
        ):
            call(C, A, B)
        with pytest.raises(rt.KernelError, match="float parameter alpha must be a number"):
            call(C, A, B, alpha=torch.tensor(0.5))
        with pytest.raises(rt.KernelError, match="float parameter alpha must be a number"):
            call(C, A, B, alpha=False)
        # a good value passes the float check: the next check is the tensors' device
        with pytest.raises(rt.KernelError, match=r"argument 0 \('C', f16\[M, N\]\): is on cpu"):
            call(C, A, B, alpha=0.5)
    with pytest.raises(rt.KernelError, match="unknown size 'beta'"):
        k(C, A, B, alpha=0.5, beta=1.0)
    # sizes_of needs no float, but checks one it is given
    with pytest.raises(rt.KernelError, match="is on cpu"):
        k.sizes_of(C, A, B)
    with pytest.raises(rt.KernelError, match="float parameter alpha must be a number"):
        k.sizes_of(C, A, B, alpha="x")


def test_torch_op_takes_the_float_last(rendered):
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    import cypressc.torch as ctorch

    ki = rt.KernelInfo.from_dict(json.loads(rendered.files["gemm_alpha.json"]))
    op = ctorch.register(ki, name="gemm_alpha_info")
    assert (
        str(op.default._schema)
        == "cypressc::gemm_alpha_info(Tensor A, Tensor B, float alpha) -> Tensor"
    )
    with FakeTensorMode():
        C = op(
            torch.empty(300, 72, dtype=torch.float16),
            torch.empty(72, 520, dtype=torch.float16),
            0.5,
        )
    assert C.shape == (300, 520) and C.dtype == torch.float16


# --------------------------------------------------------------------------------------------
# cypressc tune --float and explain --check-schedule
# --------------------------------------------------------------------------------------------


def test_tune_float_values_are_numbers_the_kernel_takes(tmp_path, monkeypatch):
    monkeypatch.setenv("CYPRESSC_CACHE_DIR", str(tmp_path / "cache"))
    sizes = ["--size", "M=256", "--size", "N=256", "--size", "K=64"]
    r = CliRunner().invoke(
        main, ["tune", str(ALPHA), "-m", str(H100), *sizes, "--float", "alpha=x"]
    )
    assert r.exit_code == 2 and "'alpha=x': write NAME=X with X a number" in r.stderr
    r = CliRunner().invoke(
        main, ["tune", str(ALPHA), "-m", str(H100), *sizes, "--float", "beta=2", "--compile-only"]
    )
    assert r.exit_code == 2, r.output
    assert (
        "Invalid value for --float: the kernel has no float parameter beta (it has alpha)"
        in r.stderr
    )


def test_check_schedule_binds_the_float():
    r = CliRunner().invoke(
        main,
        [
            "explain",
            str(ALPHA),
            "-m",
            str(ROOT / "tests/mappings/gemm_small.yaml"),
            "--check-schedule",
            "--schedules",
            "2",
        ],
    )
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().endswith("clean (2 schedule(s), sizes M=64 N=32 K=64 alpha=0.75)")
