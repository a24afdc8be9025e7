"""A main-loop step's divisions by run-time values are named once at the top of the step
(:mod:`cypressc.backend.step_lets`): the attention backward's query head ``kb // n`` and
query block ``kb % n`` of a loop over heads times blocks."""

from __future__ import annotations

from dataclasses import dataclass

from cypressc.backend import plan as P
from cypressc.backend.cexpr import KVar, cexpr
from cypressc.backend.step_lets import hoist_step_divisions
from cypressc.ir import nodes as N

B, C, V = N.IBin, N.IConst, N.IVar
KB, n = KVar("kb"), B("-", V("nq"), V("i0"))


@dataclass(frozen=True)
class _Stmt:
    at: N.IExpr
    args: tuple
    label: str = "x"


def test_each_division_of_the_step_by_a_run_time_value_is_named_once():
    head, block = B("//", KB, n), B("%", KB, n)
    col = B("*", B("+", V("i0"), block), C(64))
    stmts = [
        _Stmt(
            B("+", B("*", V("b0"), V("H")), head), (P.ExtArg("vec", "LSE", col0=col, batch=head),)
        ),
        _Stmt(col, (B("//", KB, C(2)), B("%", V("t"), n))),
    ]
    lets, out = hoist_step_divisions(stmts)
    assert [(k, cexpr(e, top=True)) for k, e in lets] == [
        ("kq0", "kb / (nq - i0)"),
        ("kq1", "kb % (nq - i0)"),
    ]
    assert cexpr(out[0].at) == "((b0 * H) + kq0)"
    assert (
        cexpr(out[0].args[0].batch) == "kq0" and cexpr(out[0].args[0].col0) == "((i0 + kq1) * 64)"
    )
    # a constant divisor, or a dividend without the step, stays; the rest is untouched
    assert cexpr(out[1].at) == "((i0 + kq1) * 64)"
    assert out[1].args[1:] == stmts[1].args[1:] and out[1].label == "x"
    assert stmts[0].at.b == head  # the statements given are not modified


def test_statements_without_such_a_division_come_back_as_they_are():
    stmts = [_Stmt(B("%", KB, C(2)), (B("//", V("M"), V("U")),))]
    lets, out = hoist_step_divisions(stmts)
    assert lets == [] and out[0] is stmts[0]
