"""cuda-lowering decisions that the golden CUDA alone would not explain: the parallelized
HOST loop of gemm_reduction (lastprivate y), the SIMT row sum on the stages, and the
refusals that keep a HOST loop sequential when its iterations are not independent."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cypressc.backend import plan as P
from cypressc.backend.cexpr import cexpr
from cypressc.backend.lower import _Lower, cuda_lowering
from cypressc.backend.refusal import Refuse
from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir.analysis import Symbols
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module

ROOT = Path(__file__).resolve().parents[2]


def _compile(mapping: str):
    tree = instantiate(
        check_program(parse_file(ROOT / "programs/gemm_reduction.cyp")),
        load_mapping(ROOT / "tests/mappings/full/gemm_reduction" / mapping),
    )
    return compile_module(tree, until="sync-insertion")[-1][1]


@pytest.fixture(scope="module")
def reduction():
    return _compile("h100_direct.yaml")  # C stored straight from registers


def _host_loop(m: N.Module) -> N.For:
    (hl,) = [o for o in m.body.ops if isinstance(o, N.For)]
    return hl


def _with_host_body(m: N.Module, ops) -> N.Module:
    hl = _host_loop(m)
    new = replace(hl, body=replace(hl.body, ops=tuple(ops)))
    return replace(m, body=replace(m.body, ops=tuple(new if o is hl else o for o in m.body.ops)))


def test_host_loop_becomes_the_last_grid_dimension(reduction):
    m = reduction
    plan: P.KernelPlan = cuda_lowering(m).kernel
    assert plan.host_loop == "j" and [cexpr(g) for g in plan.grid] == [
        "cdiv(M, 128)",
        "cdiv(N, 256)",
    ]
    (c,) = [e for e in plan.epilogue if isinstance(e, P.StoreDirect)]
    (y,) = [e for e in plan.epilogue if isinstance(e, P.StoreVector)]
    assert c.when is None and cexpr(c.col0) == "(b1 * 256)"  # C[i, j]: disjoint per j
    # y[i]: the last j keeps it
    assert cexpr(y.when, top=True) == "b1 == tiles1 - 1" and cexpr(y.active, top=True) == "tw < 64"
    assert cexpr(y.index) == "(((b0 * 128) + (cw * 64)) + tw)"
    (rs,) = plan.simt_body
    # the row sum feeds only that store: the other column tiles skip it (peephole.guard_dead_row_sums)
    assert (rs.buf, rs.rows, rs.col0, rs.cols) == ("A_smem", 1, 0, 64)
    assert cexpr(rs.active, top=True) == "tw < 64 && b1 == tiles1 - 1"
    assert cexpr(rs.row) == "((cw * 64) + tw)" and plan.vectors == [P.Vector(rs.vec, 1)]
    assert [type(x) for x in plan.prologue] == [P.Fill, P.FillVector]


def test_staged_c_store_with_the_host_loop():
    """tests/mappings/full/gemm_reduction/h100.yaml stages C in shared memory: C needs no guard (its
    pieces are disjoint per j), y keeps the last-iteration guard."""
    plan = cuda_lowering(_compile("h100.yaml")).kernel
    assert [type(e) for e in plan.epilogue] == [P.StageWrite, P.TmaStore, P.StoreVector]
    assert cexpr(plan.epilogue[2].when, top=True) == "b1 == tiles1 - 1" and plan.persistent


def _refusal(m) -> str:
    with pytest.raises(CypressError) as ei:
        cuda_lowering(m)
    assert ei.value.code == "E050"
    return ei.value.message


def test_an_iteration_reading_what_another_writes_stays_sequential(reduction):
    m = reduction
    hl = _host_loop(m)
    reader = N.Copy("ev#read_y", N.TRef("y"), N.TRef("y"))  # y read inside the loop
    msg = _refusal(_with_host_body(m, [reader, *hl.body.ops]))
    assert "read y, which iterations write" in msg


def test_a_loop_bound_that_depends_on_the_host_variable_is_refused(reduction):
    m = reduction
    hl = _host_loop(m)
    ops = [
        replace(o, hi=N.ibin("+", o.hi, N.IVar("j"))) if isinstance(o, N.For) else o
        for o in hl.body.ops
    ]
    assert "depends on j" in _refusal(_with_host_body(m, ops))


def test_a_write_indexed_by_an_expression_of_j_is_refused(reduction):
    m = reduction
    hl = _host_loop(m)
    ops = []
    for o in hl.body.ops:
        if isinstance(o, N.Partition) and isinstance(o.base, N.Piece) and N.IVar("j") in o.base.idx:
            idx = tuple(N.ibin("+", i, N.IConst(1)) if i == N.IVar("j") else i for i in o.base.idx)
            o = replace(o, base=replace(o.base, idx=idx))
        ops.append(o)
    assert "indexes with an expression of j" in _refusal(_with_host_body(m, ops))


def test_a_parameter_nothing_touches_keeps_its_declared_privilege(tmp_path):
    """dual_gemm without the B1 launch: the kernel takes B1 (read-only, as declared) and leaves
    it alone, instead of writing a kernel ABI the runtime rejects (found by the fuzzer)."""
    lines = (ROOT / "programs/dual_gemm.cyp").read_text().splitlines(keepends=True)
    drop = [i for i, ln in enumerate(lines) if 'launch("mma", C1acc' in ln]
    assert len(drop) == 1
    del lines[drop[0]]
    prog = tmp_path / "dual_gemm.cyp"
    prog.write_text("".join(lines))
    tree = instantiate(
        check_program(parse_file(prog)),
        load_mapping(ROOT / "tests/mappings/full/dual_gemm/h100.yaml"),
    )
    plan = compile_module(tree)[-1][1].kernel
    access = {t.name: (t.reads, t.writes) for t in plan.tensors}
    assert access == {
        "D": (False, True),
        "A": (True, False),
        "B1": (True, False),
        "B2": (True, False),
    }


def _reduce_y(m: N.Module) -> N.Module:
    """``m`` with the leaf copy that writes y (in every column tile j) turned into a
    reduction, ``copy.add`` of the same registers into the same piece."""
    hl = _host_loop(m)
    sym = Symbols(m)

    def red(o):
        if isinstance(o, N.Call) and o.fn == "copy" and sym.root(o.args[1]) == "y":
            return N.Copy(o.ev, o.args[0], o.args[1], o.pre, o.dims, reduce="add")
        return o

    ops = [red(o) for o in hl.body.ops]
    assert sum(isinstance(o, N.Copy) and o.reduce == "add" for o in ops) == 1
    return _with_host_body(m, ops)


def test_iterations_reducing_into_one_tensor_run_as_parallel_blocks(reduction):
    """Reductions (copy.add) into y from every j commute: y is neither last-only nor a
    read-write conflict (issue #38); a read of it in the loop still keeps the loop
    sequential."""
    m = _reduce_y(reduction)
    low = _Lower(m)
    low._host_loop(_host_loop(m))
    assert low.host_var == "j" and "y" not in low.last_only
    reader = N.Copy("ev#read_y", N.TRef("y"), N.TRef("y"))
    m2 = _with_host_body(m, [reader, *_host_loop(m).body.ops])
    with pytest.raises(Refuse, match="read y, which iterations write"):
        _Lower(m2)._host_loop(_host_loop(m2))
    # the backend adds register fragments of whole warpgroups (red.global.add); a SIMT
    # vector's reduction on 64 threads is refused, naming the copy
    msg = _refusal(m)
    assert "copy.add %yacc_reg -> " in msg and "needs all 4 warps x 32 threads" in msg
