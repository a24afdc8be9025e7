"""The leaves over accumulator rows (the online softmax of FlashAttention, issue #11) on
tests/programs/attention.cyp: per-row vectors laid out by ``partition_by_mma(v, ATOM, PROC, "C")``,
the quad reductions and the row-broadcast leaves in the kernel, the quad-replicated pieces
in the interpreters, the wait (and register fence) that a loop-carried wgmma -> thread edge
gets when an earlier wait already retired its group, and (with nvcc) a kernel without spills
or ptxas-injected wgmma waits."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cypressc.backend import plan as P
from cypressc.cli import main
from cypressc.ir.check import random_inputs, run_module
from cypressc.ir import sync as S
from cypressc.ir.interp import _Interp
from cypressc.ir.printer import event_names
from cypressc.ir.shapes import mma_coords
from cypressc.lang.checker import check_program
from cypressc.lang.intrinsics import LEAF_FUNCTIONS, Operand
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]
ATT = ROOT / "tests" / "programs" / "attention.cyp"
ATT_MAP = ROOT / "tests" / "mappings" / "attention.yaml"
ATT_SMALL = ROOT / "tests" / "mappings" / "attention_small.yaml"


def _build(tmp_path: Path) -> str:
    out = tmp_path / "att"
    r = CliRunner().invoke(main, ["build", str(ATT), "-m", str(ATT_MAP), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return (out / "attention.cu").read_text()


def test_a_per_row_vector_piece_is_the_rows_of_the_accumulator_piece():
    for lane in (0, 5, 31):
        rows, _ = mma_coords((64, 16), "THREAD", "C", lane)
        (vrows,) = mma_coords((64,), "THREAD", "C", lane)
        assert (
            list(vrows)
            == list(rows)
            == [16 * q + lane // 4 + 8 * h for q in range(4) for h in (0, 1)]
        )
    # the 4 lanes of a quad hold the same rows
    assert all(
        np.array_equal(
            mma_coords((64,), "THREAD", "C", 4)[0], mma_coords((64,), "THREAD", "C", t)[0]
        )
        for t in (5, 6, 7)
    )


def test_row_leaf_semantics_read_the_whole_rows_and_broadcast_per_row():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    rows = np.array([0, 2])
    m = Operand(np.array([5.0, -1.0], np.float32), (rows,))
    got = LEAF_FUNCTIONS["warpgroup_row_max"].semantics(
        m, Operand(x, (np.arange(3), np.arange(4)))
    )[0]
    assert list(got) == [5.0, 11.0]
    got = LEAF_FUNCTIONS["warpgroup_row_sum"].semantics(
        m, Operand(x, (np.arange(3), np.arange(4)))
    )[0]
    assert list(got) == [5.0 + 6, -1.0 + 38]
    piece = Operand(x[rows][:, :2], (rows, np.arange(2)))
    v = Operand(np.array([1.0, 10.0, -np.inf]), (np.arange(3),))
    got = LEAF_FUNCTIONS["exp2_diff"].semantics(piece, v, 0.5)[0]
    expected = np.stack(
        [np.exp2((x[0, :2] - 1.0) * 0.5), np.exp2(x[2, :2] * 0.5)]
    )  # row 2's max is -inf: as 0
    assert np.allclose(got, expected)
    assert np.array_equal(
        LEAF_FUNCTIONS["scale_rows"].semantics(piece, v)[0],
        x[rows][:, :2] * np.array([[1.0], [-np.inf]]),
    )
    assert np.allclose(
        LEAF_FUNCTIONS["div_rows"].semantics(Operand(x[:2], (np.arange(2), np.arange(4))), v)[0],
        x[:2] / np.array([[1.0], [10.0]]),
    )


def test_each_lane_of_a_quad_updates_its_own_copy_of_a_row(monkeypatch):
    """A collective row leaf runs for every member on the warpgroup's gathered tile: the 4
    lanes of a quad hold the same rows of l, each in its own fresh tensor (its registers on
    the GPU), so all 128 lanes of a warpgroup update theirs and copy back equal values; the
    result is softmax(Q Kᵀ · 0.125) V before and after copy elimination."""
    tree = instantiate(check_program(parse_file(ATT)), load_mapping(ATT_SMALL))
    snaps = dict(compile_module(tree, until="copy-elimination"))
    sizes = dict(M=64, D=16, N=32)
    inputs = random_inputs(snaps["dependence-analysis"], sizes, seed=3)
    q, k, v = (inputs[x].astype(np.float64) for x in "QKV")
    sc = q @ k.T * 0.125
    p = np.exp(sc - sc.max(axis=1, keepdims=True))
    ref = p / p.sum(axis=1, keepdims=True) @ v
    real_group, real_call = _Interp.call_group, _Interp.call
    groups: list[tuple[int, int]] = []
    calls = [0]

    def group(self, op, members):
        before = calls[0]
        real_group(self, op, members)
        if op.fn == "warpgroup_row_sum":
            groups.append((len(members), calls[0] - before))

    def call(self, op, scope, env, whole=None):
        calls[0] += 1
        return real_call(self, op, scope, env, whole)

    monkeypatch.setattr(_Interp, "call_group", group)
    monkeypatch.setattr(_Interp, "call", call)
    for name in ("dependence-analysis", "copy-elimination"):
        groups.clear()
        got = run_module(snaps[name], sizes, inputs, ["O"], None)["O"].astype(np.float64)
        assert groups and set(groups) == {(128, 128)}, (name, set(groups))
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2, name


def test_the_kernel_reduces_across_the_quad_and_fences_the_rescaled_accumulator(tmp_path):
    cu = _build(tmp_path)
    # the row sum keeps each lane's part through the loop and reduces across the quad once, before
    # the finish reads it (tests/backend/test_deferred_row_sums.py)
    assert "cypress::warpgroup_row_max(m_" in cu and "cypress::warpgroup_row_sum_partial(l_" in cu
    assert cu.count("cypress::quad_reduce(l_") == 1
    assert (
        "cypress::exp2_diff(" in cu
        and "cypress::exp2_diff_vec(" in cu
        and "cypress::scale_vec(" in cu
    )
    assert "float m_reg[1][2];" in cu
    # the O rescale of step k touches the accumulator the P·V wgmma of step k-1 wrote: the
    # wait after S = Q·Kᵀ already retires that group, and carries the edge, so the O fragment
    # is fenced there (the compiler keeps the rescale after the wait)
    m = compiled.snapshots(ATT, ATT_MAP)[-1][1]
    names, loop = event_names(m), m.kernel.consumer.loops[0]
    pv = next(st for st in loop if isinstance(st, P.Mma) and st.acc == "Oacc_reg")
    rescale = next(
        st for st in loop if isinstance(st, P.RowOp) and st.args[0] == ("frag", "Oacc_reg")
    )
    waits = [
        st
        for st in loop
        if isinstance(st, P.Sync) and isinstance(st.op, S.WaitGroup) and st.op.unit == "wgmma"
    ]
    carried = [
        w
        for w in waits
        for e in w.op.edges
        if (names.get(e.src), names.get(e.dst), e.hazard, e.tensor, e.via, e.distance)
        == (pv.event, rescale.event, "raw", "Oacc_reg", "carried", 1)
    ]
    assert len(carried) == 1 and carried[0].op.pending == 0, carried
    wait = carried[0]
    assert loop.index(wait) < loop.index(rescale) < loop.index(pv)
    assert "Oacc_reg" in wait.accs  # the fragments the wait fences, printed after it
    # the same wait in the kernel's main loop (the loop's waits print in order)
    body = cu[cu.index("// ---- consumer warpgroups") :]
    body = body[body.index("for (int kb = 0;") :].splitlines()
    at = [i for i, line in enumerate(body) if re.search(r"cypress::wait<\d+>\(\);", line)]
    line = at[waits.index(wait)]
    assert "cypress::wait<0>();" in body[line], body[line]
    assert any("fence_acc(Oacc_reg[0])" in x for x in body[line + 1 : line + 4]), body[line:]
    runtime = (ROOT / "cypressc/backend/runtime/cypress.cuh").read_text()
    assert (
        "__shfl_xor_sync(0xffffffffu, v, 1)" in runtime
        and "__shfl_xor_sync(0xffffffffu, v, 2)" in runtime
    )


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_the_attention_kernel_has_no_spills_and_no_injected_wgmma_waits(tmp_path, clean_ptxas):
    _build(tmp_path)
    clean_ptxas(tmp_path / "att", "libattention.so")


def test_only_the_tensor_core_leaves_are_asynchronous():
    rows = ("warpgroup_row_max", "warpgroup_row_sum", "exp2_diff", "scale_rows", "div_rows")
    assert all(
        LEAF_FUNCTIONS[f].collective == "WARPGROUP" and not LEAF_FUNCTIONS[f].asynchronous
        for f in rows
    )
    assert (
        LEAF_FUNCTIONS["warpgroup_mma"].asynchronous
        and LEAF_FUNCTIONS["warpgroup_mma_bt"].asynchronous
    )
    assert not any(LEAF_FUNCTIONS[f].asynchronous for f in ("fill", "copy", "add", "row_sum"))
