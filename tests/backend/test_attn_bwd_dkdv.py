"""The attention backward's dK, dV kernel (issue #38), FlashAttention-3's SdP_swapAB order in a
sequential program (tests/programs/attn_bwd_dkdv.cyp): batch, grouped-query heads (dK and dV of a
key/value head summed over its query heads in one block) and top-left causal masking of the
key-major score tile (``mask_causal_t``, whose cypress.cuh helper is checked against its NumPy
semantics on the host).  The sequential interpreter, after dependence analysis and after
sync-insertion, gives the formula's dK and dV on ragged sizes, causal or not; the concurrent
interpreter is clean, with a key block that no query reaches; ptxas fits the
head-dimension-128 kernel in FlashAttention-3's register split (240 per consumer thread)
without spilling, and serializes none of the head-dimension-64 kernel's wgmmas.  The GPU check
is ``attn_bwd_dkdv`` in bench/gpu_check.py."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from cypressc.ir import interp
from cypressc.ir.check import random_inputs
from cypressc.ir.schedule_check import check_schedules
from cypressc.lang.intrinsics import LEAF_FUNCTIONS, Operand
from tests.budget import pick
from tests.compiled import ROOT, ptxas_report, rendered, snapshots

PROG = ROOT / "tests" / "programs" / "attn_bwd_dkdv.cyp"
D64 = ROOT / "tests" / "mappings" / "attn_bwd_dkdv_d64.yaml"
D128 = ROOT / "tests" / "mappings" / "attn_bwd_dkdv.yaml"
SCALE = 0.125
RUNTIME = ROOT / "cypressc" / "backend" / "runtime" / "cypress.cuh"
CXX = shutil.which("g++") or shutil.which("c++")


def _case(m, seed: int, causal: int, M: int, N: int):
    """Inputs at B = 1, H = 2 query heads on HK = 1 key/value head (G = 2), M queries, N keys,
    D = 64, with LSE and Dsum those of the inputs (causal-masked when ``causal``), and the
    formula's dK and dV (summed over the two query heads) in float64."""
    dims = {"B": 1, "H": 2, "HK": 1, "M": M, "N": N, "D": 64, "causal": causal}
    sizes = {s: dims[s] for s in m.scalars}
    sizes["scale"] = SCALE
    a = random_inputs(m, sizes, seed=seed)
    q, k, v, do = (a[n].astype(np.float64) for n in ("Q", "K", "V", "dO"))
    g = q.shape[1] // k.shape[1]
    above = np.triu(np.ones((M, N), dtype=bool), 1) if causal else np.zeros((M, N), dtype=bool)
    want = {"dK": np.zeros(k.shape), "dV": np.zeros(v.shape)}
    for b, h in np.ndindex(*q.shape[:2]):
        kh, vh, qh, doh = k[b, h // g], v[b, h // g], q[b, h], do[b, h]
        s = np.where(above, -np.inf, qh @ kh.T * SCALE)
        lse = np.log(np.exp(s).sum(1))
        p = np.exp(s - lse[:, None])
        dsum = (doh * (p @ vh)).sum(1)
        a["LSE"][b, h], a["Dsum"][b, h] = lse, dsum
        ds = p * (doh @ vh.T - dsum[:, None])
        want["dV"][b, h // g] += p.T @ doh
        want["dK"][b, h // g] += SCALE * ds.T @ qh
    return sizes, a, want


# not causal, ragged M and N; causal, N > M: key block 1 starts in query block 2, whose ragged
# tile (queries 128..139) holds the diagonal, and keys 140.. see no query
CASES = [(0, 72, 100), (1, 140, 192)]


# the causal case's dependence-analysis IR (the slowest to interpret, 7 s) under make test-full
STEPS = [
    (step, *case)
    for case in CASES
    for step in ("dependence-analysis", "sync-insertion")
    if pick(case[0] == 0 or step == "sync-insertion", True)
]


@pytest.mark.parametrize(("step", "causal", "M", "N"), STEPS)
def test_interpreter_gives_the_formula(step, causal, M, N):
    m = dict(snapshots(PROG, D64, until="sync-insertion"))[step]
    sizes, a, want = _case(m, seed=3, causal=causal, M=M, N=N)
    interp.run(m, sizes, a, seed=None if step == "dependence-analysis" else 11)
    for n, w in want.items():
        assert np.isfinite(a[n]).all(), n
        err = np.linalg.norm(a[n].astype(np.float64) - w) / np.linalg.norm(w)
        assert err < 3e-3, (n, err)  # Pᵀ and dSᵀ rounded to f16 before their GEMMs
        if causal and N > M:  # keys past every query: nothing reaches them
            assert not a[n][:, :, M:].any(), n


def test_concurrent_interpreter_is_clean():
    """G = 2 query heads of 2 query blocks each: 4 steps, two wraps of the 2-stage pipeline in
    key block 0; causal, key block 1 (keys 128..255) is past every query: no step at all."""
    s = dict(snapshots(PROG, D64, until="sync-insertion"))
    sizes = dict(B=1, H=2, HK=1, M=128, N=256, D=8, causal=1)
    v = check_schedules(s["sync-insertion"], s["warp-specialization"], sizes=sizes, schedules=2)
    assert v.finding is None, v.line("attn_bwd_dkdv")


def test_d128_fits_the_register_split(tmp_path):
    """FlashAttention-3's register split, and LSE and Dsum read at the step's query head row."""
    r = rendered(PROG, D128)
    assert r.plan.consumer_registers == 240 and r.plan.producer_registers == 24
    for name, text in r.files.items():  # the .cu and its copy of the user's header
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    cu = tmp_path / "attn_bwd_dkdv.cu"
    # LSE and Dsum of a step: row b·H + (the step's query head) of the [B·H, M] vectors, the
    # head kb // n computed once at the top of the step (cypressc/backend/step_lets.py)
    text = cu.read_text()
    for v in ("LSE", "Dsum"):
        m = re.search(
            rf"< M \? \({v} \+ size_t\(\(\(b0 \* H\) \+ \(\(b1 \* \(H / HK\)\) \+ (kq\d)\)\)\) \* M\)\[",
            text,
        )
        assert m and f"const int {m.group(1)} = kb / (" in text, v


@pytest.mark.full  # make test compiles this kernel inside tests/programs/flash_attention_bwd.cyp
def test_d128_compiles_without_spills(tmp_path):
    r = rendered(PROG, D128)
    for name, text in r.files.items():  # the .cu and its copy of the user's header
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    report = ptxas_report(tmp_path / "attn_bwd_dkdv.cu", tmp_path / "k.o")
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report[-2000:]


def test_d64_wgmmas_are_not_serialized(tmp_path):
    """At head dimension 64 the registers suffice, and the step's query head and block
    (divisions of the step by a run-time count) are computed before its wgmmas are issued,
    so ptxas serializes none (C7512: registers; C7513: code between a wgmma's issue and its
    wait defining its input registers)."""
    r = rendered(PROG, D64)
    for name, text in r.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    report = ptxas_report(tmp_path / "attn_bwd_dkdv.cu", tmp_path / "k.o")
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report[-2000:]
    assert "serialized" not in report, report[-2000:]


@pytest.mark.skipif(CXX is None, reason="no host C++ compiler")
def test_mask_causal_t_helper_is_its_semantics(tmp_path):
    """cypress.cuh's mask_causal_t, compiled for the host and run by every thread of a
    warpgroup on one 64 x 64 accumulator atom, masks what the interpreters' NumPy semantics
    masks: each thread's elements located by the wgmma accumulator layout."""
    helper = re.search(
        r"template <int R> __device__ __forceinline__ void mask_causal_t\(.*?\n}\n",
        RUNTIME.read_text(),
        re.S,
    )
    src = tmp_path / "mask_t.cpp"
    src.write_text(
        "#include <cmath>\n#include <cstdio>\n#include <cstdlib>\n"
        "#define __device__\n#define __forceinline__ inline\n"
        "struct { unsigned x; } threadIdx;\nnamespace cypress {\n" + helper.group(0) + "}\n"
        "int main(int argc, char** argv) {\n"
        "  const int d = atoi(argv[1]);\n"
        "  for (int t = 0; t < 128; ++t) {\n"
        "    threadIdx.x = 128 + t;  // consumer warpgroup 0, after the producer's\n"
        "    float x[32] = {};\n"
        "    cypress::mask_causal_t(x, d);\n"
        "    const int lane = t % 32, warp = t / 32;\n"
        "    for (int i = 0; i < 32; ++i)\n"
        "      if (std::isinf(x[i]))\n"
        '        printf("%d %d\\n", 16 * warp + lane / 4 + 8 * ((i / 2) % 2),'
        " 8 * (i / 4) + 2 * (lane % 4) + i % 2);\n"
        "  }\n}\n"
    )
    exe = tmp_path / "mask_t"
    subprocess.run([CXX, "-std=c++17", "-O1", str(src), "-o", str(exe)], check=True)
    rows = cols = np.arange(64)
    for d in (-70, -63, -62, -5, 0, 1, 40, 63, 64, 200):
        out = subprocess.run([str(exe), str(d)], check=True, capture_output=True, text=True)
        got = {tuple(map(int, ln.split())) for ln in out.stdout.splitlines()}
        x = np.zeros((64, 64), np.float32)
        want = LEAF_FUNCTIONS["mask_causal_t"].semantics(Operand(x, (rows, cols)), d)[0]
        assert got == set(zip(*np.nonzero(np.isneginf(want)))), d


def test_gpu_check_prepare_and_reference_are_the_formula(gc):
    """bench/gpu_check.py's ``prepare`` (LSE, Dsum per query head, causal-masked) and float32
    reference (dK, dV summed over each key/value head's query heads) on the CPU give what the
    NumPy formula above does; the table's sizes fit both builds' ABI, some refused."""
    torch = pytest.importorskip("torch")
    m = dict(snapshots(PROG, D64, until="dependence-analysis"))["dependence-analysis"]
    for causal, M, N in CASES:
        sizes, a, want = _case(m, seed=4, causal=causal, M=M, N=N)
        t = {k: torch.from_numpy(v.copy()) for k, v in a.items() if k not in ("LSE", "Dsum")}
        t |= {k: torch.full(a[k].shape, float("nan")) for k in ("LSE", "Dsum")}
        kw = {"scale": SCALE, "causal": causal}
        gc.PROGRAMS["attn_bwd_dkdv"].prepare(t, kw)
        for k in ("LSE", "Dsum"):
            np.testing.assert_allclose(t[k].double().numpy(), a[k], rtol=1e-4, atol=1e-4)
        refs = gc.PROGRAMS["attn_bwd_dkdv"].reference(t | kw)
        assert sorted(refs) == ["dK", "dV"]
        for n, w in want.items():
            err = np.linalg.norm(refs[n].double().numpy() - w) / np.linalg.norm(w)
            assert err < 1e-4, (causal, n, err)
    # d64: every D = 128 row and D = 256 refused; d128: D = 256 and H = 3 on HK = 2
    for mapping, refused in ((D64, 9), (D128, 2)):
        info = rendered(PROG, mapping).info
        prog, check, small, run, why = gc.program_for("attn_bwd_dkdv", info)
        assert not why and all(list(s) == [*info.sizes, *info.floats] for s in check + small)
        assert sum(bool(info.failed_requires(s)) for s in check) == refused, mapping
        assert not info.failed_requires(run)
