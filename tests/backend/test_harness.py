"""The host harness (cypressc/backend/harness.py) and the Python loader (cypressc/runtime.py).

No GPU needed: the harness is compiled with nvcc against a hand-written stub launcher
(skipped where nvcc is missing); the loader's checks run on described tensors (no torch)
and on CPU torch tensors (skipped where torch is missing).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cypressc import runtime as rt
from cypressc.abi.dtypes import DTYPES
from cypressc.backend.harness import (
    MAIN_CU,
    render_main_header,
    render_makefile,
    write_harness,
)


def tree(x) -> dict:
    """An expression tree of the kernel info from a compact form: a name, a number, or
    (op, a, b)."""
    if isinstance(x, str):
        return {"var": x}
    if isinstance(x, tuple):
        return {"op": x[0], "a": tree(x[1]), "b": tree(x[2])}
    return {"const": x}


def expr(c: str, x, why: str | None = None) -> dict:
    """An info entry: the C text next to the same expression as a tree (and a requirement's message)."""
    return {"c": c, "tree": tree(x)} | ({} if why is None else {"why": why})


GEMM_INFO = {
    "name": "gemm",
    "params": [
        {"name": "C", "dtype": "f16", "dims": ["M", "N"], "reads": False, "writes": True},
        {"name": "A", "dtype": "f16", "dims": ["M", "K"], "reads": True, "writes": False},
        {"name": "B", "dtype": "f16", "dims": ["K", "N"], "reads": True, "writes": False},
    ],
    "sizes": ["M", "N", "K"],
    "flops": expr("2.0 * M * N * K", ("*", ("*", ("*", 2.0, "M"), "N"), "K")),
    "requires": [
        expr("N % 8 == 0", ("==", ("%", "N", 8), 0), "N must be a multiple of 8 (TMA row stride)"),
        expr("K % 8 == 0", ("==", ("%", "K", 8), 0), "K must be a multiple of 8 (TMA row stride)"),
    ],
    "runtime_include": str(Path(rt.__file__).resolve().parent / "backend" / "runtime"),
    "cuda_arch": "90a",
}

# Every dtype, a 1-D and a 3-D tensor, a fixed dim, an in/out parameter, cdiv in flops.
MIXED_INFO = {
    "name": "mixed",
    "params": [
        {"name": "Y", "dtype": "f32", "dims": ["M"], "reads": False, "writes": True},
        {"name": "Acc", "dtype": "f32", "dims": ["M", 128], "reads": True, "writes": True},
        {"name": "X", "dtype": "bf16", "dims": ["L", "M", "K"], "reads": True, "writes": False},
        {"name": "Idx", "dtype": "i32", "dims": ["K"], "reads": True, "writes": False},
        {"name": "Z", "dtype": "bf16", "dims": ["L", "M"], "reads": False, "writes": True},
    ],
    "sizes": ["L", "M", "K"],
    "flops": expr(
        "65536.0 * cdiv(M, 128) * min(L, 4) * ((K + 63) / 64)",
        (
            "*",
            ("*", ("*", 65536.0, ("cdiv", "M", 128)), ("min", "L", 4)),
            ("/", ("+", "K", 63), 64),
        ),
    ),
    "requires": [
        expr("K % 8 == 0", ("==", ("%", "K", 8), 0), "K must be a multiple of 8"),
        expr("L >= 1", (">=", "L", 1), "L must be positive"),
    ],
    "runtime_include": GEMM_INFO["runtime_include"],
    "cuda_arch": "90a",
}

STUB_H = """#pragma once
#include <cstdint>
#include <cuda_runtime.h>
extern "C" int gemm_launch(void* C, const void* A, const void* B, int64_t M, int64_t N, int64_t K,
                           cudaStream_t stream);
"""

STUB_CU = """// A stand-in for the emitter's gemm.cu: fills C with ones; enforces the info's requires.
#include "gemm.h"
#include <cuda_fp16.h>
__global__ void gemm_stub_kernel(__half* C, int64_t n) {
  for (int64_t i = blockIdx.x * 256ll + threadIdx.x; i < n; i += 256ll * gridDim.x) C[i] = __float2half(1.0f);
}
extern "C" int gemm_launch(void* C, const void* A, const void* B, int64_t M, int64_t N, int64_t K,
                           cudaStream_t stream) {
  if (M < 0 || N < 0 || K < 0 || N % 8 || K % 8) return cudaErrorInvalidValue;
  if (M * N == 0) return cudaSuccess;
  gemm_stub_kernel<<<64, 256, 0, stream>>>(static_cast<__half*>(C), M * N);
  return cudaGetLastError();
}
"""

MIXED_CU = """#include <cstdint>
#include <cuda_runtime.h>
extern "C" int mixed_launch(void* Y, void* Acc, const void* X, const void* Idx, void* Z,
                            int64_t L, int64_t M, int64_t K, cudaStream_t stream) {
  return (K % 8 || L < 1) ? cudaErrorInvalidValue : cudaSuccess;
}
"""

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


def _make(d: Path, *targets: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-C", str(d), "-j2", *targets], capture_output=True, text=True, timeout=600
    )


# --------------------------------------------------------------------------------------------
# write_harness: files and their contents
# --------------------------------------------------------------------------------------------


def test_write_harness_writes_four_files(tmp_path):
    write_harness(tmp_path / "out", GEMM_INFO)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["Makefile", "gemm.json", "main.cu", "main.h"]
    assert json.loads((out / "gemm.json").read_text()) == GEMM_INFO
    assert (out / "gemm.json").read_text().startswith("{\n  ")  # pretty-printed
    main = (out / "main.cu").read_text()
    assert main == MAIN_CU.read_text()  # the static harness, copied unchanged
    assert "cudaEventElapsedTime" in main and "--dump" in main and '#include "main.h"' in main
    head = (out / "main.h").read_text()
    assert (
        'extern "C" int gemm_launch(void* C, const void* A, const void* B, int64_t M, '
        "int64_t N, int64_t K, cudaStream_t stream);"
    ) in head
    assert '#include "gemm.h"' in head and '#define CYP_NAME "gemm"' in head
    assert 'kSizes = {{"M", "N", "K"}};' in head and "kFloats = {};" in head
    assert "gemm_launch(d[0], d[1], d[2], s[0], s[1], s[2], stream)" in head


def test_makefile_flags(tmp_path):
    mk = render_makefile(rt.KernelInfo.from_dict(GEMM_INFO))
    assert "-O3 -std=c++17 -gencode=arch=compute_$(CUDA_ARCH),code=sm_$(CUDA_ARCH)" in mk
    assert "CUDA_ARCH ?= 90a" in mk
    assert "-Xcompiler -fPIC -shared -o $@ $(NAME).cu" in mk
    assert "cutlass_library" in mk and "CUTLASS_INCLUDE" in mk
    assert "-lcuda" not in mk
    assert f"RUNTIME_INCLUDE ?= {GEMM_INFO['runtime_include']}" in mk
    assert "\nclean:" in mk


def test_main_header_has_every_dtype_and_inout():
    """main.h's table: per parameter its dtype facts (DTYPES), whether it is read (random
    input; read and written: also dumped before the launch) and written (NaN-poisoned and
    NaN-counted when floating), and its dimensions (a size's index, or a fixed extent)."""
    head = render_main_header(rt.KernelInfo.from_dict(MIXED_INFO))
    rows = [
        '{"Y", "f32", CypType::f32, "float", "<f4", 4, true, false, true, 0, 1},',
        '{"Acc", "f32", CypType::f32, "float", "<f4", 4, true, true, true, 1, 2},',
        '{"X", "bf16", CypType::bf16, "__nv_bfloat16", "<u2", 2, true, true, false, 3, 3},',
        '{"Idx", "i32", CypType::i32, "int32_t", "<i4", 4, false, true, false, 6, 1},',
        '{"Z", "bf16", CypType::bf16, "__nv_bfloat16", "<u2", 2, true, false, true, 7, 2},',
    ]
    for row in rows:
        assert f"\n    {row}  //" in head, row
    # Y[M] Acc[M, 128] X[L, M, K] Idx[K] Z[L, M]; sizes L=0 M=1 K=2
    dims = "{1, 0}, {1, 0}, {-1, 128}, {0, 0}, {1, 0}, {2, 0}, {2, 0}, {0, 0}, {1, 0}"
    assert f"std::array<CypDim, 9> kDims = {{{{{dims}}}}};" in head
    assert "mixed_launch(d[0], d[1], d[2], d[3], d[4], s[0], s[1], s[2], stream)" in head


def test_main_cu_knows_every_dtype():
    """main.cu instantiates its fill and NaN-count kernels for each element type a parameter
    may have: each of DTYPES by its enumerator and C++ type."""
    main = MAIN_CU.read_text()
    for dt in DTYPES.values():
        assert f"case CypType::{dt.name}: return f(static_cast<{dt.ctype}*>(nullptr));" in main
    enum = re.search(r"enum class CypType \{([^}]*)\}", main).group(1)
    assert [e.strip() for e in enum.split(",")] == list(DTYPES)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(name="1gemm"), "not a C identifier"),
        (lambda d: d["params"][0].update(dtype="f64"), "params[0].dtype (param 'C') is 'f64'"),
        (lambda d: d["params"][1].update(dims=["M", "Q"]), "params[1].dims[1] (param 'A') is 'Q'"),
        (lambda d: d["params"][1].update(reads=False), "at least one true"),
        (
            lambda d: d.update(
                flops=expr("2.0 * M * N * P", ("*", ("*", ("*", 2.0, "M"), "N"), "P"))
            ),
            "kernel info: flops.tree ('2.0 * M * N * P') uses P, not among the sizes (M, N, K)",
        ),
        (
            lambda d: d["requires"][1].pop("why"),
            "requires[1] must be an object with 'c', 'tree' and 'why'",
        ),
        (
            lambda d: d["requires"][0].update(tree=tree(("**", "N", 8))),
            "requires[0].tree ('N % 8 == 0'): unknown operator '**' in an expression tree",
        ),
        (
            lambda d: d["requires"][0].update(tree={"op": "%", "a": {"var": "N"}}),
            "malformed expression tree node",
        ),
        (
            lambda d: d["requires"][0].update(tree=tree(("==", ("%", "N", True), 0))),
            "malformed expression tree node",
        ),
        # an info written before the trees (C text only) is refused with what to do
        (
            lambda d: d.update(requires=[["N % 8 == 0", "x"]]),
            "older cypressc: rebuild the kernel with `cypressc build`",
        ),
        (
            lambda d: d.update(flops="2.0 * M * N * K"),
            "kernel info: flops must be an object with 'c' (C text) and 'tree'",
        ),
        (lambda d: d.update(sizes=["M", "N", "K", "M"]), "duplicate size"),
        (lambda d: d.pop("params"), "missing 'params'"),
    ],
)
def test_info_validation(tmp_path, mutate, message):
    info = json.loads(json.dumps(GEMM_INFO))
    mutate(info)
    with pytest.raises(ValueError) as e:
        write_harness(tmp_path, info)
    assert message in str(e.value)
    assert not (tmp_path / "main.cu").exists()


# --------------------------------------------------------------------------------------------
# Size inference and argument checks (pure Python; the expression trees: test_size_exprs.py)
# --------------------------------------------------------------------------------------------


GEMM = rt.KernelInfo.from_dict(GEMM_INFO)
MIXED = rt.KernelInfo.from_dict(MIXED_INFO)


def test_infer_sizes():
    assert rt.infer_sizes(GEMM, [(64, 32), (64, 16), (16, 32)]) == {"M": 64, "N": 32, "K": 16}
    assert list(rt.infer_sizes(GEMM, [(1, 2), (1, 3), (3, 2)])) == ["M", "N", "K"]
    assert rt.infer_sizes(MIXED, [(5,), (5, 128), (2, 5, 8), (8,), (2, 5)]) == {
        "L": 2,
        "M": 5,
        "K": 8,
    }


@pytest.mark.parametrize(
    "shapes, given, message",
    [
        (
            [(64, 32), (64, 16), (17, 32)],
            None,
            "argument 2 ('B', f16[K, N]): dimension 0 (K) is 17, but K = 16 from A.shape[1]",
        ),
        (
            [(64, 32), (63, 16), (16, 32)],
            None,
            "argument 1 ('A', f16[M, K]): dimension 0 (M) is 63, but M = 64 from C.shape[0]",
        ),
        (
            [(64, 32), (64, 16, 1), (16, 32)],
            None,
            "expected a rank-2 tensor, got shape [64, 16, 1] (rank 3)",
        ),
        ([(64, 32), (64, 16)], None, "expected 3 tensors (C, A, B), got 2"),
        ([(64, 32), (64, 16), (16, 32)], {"M": 65}, "M = 65 from the keyword argument"),
        ([(64, 32), (64, 16), (16, 32)], {"Q": 1}, "unknown size 'Q'"),
    ],
)
def test_infer_sizes_errors(shapes, given, message):
    with pytest.raises(rt.KernelError) as e:
        rt.infer_sizes(GEMM, shapes, given)
    assert message in str(e.value)
    assert isinstance(e.value, ValueError)


def test_infer_sizes_fixed_dim_and_missing():
    with pytest.raises(
        rt.KernelError,
        match=r"argument 1 \('Acc', f32\[M, 128\]\): dimension 1 must be 128, got 64",
    ):
        rt.infer_sizes(MIXED, [(5,), (5, 64), (2, 5, 8), (8,), (2, 5)])
    info = rt.KernelInfo.from_dict({**GEMM_INFO, "sizes": ["M", "N", "K", "S"]})
    with pytest.raises(
        rt.KernelError,
        match=r"S appear in no tensor's shape; pass them as keyword arguments \(S=...\)",
    ):
        rt.infer_sizes(info, [(4, 8), (4, 8), (8, 8)])
    assert rt.infer_sizes(info, [(4, 8), (4, 8), (8, 8)], {"S": 3})["S"] == 3


def _desc(shape, dtype="f16", device=("cuda", 0), contiguous=True, ptr=1 << 20):
    n = int(np.prod(shape))
    return rt.TensorDesc(
        dtype,
        {"f16": "float16", None: "float64"}.get(dtype, dtype),
        tuple(shape),
        device,
        contiguous,
        ptr,
        n,
    )


def test_validate_ok_and_requires():
    ds = [_desc((64, 32)), _desc((64, 16)), _desc((16, 32))]
    assert rt.validate(GEMM, ds) == {"M": 64, "N": 32, "K": 16}
    bad = [_desc((64, 30)), _desc((64, 16)), _desc((16, 30))]
    with pytest.raises(
        rt.KernelError,
        match=r"does not support these sizes \(M=64, N=30, K=16\): N must be a multiple of 8",
    ):
        rt.validate(GEMM, bad)
    assert rt.validate(GEMM, bad, check_requires=False)["N"] == 30
    assert GEMM.failed_requires({"M": 1, "N": 30, "K": 4}) == [
        "N must be a multiple of 8 (TMA row stride)",
        "K must be a multiple of 8 (TMA row stride)",
    ]
    assert GEMM.flops_at({"M": 2, "N": 3, "K": 4}) == 48.0


@pytest.mark.parametrize(
    "which, kwargs, message",
    [
        (
            1,
            {"dtype": None},
            "argument 1 ('A', f16[M, K]): expected dtype float16 (f16), got float64",
        ),
        (2, {"device": ("cpu", None)}, "argument 2 ('B', f16[K, N]): is on cpu"),
        (2, {"device": ("cuda", 1)}, "is on cuda:1 but argument 0 ('C') is on cuda:0"),
        (0, {"contiguous": False}, "argument 0 ('C', f16[M, N]): is not contiguous"),
        (1, {"ptr": (1 << 20) + 2}, "data pointer 0x100002 is not 16-byte aligned"),
    ],
)
def test_validate_errors(which, kwargs, message):
    shapes = [(64, 32), (64, 16), (16, 32)]
    ds = [_desc(s, **(kwargs if i == which else {})) for i, s in enumerate(shapes)]
    with pytest.raises(rt.KernelError) as e:
        rt.validate(GEMM, ds)
    assert message in str(e.value)


def test_validate_empty_tensor_may_be_unaligned():
    ds = [_desc((0, 32), ptr=0), _desc((0, 16), ptr=3), _desc((16, 32))]
    assert rt.validate(GEMM, ds)["M"] == 0


def test_cuda_error_names():
    assert rt.cuda_error_name(1) == "cudaErrorInvalidValue"
    assert rt.cuda_error_name(700) == "cudaErrorIllegalAddress"
    assert rt.cuda_error_name(123456).startswith("cudaError")


def test_load_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="cypressc build"):
        rt.load(tmp_path)
    write_harness(tmp_path, GEMM_INFO)
    with pytest.raises(FileNotFoundError, match=r"make -C"):
        rt.load(tmp_path)


def test_launch_error_message():
    k = object.__new__(rt.Kernel)
    k.info = GEMM
    with pytest.raises(rt.LaunchError) as e:
        k._raise(1, {"M": 8, "N": 30, "K": 8})
    assert "gemm_launch(M=8, N=30, K=8) returned 1 (cudaErrorInvalidValue)" in str(e.value)
    assert "N must be a multiple of 8" in str(e.value)
    assert e.value.cuda_name == "cudaErrorInvalidValue" and e.value.code == 1


# --------------------------------------------------------------------------------------------
# Compiling with nvcc against stub launchers
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built_gemm(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    d = tmp_path_factory.mktemp("gemm_build")
    write_harness(d, GEMM_INFO)
    (d / "gemm.h").write_text(STUB_H)
    (d / "gemm.cu").write_text(STUB_CU)
    p = _make(d)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "warning" not in (p.stdout + p.stderr).lower(), p.stdout + p.stderr
    return d


@needs_nvcc
def test_make_builds_binary_and_library(built_gemm):
    assert (built_gemm / "gemm").is_file() and (built_gemm / "libgemm.so").is_file()
    p = subprocess.run(["nm", "-D", str(built_gemm / "libgemm.so")], capture_output=True, text=True)
    assert p.returncode != 0 or " T gemm_launch" in p.stdout


@needs_nvcc
def test_binary_usage(built_gemm):
    exe = str(built_gemm / "gemm")
    for args in (
        [],
        ["8", "8"],
        ["8", "8", "x"],
        ["8", "8", "-1"],
        ["8", "8", "8", "--bogus"],
        ["8", "8", "8", "--iters"],
    ):
        p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert p.stdout == ""
    p = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0
    assert p.stdout == f"usage: {exe} M N K [--iters N] [--warmup N] [--seed S] [--dump DIR]\n"


@needs_nvcc
def test_binary_npy_writer(built_gemm, tmp_path):
    p = subprocess.run(
        [str(built_gemm / "gemm"), "--npy-selftest", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    f2 = np.load(tmp_path / "f2.npy")
    assert f2.dtype == np.float16 and f2.shape == (2, 3)
    assert f2.tolist() == [[1.0, -2.0, 0.0], [65504.0, 0.5, -1.0]]
    assert np.load(tmp_path / "f4.npy").tolist() == pytest.approx([1.5, -2.0, 0.0, 3.25, 1e-3])
    i4 = np.load(tmp_path / "i4.npy")
    assert (
        i4.dtype == np.int32 and i4.shape == (1, 2, 2) and i4.ravel().tolist() == [-8, 7, 0, 123456]
    )
    assert np.load(tmp_path / "empty.npy").shape == (0, 4)
    for name in ("f2", "f4", "i4", "empty"):
        assert (tmp_path / f"{name}.npy").stat().st_size % 64 == (
            {"f2": 12, "f4": 20, "i4": 16, "empty": 0}[name]
        ) % 64


@needs_nvcc
def test_binary_runs_or_reports_cuda_error(built_gemm, tmp_path):
    """Without a GPU: exit 1 and a JSON error line; with one: the stub fills C, a timing line."""
    p = subprocess.run(
        [str(built_gemm / "gemm"), "64", "64", "64", "--iters", "3", "--dump", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = json.loads(p.stdout.strip().splitlines()[-1])
    assert line["name"] == "gemm" and line["sizes"] == {"M": 64, "N": 64, "K": 64}
    if p.returncode == 1:
        assert "error" in line and line["error"].startswith("cuda") and "error:" in p.stderr
    else:
        assert p.returncode == 0, p.stderr
        assert line["ms"] > 0 and line["nan"] == {"C": 0} and line["iters"] == 3
        assert (np.load(tmp_path / "d" / "C.npy") == 1).all()
        a = np.load(tmp_path / "d" / "A.npy")
        assert a.shape == (64, 64) and a.std() > 0.5 and (a != 0).mean() > 0.99
        meta = json.loads((tmp_path / "d" / "meta.json").read_text())
        assert meta["sizes"] == {"M": 64, "N": 64, "K": 64}
        r = subprocess.run(
            [str(built_gemm / "gemm"), "64", "60", "64"], capture_output=True, text=True
        )
        assert r.returncode == 1 and "cudaErrorInvalidValue" in r.stdout
        assert "N must be a multiple of 8" in r.stderr


@needs_nvcc
def test_mixed_dtypes_compile(tmp_path):
    write_harness(tmp_path, MIXED_INFO)
    (tmp_path / "mixed.cu").write_text(MIXED_CU)
    p = _make(tmp_path, "mixed")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "warning" not in (p.stdout + p.stderr).lower(), p.stdout + p.stderr


@needs_nvcc
def test_header_signature_mismatch_is_a_compile_error(tmp_path):
    write_harness(tmp_path, GEMM_INFO)
    (tmp_path / "gemm.h").write_text(STUB_H.replace("void* C", "const void* C"))
    p = subprocess.run(
        [
            "nvcc",
            "-std=c++17",
            "-gencode=arch=compute_90a,code=sm_90a",
            "-c",
            "main.cu",
            "-o",
            "main.o",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode != 0
    assert "gemm_launch" in p.stdout + p.stderr


def test_makefile_reports_missing_cutlass(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make not on PATH")
    write_harness(tmp_path, GEMM_INFO)
    (tmp_path / "gemm.cu").write_text(STUB_CU)
    p = subprocess.run(
        ["make", "-C", str(tmp_path), "CUTLASS_INCLUDE=/nonexistent"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode != 0 and "CUTLASS/CuTe headers not found" in p.stderr


# --------------------------------------------------------------------------------------------
# With PyTorch (CPU tensors are enough to reach every check before the launch)
# --------------------------------------------------------------------------------------------


def test_describe_torch_tensors():
    torch = pytest.importorskip("torch")
    d = rt.describe(torch.zeros(4, 8, dtype=torch.bfloat16))
    assert d.dtype == "bf16" and d.shape == (4, 8) and d.device == ("cpu", None) and d.contiguous
    assert rt.describe(torch.zeros(4, 8, dtype=torch.float64)).dtype is None
    assert not rt.describe(torch.zeros(4, 8).t()).contiguous
    with pytest.raises(rt.KernelError, match="expected a torch.Tensor, got ndarray"):
        rt.describe(np.zeros(3))


@needs_nvcc
def test_kernel_checks_before_launch(built_gemm):
    torch = pytest.importorskip("torch")
    k = rt.load(built_gemm)
    assert k.name == "gemm" and "C: f16[M, N]" in repr(k)
    C, A, B = (
        torch.empty(64, 32, dtype=torch.float16),
        torch.empty(64, 16, dtype=torch.float16),
        torch.empty(16, 32, dtype=torch.float16),
    )
    with pytest.raises(rt.KernelError, match=r"argument 0 \('C', f16\[M, N\]\): is on cpu"):
        k(C, A, B)
    with pytest.raises(rt.KernelError, match="expected dtype float16 \\(f16\\), got float32"):
        k(C, A.float(), B)
    with pytest.raises(
        rt.KernelError, match="argument 2 \\('B', f16\\[K, N\\]\\): expected a torch.Tensor"
    ):
        k(C, A, [1, 2])
    with pytest.raises(rt.KernelError, match="expected 3 tensors"):
        k(C, A)
    with pytest.raises(
        rt.KernelError, match=r"dimension 0 \(K\) is 17, but K = 16 from A.shape\[1\]"
    ):
        k(C, A, torch.empty(17, 32, dtype=torch.float16))


# --------------------------------------------------------------------------------------------
# The GPU scripts' pure parts (bench/gpu_check.py, bench/gemm.py)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench_mods():
    import importlib
    import sys

    bench = str(Path(__file__).resolve().parents[2] / "bench")
    sys.path.insert(0, bench)
    try:
        yield importlib.import_module("gpu_check"), importlib.import_module("gemm")
    finally:
        sys.path.remove(bench)


PTXAS_LOG = """ptxas info    : Compiling entry function '_Z11gemm_kernel14CUtensorMap_stS_S_P6__halfiii' for 'sm_90a'
ptxas info    : Function properties for _Z11gemm_kernel14CUtensorMap_stS_S_P6__halfiii
    0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 168 registers, used 16 barriers
ptxas info    : Compiling entry function '_ZN12_GLOBAL__N_115cyp_fill_randomI6__halfEEvPT_lm' for 'sm_90a'
ptxas info    : Function properties for _ZN12_GLOBAL__N_115cyp_fill_randomI6__halfEEvPT_lm
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 20 registers
"""


def test_gpu_check_ptxas_and_verdict(bench_mods):
    gc, _ = bench_mods
    s = gc.ptxas_summary(PTXAS_LOG)
    assert s == {
        "_Z11gemm_kernel14CUtensorMap_stS_S_P6__halfiii": {
            "stack": 0,
            "spill_st": 8,
            "spill_ld": 4,
            "regs": 168,
        }
    }
    r = {
        "build": {"rc": 0},
        "make": {"rc": 0, "ptxas": s},
        "check": {
            "checks": [
                {
                    "sizes": {"M": 1, "N": 8, "K": 8},
                    "expect": "compute",
                    "ok": True,
                    "rel": {"C": 1e-4},
                    "nan": {"C": 0},
                    "det": True,
                },
                {
                    "sizes": {"M": 1, "N": 7, "K": 8},
                    "expect": "refuse",
                    "ok": False,
                    "python": "raised",
                    "rc": 0,
                    "untouched": False,
                },
            ],
            "api": [{"case": "x", "ok": True, "msg": ""}],
            "bind_ok": True,
        },
        "harness": {"run": {"ok": True, "json": {"tflops": 700.0}}},
        "sanitizer": [{"tool": "memcheck", "sizes": {"M": 1}, "ok": True}],
    }
    ok, why = gc.verdict(r)
    assert not ok and why == ["wrong at 1x7x8", "spills"]
    t = gc.Target("gemm-h100", "gemm", Path("/nonexistent"), result=r)
    table = "\n".join(gc.summary_table([t]))
    assert (
        "gemm-h100" in table
        and "168/12" in table
        and "1/1" in table
        and "0/1" in table
        and "700.0" in table
    )
    assert "FAIL: wrong at 1x7x8; spills" in table


def test_gpu_check_program_table(bench_mods):
    gc, _ = bench_mods
    info = rt.KernelInfo.from_dict(GEMM_INFO)
    prog, check, small, run_sizes, why = gc.program_for("gemm", info)
    assert (
        prog is gc.PROGRAMS["gemm"] and not why and run_sizes == {"M": 4096, "N": 4096, "K": 4096}
    )
    assert any(info.failed_requires(s) for s in check) and any(
        not info.failed_requires(s) for s in check
    )
    other = rt.KernelInfo.from_dict(
        {
            **GEMM_INFO,
            "sizes": ["X", "Y", "Z"],
            "flops": expr("1.0", 1.0),
            "requires": [],
            "params": [
                {**p, "dims": [{"M": "X", "N": "Y", "K": "Z"}[d] for d in p["dims"]]}
                for p in GEMM_INFO["params"]
            ],
        }
    )
    prog, check, small, _, why = gc.program_for("gemm", other)
    assert "generic sizes" in why and all(set(s) == {"X", "Y", "Z"} for s in check + small)
    for name, p in gc.PROGRAMS.items():  # every table entry is self-consistent
        assert all(set(s) == set(p.check[0]) for s in p.check + p.small + [p.run]), name


def test_gpu_check_expand_mappings(bench_mods):
    gc, _ = bench_mods
    every = gc.expand_mappings("gemm", "all")
    assert "h100" in every and every == sorted(every)
    assert gc.expand_mappings("gemm", "h100,h100,x.yaml,") == ["h100", "x.yaml"]
    assert gc.expand_mappings("gemm", "") == []


def test_gpu_check_build_proto_layout(bench_mods, tmp_path):
    gc, _ = bench_mods
    gc.build_proto(tmp_path, "bf16")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "Makefile",
        "gemm.cu",
        "gemm.h",
        "gemm.json",
        "main.cu",
        "main.h",
        "proto_gemm_target.cu",
    ]
    info = rt.KernelInfo.load_json(tmp_path / "gemm.json")
    assert [p.dtype for p in info.params] == ["bf16"] * 3
    assert "#define CYP_BF16" in (tmp_path / "gemm.cu").read_text()
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    gc.build_proto(tmp_path, "bf16")  # unchanged files are not rewritten
    assert before == {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}


def test_bench_shapes(bench_mods):
    _, gemm = bench_mods
    assert gemm.parse_shapes("2048, 8192x8192x1024") == [(2048, 2048, 2048), (8192, 8192, 1024)]
    assert len(gemm.parse_shapes(gemm.DEFAULT_SHAPES)) == 7
    with pytest.raises(SystemExit):
        gemm.parse_shapes("1x2")
    assert (
        gemm.fmt_peer({"tflops": 650.04, "ratio": 0.98765, "rel_vs_cublas": 0.0}) == "650.0 (0.988)"
    )
    assert gemm.fmt_peer({"error": "x"}) == "FAIL" and gemm.fmt_peer(None) == "-"


def test_gpu_check_nvcc_fallback_matches_makefile(bench_mods, tmp_path):
    """Without make on a machine, gpu_check runs the Makefile's nvcc commands itself."""
    if shutil.which("make") is None:
        pytest.skip("make not on PATH")
    gc, _ = bench_mods
    write_harness(tmp_path, GEMM_INFO)
    (tmp_path / "gemm.cu").write_text(STUB_CU)
    for target in ("gemm", "libgemm.so"):
        p = subprocess.run(
            ["make", "-n", "-C", str(tmp_path), target, "EXTRA_NVCCFLAGS=-Xptxas -v"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        line = next(x for x in p.stdout.splitlines() if x.startswith("nvcc"))
        assert line.replace('"', "").split() == gc.nvcc_command(
            tmp_path, "gemm", target, "-Xptxas -v"
        )


class _FakeGemm:
    """Stands in for a loaded kernel on CPU tensors: the loader's checks (CPU reported as
    cuda:0), C = A @ B, and the launcher's refusal (rc 1, nothing written)."""

    def __init__(self, wrong_at=None):
        self.info, self.name, self.wrong_at = GEMM, "gemm", wrong_at

    def _check(self, ts, requires=True):
        descs = [rt.describe(t) for t in ts]
        descs = [
            rt.TensorDesc(d.dtype, d.dtype_str, d.shape, ("cuda", 0), d.contiguous, d.ptr, d.numel)
            for d in descs
        ]
        return rt.validate(self.info, descs, check_requires=requires)

    def launch(self, *ts, check_requires=True):
        sizes = self._check(ts, check_requires)
        if self.info.failed_requires(sizes):
            return 1
        C, A, B = ts
        C.copy_((A.float() @ B.float()).to(C.dtype))
        if sizes == self.wrong_at:
            C[0, 0] += 100
        return 0

    def __call__(self, *ts):
        assert self.launch(*ts) == 0

    def bind(self, *ts):
        return lambda: self(*ts)


def test_gpu_check_logic_with_fake_kernel(bench_mods, monkeypatch):
    torch = pytest.importorskip("torch")
    gc, _ = bench_mods
    monkeypatch.setattr(gc, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    prog = gc.PROGRAMS["gemm"]
    ok = gc.check_size(torch, _FakeGemm(), prog, {"M": 129, "N": 264, "K": 72})
    assert ok["ok"] and ok["expect"] == "compute" and ok["det"] and ok["nan"] == {"C": 0}
    assert ok["rel"]["C"] < 1e-3
    bad = gc.check_size(
        torch, _FakeGemm(wrong_at={"M": 64, "N": 64, "K": 64}), prog, {"M": 64, "N": 64, "K": 64}
    )
    assert not bad["ok"] and bad["rel"]["C"] > 1e-2
    ref = gc.check_size(torch, _FakeGemm(), prog, {"M": 129, "N": 257, "K": 72})
    assert ref["ok"] and ref["expect"] == "refuse" and ref["python"] == "raised" and ref["rc"] == 1
    assert ref["untouched"]
    assert gc.cell(ok).startswith("ok ") and gc.cell(ref).startswith("refused")
    api = gc.api_checks(torch, _FakeGemm(), {"M": 64, "N": 64, "K": 64})
    assert {a["case"]: a["ok"] for a in api} == {
        "dtype of B": True,
        "B on cpu": False,  # the fake reports CPU tensors as cuda:0
        "missing tensor": True,
        "non-contiguous C": True,
        "misaligned C": True,
        "inconsistent C.shape[0]": True,
    }


def test_variants_bench_helpers(bench_mods):
    """bench/variants.py: useful work per program, and a peer above its dtype's tolerance
    (or NaN, or failed) is flagged in the table and fails the run."""
    import importlib

    v = importlib.import_module("variants")  # bench/ is on sys.path while bench_mods is alive
    s = dict(L=2, M=3, N=5, K=7)
    assert v.flops("batched_gemm", s) == 2 * 2 * 3 * 5 * 7
    assert v.flops("dual_gemm", s) == 4 * 3 * 5 * 7
    assert v.flops("gemm_reduction", s) == 2 * 3 * 5 * 7 + 3 * 7
    ok = {"rel": 2e-4, "tflops": 700.0, "ratio": 1.1}
    assert v.cell(ok, False, "f16") == "700.0 (1.100)" and v.cell(ok, True, "f16") == "700.0"
    assert not v.bad({"rel": 2e-3}, "bf16") and v.bad({"rel": 2e-3}, "f16")
    assert v.bad({"rel": float("nan")}, "f16") and v.bad({"error": "x"}, "f16")
    assert v.cell({**ok, "rel": 5e-3}, False, "f16").endswith("rel=5.0e-03!")
    assert v.cell({"error": "boom"}, False, "f16") == "FAIL" and v.cell(None, False, "f16") == "-"
