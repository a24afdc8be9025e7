"""Inputs that must be handled, not crash or mislead (issue #9, item 4), through the real
CLI on real files: byte-order marks, non-ASCII and tabbed lines, over-deep expressions
and YAML, strict mapping types, complex keys, unary minus, ``include`` of a missing
header, and BLOCK knobs that no pass reads (W002).  The malformed-input corpus
(tests/corpus/cases.yaml) holds one case of each error; these tests pin down what the
corpus cannot: accepted inputs, the exact caret, and inputs too large for a golden file.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main
from cypressc.diagnostics import CypressError, Loc, render
from cypressc.mapping.schema import Instance

ROOT = Path(__file__).resolve().parents[2]
GEMM = (ROOT / "programs" / "gemm.cyp").read_text()
GEMM_MAP = (ROOT / "tests/mappings/full" / "gemm" / "h100.yaml").read_text()
MAIN_LOOP = "    for k in srange(cdiv(K, W)):\n"
DTYPE = "T = dtype(f16, bf16)"
DTYPE_LINE = GEMM[: GEMM.index(DTYPE)].count("\n") + 1


def with_include(name: str) -> str:
    """gemm.cyp with ``include(name)`` on line DTYPE_LINE (after the module docstring)."""
    return GEMM.replace(DTYPE, f'include("{name}")\n{DTYPE}', 1)


def check(program: Path, mapping: Path | None = None, *more: str):
    mapping = mapping or ROOT / "tests/mappings/full" / "gemm" / "h100.yaml"
    return CliRunner().invoke(
        main, ["check", str(program), "-m", str(mapping), *more], catch_exceptions=False
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def first(r) -> str:
    assert "Traceback" not in r.stderr and "internal compiler error" not in r.stderr, r.stderr
    return r.stderr.splitlines()[0]


def caret_column(r, line_no: int) -> tuple[int, int]:
    """(0-based screen column, width) of the carets under excerpt line ``line_no``."""
    lines = r.stderr.splitlines()
    i = next(k for k, s in enumerate(lines) if s.startswith(f"{line_no:>5} | "))
    marks = lines[i + 1][len("      | ") :]
    return len(marks) - len(marks.lstrip(" ")), len(marks.strip())


# --------------------------------------------------------------------------- programs
def test_byte_order_mark_is_accepted(tmp_path):
    prog = tmp_path / "gemm.cyp"
    prog.write_bytes(b"\xef\xbb\xbf" + GEMM.encode())
    # a real subprocess: the installed `cypressc`, reading the file from disk
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "cypressc.cli",
            "check",
            str(prog),
            "-m",
            str(ROOT / "tests/mappings/full" / "gemm" / "h100.yaml"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"ok: {prog} with ")


def test_byte_order_mark_in_a_mapping_is_neither_shown_nor_counted(tmp_path):
    m = tmp_path / "m.yaml"
    m.write_bytes(b"\xef\xbb\xbf" + GEMM_MAP.encode())
    assert check(ROOT / "programs" / "gemm.cyp", m).exit_code == 0
    m.write_bytes(b"\xef\xbb\xbfmachine: [h100\n" + GEMM_MAP.split("\n", 1)[1].encode())
    r = check(ROOT / "programs" / "gemm.cyp", m)
    assert r.exit_code == 1
    assert f"{m}:1:10: note: while parsing a flow sequence" in r.stderr
    assert "    1 | machine: [h100\n      |          -\n" in r.stderr


def test_columns_count_characters_not_bytes(tmp_path):
    # ö and ß are 2 UTF-8 bytes each: the bad name is character 28 (ast says byte 31)
    prog = write(
        tmp_path / "p.cyp", GEMM.replace(MAIN_LOOP, "    größe = W; X = größe + nope\n" + MAIN_LOOP)
    )
    r = check(prog)
    line = GEMM[: GEMM.index(MAIN_LOOP)].count("\n") + 1
    assert r.exit_code == 1
    assert first(r) == f"{prog}:{line}:28: error[E026]: 'nope' is not defined"
    assert caret_column(r, line) == (27, 4)


@pytest.mark.parametrize("kind", ["program", "mapping"])
def test_first_bad_byte_is_located_in_characters(tmp_path, kind):
    bad = tmp_path / ("p.cyp" if kind == "program" else "m.yaml")
    bad.write_bytes(
        b"\xef\xbb\xbf# caf\xc3\xa9 \xe2\x82\xac \xff\n"
    )  # BOM, "# café € ", a bad byte
    if kind == "program":
        r, message = check(bad), "error[E001]: the file is not UTF-8 text"
    else:
        r, message = (
            check(ROOT / "programs" / "gemm.cyp", bad),
            "error[M000]: the mapping is not UTF-8 text",
        )
    assert first(r) == f"{bad}:1:10: {message}"


def test_caret_sits_under_the_token_after_tabs(tmp_path):
    prog = write(tmp_path / "p.cyp", GEMM.replace(MAIN_LOOP, "    X = W\t\t+ nope\n" + MAIN_LOOP))
    r = check(prog)
    line = GEMM[: GEMM.index(MAIN_LOOP)].count("\n") + 1
    # "    X = W\t\t+ nope": 'nope' is character 14; with 4-column tab stops it shows at 18
    assert first(r) == f"{prog}:{line}:14: error[E026]: 'nope' is not defined"
    shown = next(s for s in r.stderr.splitlines() if s.startswith(f"{line:>5} | "))
    assert shown[len("      | ") :].index("nope") == 18
    assert caret_column(r, line) == (18, 4)


def test_caret_counts_wide_characters_as_two_cells():
    loc = Loc("x.cyp", 1, 9, 13, 's = "漢"\tnope')  # 'nope' is character 9
    lines = render(CypressError("E026", "'nope' is not defined", loc)).splitlines()
    # the tab after 7 characters becomes one space; 漢 takes two cells on screen, so
    # 'nope' starts at cell 9, not 8
    assert lines[1] == '    1 | s = "漢" nope'
    assert lines[2] == "      | " + " " * 9 + "^^^^"


def test_expression_too_deep_for_pythons_parser_is_located(tmp_path):
    deep = "    X = " + "+".join(["W"] * 6000) + "\n"
    prog = write(tmp_path / "p.cyp", GEMM.replace(MAIN_LOOP, deep + MAIN_LOOP))
    r = check(prog)
    line = GEMM[: GEMM.index(MAIN_LOOP)].count("\n") + 1
    assert r.exit_code == 1
    assert (
        first(r) == f"{prog}:{line}:5: error[E001]: an expression on this line nests too deeply "
        "for Python's parser"
    )


def test_expression_at_the_depth_limit_is_accepted(tmp_path):
    ok = "    X = " + " + ".join(["W"] * 100) + "\n"  # 99 additions: 100 levels with the leaves
    prog = write(tmp_path / "p.cyp", GEMM.replace(MAIN_LOOP, ok + MAIN_LOOP))
    assert check(prog).exit_code == 0
    deeper = write(
        tmp_path / "q.cyp", GEMM.replace(MAIN_LOOP, ok.replace("X = W", "X = W + W") + MAIN_LOOP)
    )
    r = check(deeper)
    assert (
        r.exit_code == 1
        and "error[E001]: the expression nests more than 100 levels deep" in first(r)
    )


def test_unary_minus_is_index_arithmetic(tmp_path):
    prog = write(
        tmp_path / "p.cyp",
        GEMM.replace(MAIN_LOOP, "    NK = -(-cdiv(K, W)) + (+W - W)\n    for k in srange(NK):\n"),
    )
    r = check(prog)
    assert r.exit_code == 0, r.stderr
    r = CliRunner().invoke(
        main,
        [
            "explain",
            str(prog),
            "-m",
            str(ROOT / "tests/mappings/full/gemm/h100.yaml"),
            "--after",
            "dependence-analysis",
            "--no-tree",
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.stderr
    assert re.search(r"%NK = \(0 - \(0 - cdiv\(%K, 64\)\)\)", r.stdout), r.stdout


def test_include_is_found_next_to_the_program_not_the_working_directory(tmp_path, monkeypatch):
    folder = tmp_path / "src"
    folder.mkdir()
    prog = write(folder / "p.cyp", with_include("ops.cuh"))
    monkeypatch.chdir(tmp_path)  # ops.cuh is not here
    r = check(prog)
    assert r.exit_code == 1
    assert (
        first(r)
        == f"{prog}:{DTYPE_LINE}:9: error[E003]: include() names 'ops.cuh', which does not exist"
    )
    assert f"looked for {folder / 'ops.cuh'}" in r.stderr
    write(folder / "ops.cuh", "// external leaf functions\n")
    assert check(prog).exit_code == 0


def test_build_reports_a_missing_include(tmp_path):
    prog = write(tmp_path / "p.cyp", with_include("missing.cuh"))
    r = CliRunner().invoke(
        main,
        [
            "build",
            str(prog),
            "-m",
            str(ROOT / "tests/mappings/full/gemm/h100.yaml"),
            "-o",
            str(tmp_path / "out"),
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 1
    assert (
        first(r) == f"{prog}:{DTYPE_LINE}:9: error[E003]: include() names 'missing.cuh', "
        "which does not exist"
    )
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- mappings
def test_block_style_yaml_nested_thousands_deep_is_located(tmp_path):
    body = "".join("  " * (i + 1) + "- \n" for i in range(3000))
    m = write(tmp_path / "m.yaml", GEMM_MAP + "extra:\n" + body)
    r = check(ROOT / "programs" / "gemm.cyp", m)
    line = GEMM_MAP.count("\n") + 1 + 64  # `extra:` opens level 1; the 65th level is too deep
    assert r.exit_code == 1
    assert (
        first(r) == f"{m}:{line}:{2 * 64 + 1}: error[M000]: the mapping nests lists/mappings "
        "more than 64 levels deep"
    )


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("    warpspecialize: true\n", "    warpspecialize: 1\n", "'warpspecialize': "),
        ("    pipeline: 3\n", "    pipeline: 3.0\n", "'pipeline': "),
        (
            "    tunables: {U: 128, V: 256}\n",
            "    tunables: {U: 128, V: 256.0}\n",
            "'V': a tunable value is an integer or a name, not 256.0",
        ),
        (
            "    tunables: {U: 128, V: 256}\n",
            "    tunables: {U: 128, V: null}\n",
            "'V': a tunable value is an integer or a name, not null",
        ),
        (
            "    tunables: {W: 64}\n",
            "    tunables: {W: false}\n",
            "tunable 'W' is an int; got false",
        ),
        (
            "    tunables: {PIECES: 4, PROC: WARP, MMA: WGMMA_64x256x16}\n    calls: [mma_warp]\n",
            "    tunables: {PIECES: 4, PROC: true, MMA: WGMMA_64x256x16}\n    calls: [mma_warp]\n",
            "tunable 'PROC' is a processor; got true",
        ),
    ],
)
def test_mapping_types_are_strict(tmp_path, old, new, message):
    assert old in GEMM_MAP
    m = write(tmp_path / "m.yaml", GEMM_MAP.replace(old, new, 1))
    r = check(ROOT / "programs" / "gemm.cyp", m)
    assert r.exit_code == 1
    assert message in first(r) and re.match(
        rf"^{re.escape(str(m))}:\d+:\d+: error\[M0(02|16)\]", first(r)
    )


def test_schema_keeps_values_as_written():
    base = {"instance": "i", "variant": "v", "proc": "BLOCK", "mems": ["GLOBAL"]}
    assert Instance.model_validate({**base, "tunables": {"N": True}}).tunables == {"N": True}
    assert Instance.model_validate({**base, "tunables": {"N": True}}).tunables["N"] is True
    for bad in ({"pipeline": "3"}, {"pipeline": True}, {"warpspecialize": 1}, {"raster": 2.0}):
        with pytest.raises(ValueError):
            Instance.model_validate({**base, **bad})


def test_complex_mapping_key_is_located_in_words(tmp_path):
    m = write(
        tmp_path / "m.yaml",
        GEMM_MAP.replace("    pipeline: 3\n", "    pipeline: 3\n    ? {a: 1}\n    : 2\n"),
    )
    r = check(ROOT / "programs" / "gemm.cyp", m)
    assert r.exit_code == 1
    assert first(r).endswith("error[M002]: a key must be a plain name, not a mapping")
    assert "Node(" not in r.stderr


def test_knobs_on_the_kernel_block_without_srange(tmp_path):
    """The outermost BLOCK instance's other knobs are read; its `pipeline` is not when its
    variant has no srange loop (here the main loop moved into a task of its own)."""
    prog = write(tmp_path / "p.cyp", GEMM)
    r = check(prog)
    assert r.exit_code == 0 and "W002" not in r.stderr  # the bundled mapping sets only used knobs
    m = write(
        tmp_path / "m.yaml",
        GEMM_MAP.replace(
            "    tunables: {WGS: 2}\n    calls: [clear_warpgroup]\n",
            "    tunables: {WGS: 2}\n    calls: [clear_warpgroup]\n    raster: 8\n    pipeline: 2\n",
        ),
    )
    r = check(prog, m)
    assert r.exit_code == 0, r.stderr
    warns = [s for s in r.stderr.splitlines() if "warning[" in s]
    assert [re.search(r"warning\[(W\d+)\]: '(\w+)'", s).groups() for s in warns] == [
        ("W002", "raster"),
        ("W002", "pipeline"),
    ]
    assert (
        "'pipeline' has no effect on 'clear_block': its variant 'clear_tile' has no srange"
        in warns[1]
    )
