"""Several kernels per program (issue #38; cypressc/passes/kernels.py): the entry task of
tests/programs/two_kernels.cyp launches two GEMMs, the second reading what the first wrote.
Each is its own module through every pass; run one after another, they compute what the
whole program computes; a statement that launches two kernels, or a tensor between them,
is a located E051; a step that compiles one kernel refuses two at the second's BLOCK
instance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cypressc.diagnostics import CypressError
from cypressc.ir import interp
from cypressc.ir.check import random_inputs
from cypressc.ir.schedule_check import check_schedules
from cypressc.passes.dependence_analysis import dependence_analysis
from cypressc.pipeline import compile_module, compile_program
from tests.budget import pick
from tests.compiled import tree

ROOT = Path(__file__).resolve().parents[2]
PROG = ROOT / "tests" / "programs" / "two_kernels.cyp"
SMALL = ROOT / "tests" / "mappings" / "two_kernels_small.yaml"
SIZES = {"M": 64, "N": 64, "K": 32, "P": 32}


@pytest.fixture(scope="module")
def kernels():
    return compile_program(tree(PROG, SMALL), until="sync-insertion")


def _sizes(m):
    """SIZES by the module's own names for them (``%M`` may be ``%M_1`` in IR)."""
    return {s: SIZES[s.split("_")[0]] for s in m.scalars}


def _want(a):
    c = (a["A"].astype(np.float64) @ a["B"]).astype(a["C"].dtype)  # the program rounds C to T
    return c.astype(np.float64) @ a["E"]


def test_each_kernel_is_a_module_through_every_pass(kernels):
    assert [k[0][1].name for k in kernels] == ["two_kernels_gemm_block", "two_kernels_gemm_block_2"]
    for snaps in kernels:
        assert [n for n, _ in snaps][-1] == "sync-insertion"  # verified + happens-before
        m = snaps[-1][1]
        assert m.target.block.instance == "gemm_block" and m.target.block.pipeline == 2
    # kernel 1 copies A and B in; kernel 2 copies C and E in: nothing of the other one
    first, second = (k[0][1] for k in kernels)
    text = [interp_free_text(first), interp_free_text(second)]
    assert "copy %A ->" in text[0] and "copy %E ->" not in text[0]
    assert "copy %C ->" in text[1] and "copy %A ->" not in text[1]


def interp_free_text(m):
    from cypressc.ir.printer import print_module

    return print_module(m)


def test_kernels_in_stream_order_compute_the_whole_program(kernels):
    whole = dependence_analysis(tree(PROG, SMALL))
    sizes = _sizes(whole)
    a = random_inputs(whole, sizes, seed=3)
    a["C"][...] = np.nan
    a["D"][...] = np.nan
    for step in (0, -1):  # right after dependence analysis, and after sync-insertion
        data = {k: v.copy() for k, v in a.items()}
        for snaps in kernels:
            interp.run(snaps[step][1], sizes, data, seed=step + 7)
        np.testing.assert_allclose(data["D"], _want(data), rtol=2e-2, atol=2e-2)
    data = {k: v.copy() for k, v in a.items()}
    interp.run(whole, sizes, data, seed=interp.LATEST_FIRST)
    np.testing.assert_allclose(data["D"], _want(data), rtol=2e-2, atol=2e-2)


def test_each_kernel_passes_the_concurrent_interpreter(kernels):
    for snaps in kernels:
        s = dict(snaps)
        v = check_schedules(s["sync-insertion"], s["warp-specialization"], schedules=3)
        assert v.finding is None, v.line("two_kernels")


def test_compile_module_refuses_two_kernels_at_the_second_block_instance():
    with pytest.raises(CypressError) as e:
        compile_module(tree(PROG, SMALL))
    assert e.value.code == "E050"
    assert (
        "2 kernels" in e.value.message
        and e.value.loc.line
        == SMALL.read_text()
        .splitlines()
        .index(next(ln for ln in SMALL.read_text().splitlines() if "instance: gemm_block" in ln))
        + 1
    )


def _variant(tmp_path, old: str, new: str) -> Path:
    p = tmp_path / "two_kernels.cyp"
    text = PROG.read_text()
    assert old in text
    p.write_text(text.replace(old, new))
    return p


def test_a_tensor_between_kernels_is_e051(tmp_path):
    p = _variant(
        tmp_path,
        '    launch("gemm", D, C, E)  # kernel 2',
        '    X: tensor[2, f32] = make_tensor(M, N)\n    launch("gemm", D, C, E)  # kernel 2',
    )
    with pytest.raises(CypressError) as e:
        compile_program(tree(p, SMALL), until="dependence-analysis")
    assert e.value.code == "E051" and "between kernels" in e.value.message
    assert (
        e.value.loc.line
        == p.read_text().splitlines().index("    X: tensor[2, f32] = make_tensor(M, N)") + 1
    )


def test_a_statement_launching_two_kernels_is_e051(tmp_path):
    p = _variant(
        tmp_path,
        '    for i, j in prange(cdiv(M, U), cdiv(N, V)):\n        launch("gemm", Cp[i, j], Ap[i, 0], Bp[0, j])',
        '    for i, j in prange(cdiv(M, U), cdiv(N, V)):\n        launch("gemm", Cp[i, j], Ap[i, 0], Bp[0, j])\n'
        '    for i, j in prange(cdiv(M, U), cdiv(N, V)):\n        launch("gemm", Cp[i, j], Ap[i, 0], Bp[0, j])',
    )
    with pytest.raises(CypressError) as e:
        compile_program(tree(p, SMALL), until="dependence-analysis")
    assert e.value.code == "E051" and "launches 2 kernels" in e.value.message
    assert (
        e.value.loc.line
        == p.read_text().splitlines().index('    launch("gemm", C, A, B)  # kernel 1') + 1
    )


FAB = ROOT / "tests" / "programs" / "flash_attention_bwd.cyp"
FAB_MAP = ROOT / "tests" / "mappings" / "flash_attention_bwd" / "h100_d128.yaml"


def test_the_attention_backward_is_three_kernels_each_with_its_knobs():
    t = tree(FAB, FAB_MAP)
    assert not t.warnings  # W002 per kernel: each kernel's BLOCK instance takes its own knobs
    ks = compile_program(t, until="dependence-analysis")
    names = [k[0][1].name for k in ks]
    assert names == [f"flash_attention_bwd_{b}" for b in ("prep_block", "dkdv_block", "post_block")]
    knobs = [k[0][1].target.block for k in ks]
    assert [b.warpspecialize for b in knobs] == [False, True, False]
    assert knobs[1].consumer_registers == 240 and knobs[1].pipeline == 2


FAB_D64 = FAB_MAP.with_name("h100_d64.yaml")


@pytest.mark.parametrize("mapping", [FAB_MAP, FAB_D64], ids=["d128", "d64"])
def test_the_attention_backward_main_kernel_passes_the_concurrent_interpreter(mapping):
    """The main kernel with LSE and Dsum staged in shared memory (a vector piece per step from
    the producer's TMA, the pipeline's 2 stages): two query heads of two ragged query blocks,
    4 steps, two wraps of the pipeline; at head dimension 64 with dQ split by keys (each
    warpgroup its own rows of the staged dSᵀ and of K: MN-major operands at a K row)."""
    s = dict(compile_program(tree(FAB, mapping), until="sync-insertion")[1])
    sizes = dict(B=1, H=2, HK=1, M=70, N=128, D=8, causal=0)
    v = check_schedules(s["sync-insertion"], s["warp-specialization"], sizes=sizes, schedules=2)
    assert v.finding is None, v.line("flash_attention_bwd")


@pytest.mark.parametrize(
    ("mapping", "causal"),
    # the d64 mapping's main kernel is checked against the sequential interpreter above (make
    # test) and against NumPy here under make test-full (8 s: the ten-minute budget)
    [(FAB_MAP, 1)] + pick([], [(FAB_MAP, 0), (FAB_D64, 0), (FAB_D64, 1)]),
    ids=lambda x: x.stem if isinstance(x, Path) else f"causal{x}",
)
def test_the_attention_backward_gives_the_gradients(mapping, causal):
    """The whole program (its three kernels one after another) in the interpreter, latest
    first, against NumPy: dQ, dK, dV of softmax(Q Kᵀ · scale) V, two query heads on one
    key/value head (dK, dV summed over both), causal or not, two ragged query and key blocks;
    at head dimension 64 dQ is split by keys (h100_d64.yaml: variant dq_keys)."""
    whole = dependence_analysis(tree(FAB, mapping))
    dims = {"B": 1, "H": 2, "HK": 1, "M": 70, "N": 130, "D": 64, "causal": causal}
    sizes = {s: dims[s.rsplit("_", 1)[0] if s not in dims else s] for s in whole.scalars}
    sc = sizes["scale"] = 0.125
    a = random_inputs(whole, sizes, seed=1)
    q, do = (a[n].astype(np.float64) for n in ("Q", "dO"))
    k, v = (np.repeat(a[n].astype(np.float64), 2, axis=1) for n in ("K", "V"))  # GQA: 2 per head
    s = q @ np.swapaxes(k, -1, -2) * sc
    if causal:
        s = np.where(np.arange(130)[None, :] <= np.arange(70)[:, None], s, -np.inf)
    lse = np.log(np.exp(s).sum(-1))
    p = np.exp(s - lse[..., None])
    a["LSE"][...], a["O"][...] = lse, p @ v
    for n in ("dQ", "dK", "dV", "Dsum", "dQacc"):
        a[n][...] = np.nan
    ds = p * (do @ np.swapaxes(v, -1, -2) - (do * a["O"]).sum(-1)[..., None])
    want = {
        "dV": (np.swapaxes(p, -1, -2) @ do).sum(1, keepdims=True),
        "dK": (sc * np.swapaxes(ds, -1, -2) @ q).sum(1, keepdims=True),
        "dQ": sc * ds @ k,
    }
    interp.run(whole, sizes, a, seed=interp.LATEST_FIRST)
    for n, w in want.items():
        err = np.linalg.norm(a[n].astype(np.float64) - w) / np.linalg.norm(w)
        assert err < 3e-3, (n, err)
