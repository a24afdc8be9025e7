"""The deferred quad reduction of row sums (``cypressc.backend.peephole.defer_row_sums``):
FlashAttention's ``l`` is kept as each lane's part of its rows through the key loop and summed
across the quad once, where the finish first reads it; any use that would see the parts keeps
the per-step reduction.  Plan-level cases on hand-written statements, then the kernels."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from dataclasses import replace

from cypressc.backend import plan as P
from cypressc.backend.peephole import defer_row_sums, guard_dead_row_sums, register_names
from cypressc.cli import main
from cypressc.ir import nodes as N
from cypressc.lang.intrinsics import LEAF_FUNCTIONS, IntrinsicKind

ROOT = Path(__file__).resolve().parents[2]
ZERO, MINF = N.IConst(0.0), N.IConst(-1e30)


# a row leaf the registry does not have: of a kind whose per-row results differ across a quad
PER_LANE = replace(LEAF_FUNCTIONS["mask_columns"], name="per_lane", kind=IntrinsicKind.MASK)


def _op(ev, fn, *args, value=None):
    leaf = PER_LANE if fn == "per_lane" else LEAF_FUNCTIONS[fn]
    return P.RowOp(ev, leaf, tuple(args), 1, value)


def _plan(before, loop, after) -> P.KernelPlan:
    plan = P.KernelPlan("k", [], [], [], 0, False, 1, 2, [], [], [], [], [])
    plan.consumer = P.RoleCode(list(before), [list(loop)], [list(after)])
    plan.row_vectors = [P.RowVector(n, 64) for n in ("l", "m", "alpha")]
    return plan


FILL_L, FILL_M = (
    _op("%e1", "fill", ("row", "l"), value=ZERO),
    _op("%e2", "fill", ("row", "m"), value=MINF),
)
SUM0 = _op("%e3", "warpgroup_row_sum", ("row", "l"), ("frag", "S0"))
MAX = _op("%e4", "warpgroup_row_max", ("row", "m"), ("frag", "S"))
SCALE = _op("%e5", "scale_rows", ("row", "l"), ("row", "alpha"))
SUM = _op("%e6", "warpgroup_row_sum", ("row", "l"), ("frag", "S"))
DIV = _op("%e7", "div_rows", ("frag", "O"), ("row", "l"))
LSE = _op("%e8", "row_log_sum_exp", ("row", "lse"), ("row", "m"), ("row", "l"), value=N.IConst(1.0))
SYNC = P.Sync(None, "")  # sync statements order accesses and never count as uses


def _fns(plan):
    return [
        (st.event, st.partial, st.reduce) for st in plan.consumer.all() if isinstance(st, P.RowOp)
    ]


def test_the_row_sum_is_reduced_once_where_the_finish_first_reads_it():
    plan = _plan([FILL_L, FILL_M, SUM0], [MAX, SCALE, SUM, SYNC], [DIV, LSE])
    plan.epilogue = [DIV, LSE]  # a statement may sit in two lists: both get the new one
    defer_row_sums(plan)
    got = {ev: (partial, red) for ev, partial, red in _fns(plan)}
    assert got["%e3"] == (True, ()) and got["%e6"] == (True, ())  # both sums: this lane's part
    assert got["%e7"] == (False, ("l",))  # the first read sums the parts across the quad
    assert got["%e8"] == (False, ()) and got["%e5"] == (
        False,
        (),
    )  # the scale distributes over them
    assert plan.epilogue[0].reduce == ("l",) and plan.epilogue[1] is LSE


def test_uses_that_would_see_the_parts_keep_the_per_step_reduction():
    cases = {
        "read in the loop": ([FILL_L, SUM0], [SUM, DIV], [LSE]),
        "not zeroed first": (
            [_op("%e1", "fill", ("row", "l"), value=N.IConst(1.0)), SUM0],
            [SUM],
            [DIV],
        ),
        "a sum after the read": ([FILL_L, SUM0, DIV], [SUM], [LSE]),
        "scaled by a deferred sum": (
            [
                FILL_L,
                _op("%e9", "fill", ("row", "alpha"), value=ZERO),
                SUM0,
                _op("%e10", "warpgroup_row_sum", ("row", "alpha"), ("frag", "S0")),
            ],
            [_op("%e5", "scale_rows", ("row", "l"), ("row", "alpha")), SUM],
            [DIV],
        ),
        "copied out": (
            [FILL_L, SUM0],
            [SUM],
            [P.RowStore("%e11", "l", "LSE", ZERO, None, None), DIV],
        ),
        "written by the max": (
            [FILL_L, SUM0],
            [SUM],
            [_op("%e12", "warpgroup_row_max", ("row", "l"), ("frag", "S"))],
        ),
        "scaled by a vector of another leaf": (
            [FILL_L, SUM0, _op("%e13", "per_lane", ("row", "alpha"), ("frag", "S0"))],
            [SCALE, SUM],
            [DIV],
        ),
    }
    for what, (before, loop, after) in cases.items():
        plan = _plan(before, loop, after)
        defer_row_sums(plan)
        changed = [
            (ev, p, r) for ev, p, r in _fns(plan) if ev in ("%e3", "%e6", "%e7") and (p or r)
        ]
        assert not changed, (what, changed)


def test_the_rewrite_matches_kinds_not_names():
    """Leaves of the kinds the rewrite matches (a row sum, a row scale) get it whatever their
    names; a leaf of another kind in the same place does not."""
    summ = replace(LEAF_FUNCTIONS["warpgroup_row_sum"], name="my_row_sum")
    scale = replace(LEAF_FUNCTIONS["scale_rows"], name="my_scale_rows")
    mine = [replace(SUM0, leaf=summ), replace(SCALE, leaf=scale), replace(SUM, leaf=summ)]
    plan = _plan([FILL_L, FILL_M, mine[0]], [MAX, mine[1], mine[2]], [DIV, LSE])
    defer_row_sums(plan)
    got = {ev: (partial, red) for ev, partial, red in _fns(plan)}
    assert got["%e3"] == (True, ()) and got["%e6"] == (True, ()) and got["%e7"] == (False, ("l",))
    # the same leaves declared as a row max: no row sum to defer
    other = replace(summ, kind=IntrinsicKind.ROW_MAX)
    plan = _plan([FILL_L, replace(SUM0, leaf=other)], [replace(SUM, leaf=other)], [DIV])
    defer_row_sums(plan)
    assert not any(p or r for _, p, r in _fns(plan))
    # a row divide in the scale's place does not distribute as a finite scale does
    div = replace(SCALE, leaf=LEAF_FUNCTIONS["div_rows"])
    plan = _plan([FILL_L, FILL_M, SUM0], [MAX, div, SUM], [DIV, LSE])
    defer_row_sums(plan)
    assert not any(p or r for _, p, r in _fns(plan))


def test_a_name_elsewhere_in_a_statement_is_no_use():
    """Uses are the fields that hold register values: a tensor, buffer or expression variable
    spelled like the vector is none (they once blocked the rewrites as any equal string)."""
    store = P.RowStore("%e11", "lse", "l", N.IVar("l"), None, None)  # into a tensor named l
    assert register_names(store) == {"lse"}
    assert register_names(SCALE) == {"l", "alpha"}
    plan = _plan([FILL_L, FILL_M, SUM0], [MAX, SCALE, SUM], [DIV, LSE, store])
    defer_row_sums(plan)
    got = {ev: (partial, red) for ev, partial, red in _fns(plan)}
    assert got["%e6"] == (True, ()) and got["%e7"] == (False, ("l",))


def test_dead_row_sums_compare_guards_as_expressions():
    """A SIMT row sum whose vector only stores read runs under their ``when`` when every store
    has the same one, equal as an expression (not as printed text)."""
    when = N.IBin("==", N.IVar("b1"), N.IBin("-", N.IVar("tiles1"), N.IConst(1)))
    rs = P.RowSum("%e1", "y", "A", N.IConst(0), 64, 0, 64, "f16", N.IConst(True))

    def stores(*whens):
        return [
            P.StoreVector(f"%e{9 + i}", "y", "Y", N.IConst(0), 64, N.IConst(True), w)
            for i, w in enumerate(whens)
        ]

    for whens, guarded in (
        ((when, N.IBin("==", N.IVar("b1"), N.IBin("-", N.IVar("tiles1"), N.IConst(1)))), True),
        ((when, N.IBin("==", N.IVar("b1"), N.IConst(0))), False),
        ((when, None), False),
    ):
        plan = _plan([P.FillVector("%e0", "y", ZERO)], [rs], stores(*whens))
        plan.simt_body = [rs]
        guard_dead_row_sums(plan)
        assert (plan.simt_body[0].active == when) is guarded, whens


def test_a_second_pass_changes_nothing():
    plan = _plan([FILL_L, FILL_M, SUM0], [MAX, SCALE, SUM], [DIV, LSE])
    defer_row_sums(plan)
    once = _fns(plan)
    defer_row_sums(plan)  # the parts must not be reduced twice
    assert _fns(plan) == once and sum(len(r) for _, _, r in once) == 1


def test_the_reduced_sum_may_be_read_again_in_a_later_loop():
    plan = _plan([FILL_L, SUM0], [SUM], [DIV])
    plan.consumer.loops.append([_op("%e14", "div_rows", ("frag", "O2"), ("row", "l"))])
    plan.consumer.afters.append([LSE])
    defer_row_sums(plan)
    got = {ev: (partial, red) for ev, partial, red in _fns(plan)}
    assert got["%e7"] == (False, ("l",)) and got["%e14"] == (False, ()) and got["%e6"] == (True, ())


def test_flash_attention_kernels_sum_their_row_sums_once_per_tile(tmp_path):
    for prog, mapping in (
        ("flash_attention3", "h100_d64_pp_staged_persistent"),
        ("flash_attention2", "h100"),
    ):
        out = tmp_path / prog
        r = CliRunner().invoke(
            main,
            [
                "build",
                str(ROOT / "programs" / f"{prog}.cyp"),
                "-m",
                str(ROOT / "tests/mappings/full" / prog / f"{mapping}.yaml"),
                "-o",
                str(out),
            ],
        )
        assert r.exit_code == 0, r.output
        cu = (out / f"{prog}.cu").read_text()
        assert (
            "cypress::warpgroup_row_sum(" not in cu
            and "cypress::warpgroup_row_sum_partial(l_" in cu
        )
        assert cu.count("cypress::quad_reduce(") == 1
        body = cu[cu.index("// ---- consumer warpgroups") :]
        loop = body.index("for (int kb = 0; kb < num_k; ++kb) {")
        red, div = body.index("cypress::quad_reduce(l_"), body.index("cypress::div_rows(")
        assert loop < red < div  # after the key loop, right before the finish reads l
        runtime = (ROOT / "cypressc/backend/runtime/cypress.cuh").read_text()
        assert "void warpgroup_row_sum_partial(" in runtime and "void quad_reduce(" in runtime
