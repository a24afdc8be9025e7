"""The reduction privilege ``reduces=[...]`` in the front end (issue #38): the parser keeps
it, the checker's rules on it (E025, E038, E027, E030's exemption, E033) fire at the right
place, and tests/programs/reduce_rows.cyp checks clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from cypressc.diagnostics import CypressErrors
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file, parse_source

ROOT = Path(__file__).resolve().parents[2]

CLEAR_LEAF = """
@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
"""
ADD_INTO = """
@task("acc", Leaf, reads=["X"], reduces=["C"])
def acc_thread(C: tensor[2, f32], X: tensor[2, f32]):
    copy(X, C)
"""


def host(body: str, privs: str = 'reads=["X"], reduces=["C"]') -> str:
    return f'@task("h", Inner, {privs})\ndef h(C: tensor[2, f32], X: tensor[2, f32]):\n' + "".join(
        f"    {line}\n" for line in body.strip().splitlines()
    )


def errors(src: str) -> list:
    with pytest.raises(CypressErrors) as ei:
        check_program(parse_source(src, "c.cyp"))
    return ei.value.errors


PRANGE = """
Cp = partition_by_blocks(C, (16, 16))
Xp = partition_by_blocks(X, (16, 16))
for i, k in prange(2, 4):
    launch("acc", Cp[i, 0], Xp[i, k])
"""


def test_the_parser_keeps_reduces_and_the_test_program_checks_clean():
    prog = parse_file(ROOT / "tests/programs/reduce_rows.cyp")
    assert check_program(prog) is prog
    v = {v.name: v for v in prog.variants}
    assert v["splitk_host"].reduces == ("C",) and v["splitk_host"].writes == ()
    assert v["store_tile"].reduces == ()


def test_a_prange_of_reductions_into_one_piece_is_accepted():
    # every k reduces into Cp[i, 0]: reductions commute, so E030 does not apply
    check_program(parse_source(host(PRANGE) + ADD_INTO, "ok.cyp"))
    # ... and a caller holding writes= may pass its tensor to a reduction as well
    check_program(parse_source(host(PRANGE, 'reads=["X"], writes=["C"]') + ADD_INTO, "ok.cyp"))


@pytest.mark.parametrize(
    "src, code, line, frag",
    [
        (  # a privilege on something that is not a tensor parameter
            host('launch("acc", C, X)', 'reads=["X"], reduces=["D"]') + ADD_INTO,
            "E025",
            2,
            "reduces= names 'D', which is not a tensor parameter of 'h'",
        ),
        (  # reduces= and writes= on one name
            ADD_INTO.replace(
                'reads=["X"], reduces=["C"]', 'reads=["X"], writes=["C"], reduces=["C"]'
            ),
            "E038",
            3,
            "'acc_thread' holds reduces= and writes= on 'C'",
        ),
        (  # reduces= and reads= on one name
            ADD_INTO.replace('reads=["X"]', 'reads=["X", "C"]'),
            "E038",
            3,
            "'acc_thread' holds reduces= and reads= on 'C'",
        ),
        (  # the caller holds only reads= on the root its callee reduces into
            host('launch("acc", C, X)', 'reads=["X", "C"]') + ADD_INTO,
            "E027",
            3,
            "'acc' reduces into its parameter 'C', but 'h' holds no write or reduce privilege on 'C'",
        ),
        (  # the same loop with writes: E030 still applies to plain writes
            host(PRANGE.replace('"acc"', '"clear"').replace(", Xp[i, k])", ")")) + CLEAR_LEAF,
            "E030",
            6,
            "prange variable(s) k do not index the piece",
        ),
        (  # without reduces= the leaf's write is refused (with it, it writes its private copy)
            ADD_INTO.replace('reduces=["C"]', "reduces=[]"),
            "E033",
            4,
            "copy() writes 'dst', but 'acc_thread' does not hold writes on 'C'",
        ),
    ],
    ids=["E025", "E038_writes", "E038_reads", "E027", "E030_still_for_writes", "E033"],
)
def test_reduces_errors(src, code, line, frag):
    errs = errors(src)
    first = next((e for e in errs if e.code == code), None)
    assert first is not None, "\n".join(map(str, errs))
    assert first.loc.file == "c.cyp" and first.loc.line == line, str(first)
    assert frag in first.message, first.message
