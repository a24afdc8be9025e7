"""Pass errors blame the place the mistake is (issue #9, item 3).

A tile size, warpgroup count, processor, atom or memory the *mapping* got wrong is
reported at that YAML value, with a note at the program line it breaks; an extent the
program writes wrong (zero or negative loop ranges, a division by zero, an inexact or
non-integer extent, an overflow) is reported at the expression, naming the tunables
involved; what no mapping value causes stays at the program line.  The cases are the
mutated gemm files of tests/corpus (tests/corpus/cases.yaml), run through ``cypressc check``
(which runs every pass); here each one's carets and notes are checked against the files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cypressc.cli import main
from cypressc.diagnostics import Loc
from cypressc.ir import nodes as N
from cypressc.ir.origin import Origin, origins_of
from cypressc.ir.subst import subst_expr

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    c["case"]: c for c in yaml.safe_load((ROOT / "tests" / "corpus" / "cases.yaml").read_text())
}
HEAD = re.compile(
    r"^(?P<file>[^:\s]+):(?P<line>\d+):(?P<col>\d+): (?P<kind>error\[E\d{3}\]|note): (?P<msg>.*)$"
)


def _diagnostics(case: str) -> list[dict]:
    """Each header line of ``cypressc check``'s stderr for a corpus case, with the source
    text its carets (or dashes) underline."""
    c = CASES[case]
    r = CliRunner().invoke(
        main, ["check", c["program"], "-m", c["mapping"]], catch_exceptions=False
    )
    assert r.exit_code == 1, r.output
    lines = r.stderr.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = HEAD.match(line)
        if not m:
            continue
        src, marks = lines[i + 1], lines[i + 2]
        cut = src.index(" | ") + 3
        text, under = src[cut:], marks[cut:]
        start = len(under) - len(under.lstrip())
        out.append({**m.groupdict(), "under": text[start : len(under.rstrip())]})
    assert out and out[0]["kind"].startswith("error"), r.stderr
    return out


def _line_of(path: str, variant: str, stmt: str) -> int:
    """The 1-based line of the first ``stmt`` in the body of ``def variant(``."""
    lines = (ROOT / path).read_text().splitlines()
    start = next(i for i, t in enumerate(lines) if t.startswith(f"def {variant}("))
    return next(i for i in range(start, len(lines)) if lines[i].strip() == stmt) + 1


# case, the YAML value the error underlines, (variant, statement) the program note names
AT_MAPPING = [
    (
        "mapping_warpgroup_rows_not_atom",
        "4",
        ("mma_inner", 'Cp = partition_by_mma(C, MMA, PROC, "C")'),
    ),
    (
        "mapping_atom_n_not_tile",
        "WGMMA_64x96x16",
        ("mma_inner", 'Cp = partition_by_mma(C, MMA, PROC, "C")'),
    ),
    (
        "mapping_proc_tunable_thread",
        "THREAD",
        ("mma_inner", 'Cp = partition_by_mma(C, MMA, PROC, "C")'),
    ),
    ("mapping_pieces_over_warps", "8", ("clear_inner", "for i in prange(PIECES):")),
    ("mapping_block_prange_of_blocks", "BLOCK", ("clear_tile", "for i in prange(WGS):")),
    ("mapping_prange_mixed_levels", "WARP", ("mma_tile", "for i in prange(WGS):")),
    ("mapping_wgmma_accumulator_shared", "SHARED", ("mma_thread", "warpgroup_mma(MMA, C, A, B)")),
    ("mapping_none_partitioned_twice", "NONE", ("clear_inner", 'launch("clear", Cp[i])')),
    (
        "mapping_tunable_overflow",
        "1000000000000000000000",
        ("gemm_host", "Cp = partition_by_blocks(C, (U, V))"),
    ),
    (
        "mapping_shared_runtime_extent",
        "SHARED",
        ("gemm_host", 'launch("gemm", Cp[i, j], Ap[i, 0], Bp[0, j])'),
    ),
    (
        "mapping_wgmma_atom_wider_than_tile",
        "WGMMA_64x256x16",
        ("mma_thread", "warpgroup_mma(MMA, C, A, B)"),
    ),
    (
        "mapping_mma_piece_on_other_level",
        "WARPGROUP",
        ("mma_inner", 'launch("mma", Cp[i], Ap[i], Bp[i])'),
    ),
]


@pytest.mark.parametrize("case, value, stmt", AT_MAPPING, ids=[c[0] for c in AT_MAPPING])
def test_mapping_mistakes_are_reported_at_the_yaml_value(case, value, stmt, monkeypatch):
    monkeypatch.chdir(ROOT)
    first, *notes = _diagnostics(case)
    assert first["file"] == CASES[case]["mapping"]
    assert f"{first['file']}:{first['line']}:{first['col']}" == CASES[case]["at"]
    assert first["under"] == value  # the caret is under the value itself, not its key
    line = _line_of(CASES[case]["program"], *stmt)
    assert any(n["file"] == CASES[case]["program"] and int(n["line"]) == line for n in notes), notes


def test_several_tunables_feed_a_tile_the_deepest_is_blamed_the_others_noted(monkeypatch):
    """32 rows per warpgroup come from U: 128 (gemm_host) over WGS: 4 (mma_block): the error
    is at WGS, the binding nearest the failing partition, and U gets a note."""
    monkeypatch.chdir(ROOT)
    first, *notes = _diagnostics("mapping_warpgroup_rows_not_atom")
    yaml_text = (
        (ROOT / CASES["mapping_warpgroup_rows_not_atom"]["mapping"]).read_text().splitlines()
    )
    assert "WGS: 4" in yaml_text[int(first["line"]) - 1]
    u = [n for n in notes if n["msg"] == "U: 128 of instance 'gemm_host' also feeds it"]
    assert len(u) == 1 and u[0]["under"] == "128"


# case, the program text the error underlines, YAML values noted (file, text underlined)
AT_PROGRAM = [
    ("program_prange_zero", "0", []),
    ("program_prange_negative", "-2", []),
    ("program_make_tensor_zero", "0", []),
    ("program_float_extent", "1.5", []),
    ("program_divide_by_zero", "M / (WGS - 2)", ["2"]),
    ("program_fractional_extent", "M / 3", ["128"]),
    ("program_extent_overflow", "M * 100000000000000000", ["128"]),
    ("program_block_exceeds_tile", "M * 2", ["128"]),
    ("mapping_fractional_extent", "M / WGS", ["3", "128"]),
    ("program_prange_literal_over_warps", "for i in prange(8):", ["WARP"]),
]


@pytest.mark.parametrize("case, text, noted", AT_PROGRAM, ids=[c[0] for c in AT_PROGRAM])
def test_program_mistakes_are_reported_where_written(case, text, noted, monkeypatch):
    monkeypatch.chdir(ROOT)
    first, *notes = _diagnostics(case)
    assert first["file"] == CASES[case]["program"]
    assert f"{first['file']}:{first['line']}:{first['col']}" == CASES[case]["at"]
    assert first["under"] == text
    assert [n["under"] for n in notes if n["file"] == CASES[case]["mapping"]] == noted


def test_extent_messages_say_what_is_wrong(monkeypatch):
    monkeypatch.chdir(ROOT)
    want = {
        "program_divide_by_zero": r"M / \(WGS - 2\) divides by zero: WGS - 2 is 0 \(WGS is 2, set at "
        r"tests/mappings/full/gemm/h100\.yaml:\d+\)",
        "mapping_fractional_extent": r"M / WGS is 128 / 3, which is not an integer \(WGS is 3, set at "
        r"tests/corpus/mappings/fractional_extent\.yaml:\d+; U is 128, .*\)",
        "program_extent_overflow": r"M \* 100000000000000000 = 12800000000000000000 overflows the signed 64-bit "
        r"range that extents and indices are computed in",
        "program_prange_zero": r"the prange extent 0 is not positive",
    }
    for case, msg in want.items():
        assert re.match(msg, _diagnostics(case)[0]["msg"]), case


def _origin(key: str, seq: int) -> Origin:
    return Origin(key, 1, "inst", Loc("m.yaml", seq, 1), seq)


def test_folding_keeps_the_origins_of_both_operands():
    u, wgs = _origin("U", 1), _origin("WGS", 2)
    rows = N.ibin("/", N.IConst(128, (u,)), N.IConst(2, (wgs,)))
    assert rows == N.IConst(64) and rows.origin == (u, wgs)  # origins take no part in equality
    assert origins_of(rows) == (wgs, u)  # deepest binding first
    assert N.ibin("*", N.IVar("M"), N.IConst(0, (u,))).origin == (u,)
    inexact = N.ibin("/", N.IConst(128, (u,)), N.IConst(3, (wgs,)))
    assert isinstance(inexact, N.IBin) and origins_of(inexact) == (wgs, u)
    assert subst_expr(
        N.ibin("-", N.IVar("x"), N.IConst(2, (wgs,))), {"x": N.IConst(2, (u,))}
    ).origin == (u, wgs)


# ---- issue #35: what a newcomer hit


def _check(program: str, mapping: Path) -> str:
    r = CliRunner().invoke(main, ["check", program, "-m", str(mapping)], catch_exceptions=False)
    assert r.exit_code == 1, r.output
    return r.stderr


def test_a_narrower_tile_blames_the_wgmma_atom_and_names_the_one_that_fits(monkeypatch):
    """V: 128 under WGMMA_64x256x16: not the backend's "cannot lower yet" (E050 at the BLOCK
    instance) but E040 at the atom the wgmma issues, naming WGMMA_64x128x16, the instance to
    change and the ones that only partition with the atom (their layout does not depend on N)."""
    monkeypatch.chdir(ROOT)
    err = (ROOT / "tests/golden/diagnostics/mapping_wgmma_atom_wider_than_tile.txt").read_text()
    assert "E050" not in err and "WGMMA_64x128x16 fits" in err
    assert (
        "hint: set MMA: WGMMA_64x128x16 in instance 'mma_thread'; mma_warpgroup, mma_warp, clear_warpgroup, "
        "clear_warp, copy_warpgroup and copy_warp bind WGMMA_64x256x16 only to partition tiles"
        in err
    )


def test_every_instance_issuing_a_misfit_atom_is_named(tmp_path, monkeypatch, mapping_variant):
    """Two wgmmas, two atoms, two tiles (gemm_reduction's Tensor-Core row sums): the error is at
    the first, a note at the second, and the hint fixes both; nothing is keyed to the program."""
    monkeypatch.chdir(ROOT)
    m = mapping_variant(
        ROOT / "tests/mappings/full/gemm_reduction/h100_tc.yaml",
        "V: 256",
        "V: 128",
        ("    tunables: {SUMS: WGMMA_64x8x16}\n\n", "    tunables: {SUMS: WGMMA_64x16x16}\n\n"),
    )
    err = _check("programs/gemm_reduction.cyp", m)
    first, *notes = [x for x in err.splitlines() if HEAD.match(x)]
    assert (
        "error[E040]: warpgroup_mma() issues WGMMA_64x256x16 on a 64x128 accumulator tile" in first
    )
    assert any(
        "note: instance 'mma_sums_thread' also issues WGMMA_64x16x16 on a 64x8 accumulator tile "
        "(WGMMA_64x8x16 fits)" in n
        for n in notes
    ), notes
    assert (
        "hint: set MMA: WGMMA_64x128x16 in instance 'mma_thread'; set SUMS: WGMMA_64x8x16 in instance "
        "'mma_sums_thread'" in err
    )


def test_an_atom_the_program_writes_blames_the_tile(tmp_path, monkeypatch):
    """With the atom a literal of the program, the mapping value that made the tile narrower
    (V) is blamed, and the hint says what to write in the program."""
    monkeypatch.chdir(ROOT)
    prog = tmp_path / "gemm.cyp"
    prog.write_text(
        (ROOT / "tests/programs/full/gemm.cyp")  # its mma leaf written out
        .read_text()
        .replace(
            "    MMA = tunable(atom)\n    warpgroup_mma(MMA, C, A, B)",
            "    warpgroup_mma(WGMMA_64x256x16(), C, A, B)",
        )
    )
    m = tmp_path / "m.yaml"
    m.write_text(
        (ROOT / "tests/mappings/full/gemm/h100.yaml")
        .read_text()
        .replace("V: 256", "V: 128")
        .replace(
            "    mems: [REGISTER, SHARED, SHARED]\n    tunables: {MMA: WGMMA_64x256x16}\n",
            "    mems: [REGISTER, SHARED, SHARED]\n",
        )
    )
    err = _check(str(prog), m)
    first = err.splitlines()[0]
    assert first.startswith(f"{m}:") and "error[E040]" in first
    assert err.splitlines()[1].endswith("tunables: {U: 128, V: 128}")
    assert "hint: write WGMMA_64x128x16() in variant 'mma_thread'" in err
