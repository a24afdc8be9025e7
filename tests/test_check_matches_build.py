"""``cypressc check`` refuses exactly what ``cypressc build`` refuses (issue #9, item 2).

Each case mutates one value of the bundled gemm mapping so that the front end accepts the
pair but a pass or the backend refuses it; ``check`` must fail with the same first
diagnostic as ``build`` and write nothing, and ``build`` must leave no directory behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main

ROOT = Path(__file__).resolve().parent.parent
PROG = str(ROOT / "programs" / "gemm.cyp")
MAPPING = (ROOT / "tests/mappings/full" / "gemm" / "h100.yaml").read_text()

# (what is wrong, text replaced once in the mapping, its replacement, the code both report)
CASES = [
    ("block tile rows don't fit the atom", "{U: 128, V: 256}", "{U: 96, V: 256}", "E040"),
    ("more warps than a warpgroup has", "{PIECES: 4, PROC: WARP", "{PIECES: 8, PROC: WARP", "E041"),
    (
        "more threads than a warp has",
        "{PIECES: 32, PROC: THREAD",
        "{PIECES: 64, PROC: THREAD",
        "E041",
    ),
    (
        "wgmma operand in GLOBAL",
        "mems: [REGISTER, SHARED, SHARED]",
        "mems: [REGISTER, GLOBAL, SHARED]",
        "E043",
    ),
    ("NONE accumulator partitioned two ways", "tunables: {WGS: 2}", "tunables: {WGS: 1}", "E044"),
    ("shared memory over the limit", "{U: 128, V: 256}", "{U: 256, V: 256}", "E046"),
    (
        "register file over-committed",
        "smem_limit: 227KiB",
        "smem_limit: 227KiB\n    consumer_registers: 240\n    producer_registers: 40",
        "E047",
    ),
    (
        "more wgmma groups in flight than stages",
        "pipeline: 3",
        "pipeline: 3\n    mma_in_flight: 3",
        "E050",
    ),
]


def _run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("what, old, new, code", CASES, ids=[c[0] for c in CASES])
def test_check_refuses_what_build_refuses(what, old, new, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert MAPPING.count(old) >= 1
    m = tmp_path / "m.yaml"
    m.write_text(MAPPING.replace(old, new, 1))
    c = _run("check", PROG, "-m", str(m))
    b = _run("build", PROG, "-m", str(m), "-o", str(tmp_path / "out"))
    assert c.exit_code == 1 and b.exit_code == 1, (c.output, b.output)
    first = c.stderr.splitlines()[0]
    assert f"error[{code}]" in first, c.stderr
    assert first == b.stderr.splitlines()[0]
    assert c.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml"]  # nothing written by either


def test_check_writes_nothing_for_a_good_pair(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _run("check", PROG, "-m", str(ROOT / "tests/mappings/full" / "gemm" / "h100.yaml"))
    assert r.exit_code == 0 and "9 passes and the CUDA backend accept it" in r.stdout
    assert list(tmp_path.iterdir()) == []
