"""The kernel's C printer (:mod:`cypressc.backend.cexpr`): plan statements carry typed IR
expressions over the kernel's variables, and this one module writes them as C++."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cypressc.backend import plan as P
from cypressc.backend.cexpr import KVar, PipeAt, cexpr, is_zero, mentions
from cypressc.backend.sync_lower import counted, who
from cypressc.ir import nodes as N
from cypressc.ir.sync import Guard
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module

ROOT = Path(__file__).resolve().parents[2]
V, C, B, K = N.IVar, N.IConst, N.IBin, KVar
a, b, c = V("a"), V("b"), V("c")


def test_index_arithmetic_is_grouped_at_every_level_and_top_drops_only_the_outer_pair():
    assert cexpr(B("*", B("+", a, b), c)) == "((a + b) * c)"
    assert cexpr(B("+", a, B("*", b, c))) == "(a + (b * c))"
    assert cexpr(B("+", a, B("*", b, c)), top=True) == "a + (b * c)"
    assert cexpr(B("-", a, B("-", b, c)), top=True) == "a - (b - c)"  # not a - b - c
    assert (
        cexpr(a) == cexpr(a, top=True) == "a" and cexpr(C(128)) == "128" and cexpr(C(2.0)) == "2.0"
    )


def test_floor_division_prints_as_c_division_and_calls_print_as_calls():
    assert cexpr(B("//", K("tw"), C(32))) == "(tw / 32)"
    assert cexpr(B("/", V("K"), C(64)), top=True) == "K / 64"
    assert cexpr(B("cdiv", B("+", V("M"), C(1)), C(64))) == "cdiv((M + 1), 64)"
    assert cexpr(B("min", K("num_k"), K("STAGES")), top=True) == "min(num_k, STAGES)"
    assert cexpr(B("max", C(0), B("%", a, C(2)))) == "max(0, (a % 2))"


def test_min_and_max_of_an_int_and_a_cdiv_widen_the_int():
    """The kernel's ``cdiv`` returns ``long long``: ``min(int, long long)`` matches several CUDA
    overloads, so the int operand is widened; two ints or two cdivs print as before."""
    q = B("cdiv", V("M"), C(64))
    assert (
        cexpr(B("min", B("/", K("b2"), C(2)), q))
        == "min(static_cast<long long>(b2 / 2), cdiv(M, 64))"
    )
    assert (
        cexpr(B("max", B("-", q, C(1)), V("N")))
        == "max((cdiv(M, 64) - 1), static_cast<long long>(N))"
    )
    assert cexpr(B("min", q, q)) == "min(cdiv(M, 64), cdiv(M, 64))"
    assert (
        cexpr(B("cdiv", B("min", V("N"), q), C(2)))
        == "cdiv(min(static_cast<long long>(N), cdiv(M, 64)), 2)"
    )


def test_the_printer_never_simplifies():
    """Folding is the IR builder's job (``ibin``): the printer shows what it is given, so a
    ``0 * x`` in the CUDA would mean an unfolded expression, not a printer quirk."""
    assert cexpr(B("*", C(0), a)) == "(0 * a)" and cexpr(B("+", a, C(0))) == "(a + 0)"
    assert N.ibin("*", C(0), a) == C(0) and N.ibin("+", a, C(0)) == a


def test_conditions_print_with_c_precedence():
    assert cexpr(B("==", K("b1"), B("-", K("tiles1"), C(1))), top=True) == "b1 == tiles1 - 1"
    assert cexpr(B("<", B("+", K("kb"), C(1)), C(4))) == "(kb + 1 < 4)"
    conj = B("&&", B("&&", K("leader"), B("==", K("cw"), C(0))), B("<", K("tw"), C(64)))
    assert cexpr(conj, top=True) == "leader && cw == 0 && tw < 64"
    # an operand that binds looser than its operator keeps its parentheses
    assert cexpr(B("==", B("&&", a, b), c), top=True) == "(a && b) == c"
    # an xor of parities groups its terms like arithmetic, its comparisons parenthesized
    parity = B("^", B("^", K("tphase"), B("<", K("kb"), C(1))), C(1))
    assert cexpr(parity) == "(tphase ^ (kb < 1) ^ 1)"
    assert cexpr(C(True), top=True) == "true" and cexpr(C(False)) == "false"


def test_a_pipeline_state_field_prints_as_member_access_and_binds_tightest():
    assert cexpr(PipeAt("pipe", "index")) == "pipe.index"
    assert cexpr(PipeAt("pipe_1", "phase", 2)) == "(pipe_1 + 2).phase"
    assert cexpr(PipeAt("pipe", "index", -1)) == "(pipe - 1).index"
    parity = B("^", PipeAt("pipe", "phase", 1), C(1))
    assert (
        cexpr(parity) == "((pipe + 1).phase ^ 1)"
        and cexpr(parity, top=True) == "(pipe + 1).phase ^ 1"
    )
    assert cexpr(B("==", PipeAt("pipe", "index"), C(0)), top=True) == "pipe.index == 0"
    with pytest.raises(ValueError, match="fields"):
        PipeAt("pipe", "stage")


def test_program_scalars_and_kernel_variables_are_different_names():
    """A size the program calls ``kb`` is an ``IVar``; the main loop's ``kb`` a ``KVar``: the
    printer spells the first through ``var`` (the emitter's name chooser), never the second."""
    e = B("*", K("kb"), V("kb"))
    assert cexpr(e) == "(kb * kb)"
    assert cexpr(e, var=lambda n: f"{n}_1") == "(kb * kb_1)"
    assert mentions(e, "kb") and not mentions(V("kb"), "kb")


def test_an_ir_guard_compares_two_grouped_indices():
    assert cexpr(Guard(B("-", K("num_k"), C(1)), C(0)), top=True) == "(num_k - 1) >= 0"
    assert cexpr(Guard(K("kb"), C(1))) == "(kb >= 1)"


def test_what_is_not_a_kernel_expression_is_refused():
    with pytest.raises(TypeError, match="warp index"):
        cexpr(B("+", N.IProc("WARP"), C(1)))
    with pytest.raises(TypeError):
        cexpr("kb")
    with pytest.raises(ValueError, match="no C operator"):
        cexpr(B("<<", a, C(1)))


def test_zero_and_mentions():
    assert is_zero(C(0)) and not is_zero(C(0.0)) and not is_zero(C(False)) and not is_zero(K("kb"))
    assert is_zero(C(0.0), exact=False) and not is_zero(C(-0.0), exact=False)
    assert mentions(B("&&", K("leader"), B("==", K("cw"), C(0))), "leader")
    assert mentions(PipeAt("pipe", "phase", 1), "pipe") and not mentions(K("leaders"), "leader")
    assert not mentions(None, "leader") and mentions(Guard(C(1), K("kb")), "kb")


@pytest.mark.parametrize("c", [0, -1, 1, 3, -3])
def test_counted_stages_are_the_pipeline_state_stepped(c):
    e = B("%", N.ibin("+", V("k"), C(c)), C(4))
    assert counted(e, "k", V("K"), 4, False, "pipe") == PipeAt("pipe", "index", c)


@pytest.mark.parametrize(
    ("c", "p", "expected"),
    [
        (0, 0, "pipe.phase"),
        (0, 1, "(pipe.phase ^ 1)"),
        (-1, 1, "((pipe - 1).phase ^ 1)"),
        (2, 0, "(pipe + 2).phase"),
    ],
)
def test_counted_parities_are_the_pipeline_state_phase(c, p, expected):
    k = V("k")
    e = B("%", N.ibin("+", B("//", N.ibin("+", k, C(c)), C(4)), C(p)), C(2))
    assert cexpr(counted(e, "k", V("K"), 4, False, "pipe")) == expected


def test_a_position_counted_otherwise_is_left_alone():
    k = V("k")
    assert counted(B("%", N.ibin("+", k, C(4)), C(4)), "k", V("K"), 4, False, "pipe") is None
    assert counted(B("%", k, C(3)), "k", V("K"), 4, False, "pipe") is None
    assert counted(B("//", k, C(4)), "k", V("K"), 4, False, "pipe") is None


def test_which_threads_run_an_op():
    procs = lambda *ps: tuple(N.Dim(C(4), p) for p in ps)  # noqa: E731
    lanes = who("consumer", procs("BLOCK", "WARPGROUP", "WARP"), False)
    assert cexpr(lanes, top=True) == "threadIdx.x % 32 == 0"
    assert cexpr(who("consumer", procs("BLOCK", "WARPGROUP"), False), top=True) == "leader"
    assert cexpr(who("consumer", procs("BLOCK"), False), top=True) == "leader && cw == 0"
    assert cexpr(who("consumer", procs("BLOCK"), True), top=True) == "issuer"
    assert (
        who("producer", procs("BLOCK"), False) is None
        and who("consumer", procs("THREAD"), False) is None
    )


def test_launcher_conditions_and_flops_come_from_the_printer():
    r = P.Require(B("%", V("N"), C(8)), "==", C(0), "")
    assert r.c == "N % 8 == 0"
    flops = B("*", B("*", B("*", C(2.0), V("M")), V("N")), V("K"))
    assert cexpr(flops, top=True) == "((2.0 * M) * N) * K"


_NAMES = {
    "event",
    "map",
    "buffer",
    "bar",
    "acc",
    "a_buf",
    "b_buf",
    "tensor",
    "vec",
    "buf",
    "dtype",
    "src",
    "dst",
    "other",
    "a_frag",
    "zero_fill",
    "note",
    "accs",
}


@pytest.fixture(scope="module")
def gemm_reduction_plan() -> P.KernelPlan:
    """A plan with every kind of statement expression: loads, wgmmas, counted stages and
    parities, guards, SIMT thread conditions, direct stores with a last-iteration guard."""
    tree = instantiate(
        check_program(parse_file(ROOT / "programs/gemm_reduction.cyp")),
        load_mapping(ROOT / "tests/mappings/full/gemm_reduction/h100_direct.yaml"),
    )
    return compile_module(tree)[-1][1].kernel


def test_plan_statements_keep_only_names_as_strings(gemm_reduction_plan):
    p = gemm_reduction_plan
    stmts = [
        *p.producer.all(),
        *p.consumer.all(),
        *p.issue_ahead,
        *p.exit,
        *p.prologue,
        *p.epilogue,
        *p.simt_body,
        *p.loads,
        *p.body,
    ]
    exprs = []
    for st in stmts:
        for f in dataclasses.fields(st):
            v = getattr(st, f.name)
            if f.name in _NAMES:
                continue
            assert not isinstance(v, str), f"{type(st).__name__}.{f.name} = {v!r} is C text"
            vs = v if isinstance(v, tuple) else (v,)
            exprs += [
                x for x in vs if isinstance(x, (N.IConst, N.IVar, KVar, PipeAt, N.IBin, Guard))
            ]
    assert isinstance(p.trip_count, N.IBin) and all(not isinstance(g, str) for g in p.grid)
    shown = [
        cexpr(e) for e in exprs
    ]  # every one is over the kernel's variables (no processor index)
    assert {
        "(b1 * 256)",
        "(kb * 64)",
        "(((b0 * 128) + (cw * 64)) + tw)",
        "(b1 == tiles1 - 1)",
    } <= set(shown)
    for text in shown:  # the lowering folds: no zero terms reach the kernel
        assert not any(z in text for z in ("(0 * ", " * 0)", " + 0)", "(0 + ")), text
