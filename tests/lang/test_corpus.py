"""The malformed-input corpus (tests/corpus/cases.yaml) through the real CLI.

Each case runs ``cypressc check PROGRAM -m MAPPING [ARGS]`` (in-process with click's runner,
so the ~100 cases stay fast; tests/test_cli.py runs a few as real subprocesses) and
checks the exit code, the exact first diagnostic line, and the whole stderr against
tests/golden/diagnostics/<case>.txt.  Regenerate with ``pytest --update-golden`` and
read the diff.  Optional case keys: ``args`` (more command-line options, e.g. a
``--param`` binding) and ``files`` (headers and references the program includes).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cypressc.cli import main

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
CASES = yaml.safe_load((CORPUS / "cases.yaml").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_corpus_case(case, golden, monkeypatch):
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(
        main,
        ["check", case["program"], "-m", case["mapping"], *case.get("args", ())],
        catch_exceptions=False,
    )
    assert r.exit_code == case["exit"], r.stderr
    kind = "error" if case["exit"] else "warning"
    first = r.stderr.splitlines()[0]
    assert first == f"{case['at']}: {kind}[{case['code']}]: {case['message']}"
    assert "Traceback" not in r.stderr and "internal compiler error" not in r.stderr
    if case["exit"]:
        n = sum(
            1 for line in r.stderr.splitlines() if re.match(r"^\S.*: error\[[EM]\d{3}\]: ", line)
        )
        assert r.stderr.rstrip().endswith(f"{n} error{'s' if n != 1 else ''}")
        assert r.stdout == ""
    else:
        assert r.stdout.startswith("ok: ")
    golden.check(f"diagnostics/{case['case']}.txt", r.stderr)


def test_corpus_is_large_and_every_file_is_used():
    assert len(CASES) >= 30
    assert len({c["case"] for c in CASES}) == len(CASES)
    helpers = {f for c in CASES for f in c.get("files", ())}
    assert all((ROOT / f).is_file() for f in helpers), sorted(
        f for f in helpers if not (ROOT / f).is_file()
    )
    used = {c["program"] for c in CASES} | {c["mapping"] for c in CASES} | helpers
    # subfolders hold included headers; __pycache__ is what loading a NumPy reference leaves
    for f in sorted(
        f for f in CORPUS.glob("*/**/*") if f.is_file() and "__pycache__" not in f.parts
    ):
        assert str(f.relative_to(ROOT)) in used, f"{f} is not referenced by tests/corpus/cases.yaml"


def _codes_in_source(*packages: str) -> set[str]:
    codes: set[str] = set()
    for f in [
        ROOT / "cypressc" / "diagnostics.py",
        ROOT / "cypressc" / "frontend.py",
        ROOT
        / "cypressc"
        / "cli"
        / "common.py",  # `opt`'s and `-o`'s codes (E061, E063) are not `check`'s
        *(
            f
            for p in ("lang", "mapping", *packages)
            for f in sorted((ROOT / "cypressc" / p).glob("*.py"))
        ),
    ]:
        codes |= set(re.findall(r'"([EMW]\d{3})"', f.read_text()))
    return codes


def test_corpus_covers_every_front_end_code():
    """Every diagnostic code the front end can emit is the first diagnostic of some case;
    cases may also exercise codes of the passes (``check`` runs them all)."""
    emitted = _codes_in_source()
    covered = {c["code"] for c in CASES}
    assert emitted - covered == set(), f"codes without a corpus case: {sorted(emitted - covered)}"
    assert covered - _codes_in_source("ir", "passes", "backend") == set()
