"""The attention backward's main kernel for one head (issue #38): tests/programs/attn_bwd_main.cyp
gives the formula's dK, dV and dQ sums in the sequential interpreter (program order,
latest-first and a random order, after dependence analysis and after sync-insertion) and is
clean in the concurrent interpreter; a task that only hands its ``reduces=`` argument on to
reducing launches gets no private copy (one ``copy.add`` per thread's piece, none above it)."""

from __future__ import annotations

import numpy as np
import pytest

from cypressc.ir import interp
from cypressc.ir import nodes as N
from cypressc.ir.check import random_inputs
from cypressc.ir.schedule_check import check_schedules
from cypressc.ir.subst import walk_ops
from tests.budget import pick
from tests.compiled import ROOT, snapshots

PROG = ROOT / "tests" / "programs" / "attn_bwd_main.cyp"
D64 = ROOT / "tests" / "mappings" / "attn_bwd_main_d64.yaml"
SCALE = 0.125


def _case(m, seed: int):
    # two query blocks (one ragged) against two key blocks (one ragged)
    sizes = {s: {"M": 70, "N": 130, "D": 64}[s.split("_")[0]] for s in m.scalars}
    sizes["scale"] = SCALE
    a = random_inputs(m, sizes, seed=seed)
    q, k, v, do = (a[n].astype(np.float64) for n in ("Q", "K", "V", "dO"))
    s = q @ k.T * SCALE
    lse = np.log(np.exp(s).sum(1))
    p = np.exp(s - lse[:, None])
    dsum = (do * (p @ v)).sum(1)
    a["LSE"][...], a["Dsum"][...] = lse, dsum
    ds = p * (do @ v.T - dsum[:, None])
    want = {"dV": p.T @ do, "dK": SCALE * ds.T @ q, "dQacc": a["dQacc"] + ds @ k}
    return sizes, a, want


@pytest.mark.parametrize(
    ("step", "order"),
    # program order on the dependence-analysis IR under make test-full (tests/passes/
    # test_kernels.py runs the whole backward's there)
    pick([], [("dependence-analysis", None)])
    + [("sync-insertion", interp.LATEST_FIRST), ("sync-insertion", 7)],
)
def test_interpreter_gives_the_formula(step, order):
    m = dict(snapshots(PROG, D64, until="sync-insertion"))[step]
    sizes, a, want = _case(m, seed=4)
    interp.run(m, sizes, a, seed=order)
    for n, w in want.items():
        err = np.linalg.norm(a[n].astype(np.float64) - w) / np.linalg.norm(w)
        assert err < 3e-3, (n, err)  # Pᵀ and dSᵀ rounded to f16 before their GEMMs


def test_concurrent_interpreter_is_clean():
    s = dict(snapshots(PROG, D64, until="sync-insertion"))
    v = check_schedules(s["sync-insertion"], s["warp-specialization"], schedules=2)
    assert v.finding is None, v.line("attn_bwd_main")


def test_a_task_that_hands_on_its_reduction_gets_no_private_copy():
    m = dict(snapshots(PROG, D64, until="dependence-analysis"))["dependence-analysis"]
    adds = [o for o in walk_ops(m.body) if isinstance(o, N.Copy) and o.reduce]
    assert len(adds) == 1 and adds[0].dst.partition.startswith("Dp")  # the thread's piece
    allocs = {o.name for o in walk_ops(m.body) if isinstance(o, N.Alloc)}
    assert not any(a.startswith(("dQacc_", "dQ_")) for a in allocs), sorted(allocs)
