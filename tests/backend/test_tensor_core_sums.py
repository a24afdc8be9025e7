"""gemm_reduction's row sums on the Tensor Core (variant gemm_reduction_block_tc, mappings
h100_tc / h100_tc_plain) and what it needed from the compiler: the ``"Bt"`` operand of
``partition_by_mma`` (a B operand stored N x K), a block-local tensor that takes the memory of
the task that fills it (copy elimination), a SIMT ``fill`` of a shared tile (cuda-lowering);
and the dead-row-sum guard that the SIMT variant's lastprivate ``y`` allows (peephole)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cypressc.backend import plan as P
from cypressc.backend.cexpr import KVar, cexpr
from cypressc.backend.peephole import guard_dead_row_sums
from cypressc.diagnostics import CypressError, Loc
from cypressc.ir import nodes as N
from cypressc.ir.analysis import Symbols
from cypressc.ir.shapes import mma_piece_shape
from cypressc.ir.subst import walk_ops
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module

ROOT = Path(__file__).resolve().parents[2]


def _snaps(mapping: str) -> dict:
    tree = instantiate(
        check_program(parse_file(ROOT / "programs" / "gemm_reduction.cyp")),
        load_mapping(ROOT / "tests/mappings/full" / "gemm_reduction" / f"{mapping}.yaml"),
    )
    return dict(compile_module(tree))


def test_bt_pieces_are_the_whole_tile_with_k_along_the_columns():
    c = N.IConst
    assert mma_piece_shape((c(8), c(64)), "WGMMA_64x8x16", "WARP", "Bt", Loc("t")) == (c(8), c(64))
    with pytest.raises(CypressError) as e:  # read as "B" (K x N), the 8 rows are its K
        mma_piece_shape((c(8), c(64)), "WGMMA_64x8x16", "WARP", "B", Loc("t"))
    assert (
        e.value.code == "E040"
        and "the B tile's K extent 8 is not a multiple of 16" in e.value.message
    )
    with pytest.raises(CypressError) as e:
        mma_piece_shape((c(8), c(24)), "WGMMA_64x8x16", "WARP", "Bt", Loc("t"))
    assert (
        e.value.code == "E040"
        and "the Bt tile's K extent 24 is not a multiple of 16" in e.value.message
    )


def test_the_filled_table_lives_where_its_filler_put_it():
    """E is made NONE in the block; "ones" fills it in SHARED and "mma_sums" reads it in SHARED:
    copy elimination gives E the filler's memory instead of refusing it (E044), and no copy of
    E is left."""
    m = _snaps("h100_tc")["copy-elimination"]
    sym = Symbols(m)
    assert sym.allocs["E"].mem == "SHARED"
    assert not any(
        isinstance(o, N.Copy) and "E" in (sym.root(o.src), sym.root(o.dst))
        for o in walk_ops(m.body)
    )
    assert not [a for a in sym.allocs if a.startswith("E_")]  # the callees' fresh copies are gone


def test_the_table_fill_lowers_to_swizzled_shared_stores_on_every_consumer_thread():
    plan = _snaps("h100_tc")["cuda-lowering"].kernel
    (fill,) = [st for st in plan.prologue if isinstance(st, P.FillShared)]
    buf = next(b for b in plan.buffers if b.name == fill.buf)
    assert (buf.rows, buf.cols, buf.swizzle, buf.stages) == (8, 64, 128, 1)
    assert (fill.rows, fill.cols, cexpr(fill.value)) == (1, 2, "0.125")
    assert (
        isinstance(fill.active, N.IConst) and fill.active.value is True
    )  # 2 x 4 warps x 32 lanes: all of E
    mma = [x for x in plan.body if x.b_buf == fill.buf]
    assert len(mma) == 1 and mma[0].b_kmajor and mma[0].n == 8


def _row_sum_plan():
    return _snaps("h100")["cuda-lowering"].kernel


def test_a_row_sum_only_the_last_column_tile_stores_runs_only_there():
    plan = _row_sum_plan()
    (rs,) = {id(st): st for st in plan.simt_body if isinstance(st, P.RowSum)}.values()
    (store,) = [st for st in plan.epilogue if isinstance(st, P.StoreVector) and st.vec == rs.vec]
    assert store.when is not None
    assert rs.active == N.IBin("&&", N.IBin("<", KVar("tw"), N.IConst(64)), store.when)
    assert rs in plan.consumer.loops[0]  # the loop's copy of the statement is the guarded one too


def test_a_row_sum_stored_everywhere_stays_unguarded():
    plan = _row_sum_plan()
    (rs,) = {id(st): st for st in plan.simt_body if isinstance(st, P.RowSum)}.values()
    unguarded = replace(rs, active=N.IBin("<", KVar("tw"), N.IConst(64)))
    for lst in (plan.simt_body, *plan.consumer.sections()):
        lst[:] = [unguarded if st is rs else st for st in lst]
    plan.epilogue[:] = [
        replace(st, when=None) if isinstance(st, P.StoreVector) else st for st in plan.epilogue
    ]
    guard_dead_row_sums(plan)
    assert [st for st in plan.simt_body if isinstance(st, P.RowSum)] == [unguarded]
