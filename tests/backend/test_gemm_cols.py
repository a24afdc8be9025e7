"""A block tile split among its warpgroups by columns (issue #38: the attention backward's
dQ of one 64-query block is shared by two warpgroups): tests/programs/gemm_cols.cyp under the
library's `wgmma_cols` template.  Each consumer warpgroup's wgmma reads its own chunk of the B
stage (a descriptor over ``cw``) and stores its own columns of C; the interpreters agree with
NumPy; a per-warpgroup column that is not a swizzle chunk is refused (E050) at the BLOCK
instance.  The GPU check is ``gemm_cols`` in bench/gpu_check.py."""

from __future__ import annotations

import numpy as np
import pytest

from cypressc.build import render_build
from cypressc.diagnostics import CypressError
from cypressc.ir import interp
from cypressc.ir.check import random_inputs
from tests.compiled import ROOT, snapshots, tree

PROG = ROOT / "tests" / "programs" / "gemm_cols.cyp"
MAP = ROOT / "tests" / "mappings" / "gemm_cols.yaml"
SMALL = ROOT / "tests" / "mappings" / "gemm_cols_small.yaml"


@pytest.mark.parametrize("order", [None, interp.LATEST_FIRST, 5])
def test_interpreter_after_sync_insertion(order):
    m = dict(snapshots(PROG, SMALL, until="sync-insertion"))["sync-insertion"]
    sizes = {"M": 70, "N": 200, "K": 48}
    a = random_inputs(m, sizes, seed=2)
    a["C"][...] = np.nan
    interp.run(m, sizes, a, seed=order)
    want = a["A"].astype(np.float64) @ a["B"].astype(np.float64)
    np.testing.assert_allclose(a["C"].astype(np.float64), want, rtol=2e-2, atol=2e-2)


def test_each_warpgroup_reads_and_stores_its_own_columns():
    cu = render_build(tree(PROG, MAP)).files["gemm_cols.cu"]
    assert "((cw * 128) / 64) * B_smem_CHUNK" in cu  # the B descriptor: chunk 2·cw
    assert "(b1 * 256) + (cw * 128)" in cu  # the TMA store: columns 128·cw of the tile


def test_a_warpgroup_column_off_the_swizzle_chunks_is_refused(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text(MAP.read_text().replace("V: 256", "V: 96"))  # 48 columns per warpgroup
    with pytest.raises(CypressError) as e:
        render_build(tree(PROG, bad))
    assert e.value.code == "E050" and "B operand columns at" in e.value.message, str(e.value)
    assert "for consumer warpgroup 1" in e.value.message
