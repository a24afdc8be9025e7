"""The attention backward's dK, dV kernel (issue #38), FlashAttention-3's SdP_swapAB order in a
sequential program (tests/programs/attn_bwd_dkdv.cyp): the sequential interpreter, after
dependence analysis and after sync-insertion, and the concurrent interpreter give the formula's
dK and dV on ragged sizes; ptxas fits the head-dimension-128 kernel in FlashAttention-3's register
split (240 per consumer thread) without spilling.  The GPU check is ``attn_bwd_dkdv`` in
bench/gpu_check.py."""

from __future__ import annotations


import numpy as np
import pytest

from cypressc.build import render_build
from cypressc.ir import interp
from cypressc.ir.check import random_inputs
from cypressc.ir.schedule_check import check_schedules
from tests.compiled import ROOT, ptxas_report, snapshots, tree

PROG = ROOT / "tests" / "programs" / "attn_bwd_dkdv.cyp"
D64 = ROOT / "tests" / "mappings" / "attn_bwd_dkdv_d64.yaml"
D128 = ROOT / "tests" / "mappings" / "attn_bwd_dkdv.yaml"
SCALE = 0.125


def _case(m, seed: int):
    """Inputs at M = 192 queries, N = 130 keys (ragged against 64 and 128), D = 64, with LSE
    and Dsum those of the inputs, and the formula's dK and dV in float64."""
    sizes = {s: {"M": 192, "N": 130, "D": 64}[s.split("_")[0]] for s in m.scalars}
    sizes["scale"] = SCALE
    a = random_inputs(m, sizes, seed=seed)
    q, k, v, do = (a[n].astype(np.float64) for n in ("Q", "K", "V", "dO"))
    s = q @ k.T * SCALE
    lse = np.log(np.exp(s).sum(1))
    p = np.exp(s - lse[:, None])
    dsum = (do * (p @ v)).sum(1)
    a["LSE"][...], a["Dsum"][...] = lse, dsum
    ds = p * (do @ v.T - dsum[:, None])
    return sizes, a, {"dV": p.T @ do, "dK": SCALE * ds.T @ q}


@pytest.mark.parametrize("step", ["dependence-analysis", "sync-insertion"])
def test_interpreter_gives_the_formula(step):
    m = dict(snapshots(PROG, D64, until="sync-insertion"))[step]
    sizes, a, want = _case(m, seed=3)
    interp.run(m, sizes, a, seed=None if step == "dependence-analysis" else 11)
    for n, w in want.items():
        assert np.isfinite(a[n]).all(), n
        err = np.linalg.norm(a[n].astype(np.float64) - w) / np.linalg.norm(w)
        assert err < 3e-3, (n, err)  # Pᵀ and dSᵀ rounded to f16 before their GEMMs


def test_concurrent_interpreter_is_clean():
    s = dict(snapshots(PROG, D64, until="sync-insertion"))
    v = check_schedules(s["sync-insertion"], s["warp-specialization"], schedules=2)
    assert v.finding is None, v.line("attn_bwd_dkdv")


def test_d128_fits_the_register_split(tmp_path):
    r = render_build(tree(PROG, D128))
    assert r.plan.consumer_registers == 240 and r.plan.producer_registers == 24
    for name, text in r.files.items():  # the .cu and its copy of the user's header
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    cu = tmp_path / "attn_bwd_dkdv.cu"
    report = ptxas_report(cu, tmp_path / "k.o")
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report[-2000:]
