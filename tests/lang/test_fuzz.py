"""Mutation fuzzing of the front end through the CLI (in-process).

Hypothesis mutates the four bundled programs and their mappings — deleting,
duplicating and swapping lines, replacing tokens, inserting odd characters (NUL,
tabs, escapes, quotes, brackets, YAML sigils), re-indenting, truncating, splicing raw
bytes — and runs ``cypressc check``.  Whatever the input, the CLI must answer with
exit 0 (a valid pair) or exit 1 (located diagnostics), never a traceback or an
internal compiler error (exit 70).  Every crash these found was fixed in the front end.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cypressc.cli import main
from tests.budget import pick

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["gemm", "batched_gemm", "dual_gemm", "gemm_reduction"]
PROGRAM = {n: (ROOT / "programs" / f"{n}.cyp").read_text() for n in NAMES}
MAPPING = {n: (ROOT / "tests/mappings/full" / n / "h100.yaml").read_text() for n in NAMES}

_TOKEN = re.compile(r"\w+|[^\w\s]")
PROGRAM_VOCAB = sorted(set(_TOKEN.findall("".join(PROGRAM.values())))) + [
    "if",
    "while",
    "lambda",
    "return",
    "yield",
    "await",
    "**",
    "...",
    "None",
    "True",
    "1.5",
    "-1",
    "0",
    "tensor[9, f64]",
    "tensor[(M, K), f16]",
    "(M,)",
    "launch",
    "prange",
    "srange",
    "tunable(atom)",
    "partition_by_slices",
    "include",
    "WGMMA_64x8x16()",
    "WGMMA_64x0x16()",
    "make_tensor()",
    "[:]",
    "import",
    "class",
    "@",
    ";",
]
MAPPING_VOCAB = sorted(set(_TOKEN.findall("".join(MAPPING.values())))) + [
    "-1",
    "0",
    "1.5",
    "1e9",
    "true",
    "null",
    "~",
    "[]",
    "{}",
    "&a",
    "*a",
    "!!int",
    "!!str",
    "!!binary",
    "!!float",
    "!!timestamp",
    "!!python/object:os.system",
    "<<",
    "'x'",
    '"\\u0000"',
    "|",
    ">",
    "---",
    "...",
    "? ",
    "%YAML 1.1",
    "2024-13-45",
    "0x1F",
    "HOST",
    "REGISTER",
    "NONE",
    "WGMMA_64x300x16",
    "227MiB",
]
ODD = "()[]{}:,;\"'#\\\t -_xX019!&*|>@=.%?\n\r\x00\x0b\x0c\x1b\x7f\u00e9\u2028\ufeff\U0001f600"

_N = st.integers(0, 10**6)
OP = st.one_of(
    st.tuples(st.just("delete"), _N),
    st.tuples(st.just("duplicate"), _N, _N),
    st.tuples(st.just("swap"), _N, _N),
    st.tuples(st.just("token"), _N, _N, _N),
    st.tuples(st.just("insert"), _N, _N, st.text(alphabet=ODD, min_size=1, max_size=4)),
    st.tuples(st.just("indent"), _N, st.booleans()),
    st.tuples(st.just("truncate"), _N),
)
MUTATIONS = st.tuples(
    st.lists(OP, min_size=1, max_size=5),
    st.one_of(st.none(), st.tuples(_N, st.binary(min_size=1, max_size=3))),
)


def mutate(text: str, ops, vocab: list[str], raw) -> bytes:
    lines = text.splitlines(True) or [""]
    for op, *a in ops:
        if not lines:
            lines = [""]
        i = a[0] % len(lines)
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[a[1] % len(lines)])
        elif op == "swap":
            j = a[1] % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "token":
            toks = list(_TOKEN.finditer(lines[i]))
            if toks:
                m = toks[a[1] % len(toks)]
                lines[i] = lines[i][: m.start()] + vocab[a[2] % len(vocab)] + lines[i][m.end() :]
        elif op == "insert":
            p = a[1] % (len(lines[i]) + 1)
            lines[i] = lines[i][:p] + a[2] + lines[i][p:]
        elif op == "indent":
            lines[i] = "    " + lines[i] if a[1] else lines[i].lstrip(" ")
        elif op == "truncate":
            joined = "".join(lines)
            lines = joined[: a[0] % (len(joined) + 1)].splitlines(True)
    data = "".join(lines).encode("utf-8", "surrogatepass")
    if raw is not None:
        p = raw[0] % (len(data) + 1)
        data = data[:p] + raw[1] + data[p:]
    return data


DIAG = re.compile(r"^\S.*: (error|warning)\[[EMW]\d{3}\]: \S")


def assert_clean(result) -> None:
    out = result.stdout + result.stderr
    assert "Traceback" not in out and "internal compiler error" not in out, out
    assert result.exit_code in (0, 1), out
    if result.exit_code == 1:
        lines = result.stderr.splitlines()
        assert DIAG.match(lines[0]), lines[0]
        assert re.fullmatch(r"\d+ errors?", lines[-1]), lines[-1]
    else:
        assert result.stdout.startswith("ok: ")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# make test-full runs the long fuzz (tests/budget.py)
FUZZ = settings(
    max_examples=pick(20, 600), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(m=MUTATIONS)
def test_mutated_program_never_crashes(work, name, m):
    f = work / f"{name}.cyp"
    f.write_bytes(mutate(PROGRAM[name], m[0], PROGRAM_VOCAB, m[1]))
    r = CliRunner().invoke(
        main,
        ["check", str(f), "-m", str(ROOT / "tests/mappings/full" / name / "h100.yaml")],
        catch_exceptions=False,
    )
    assert_clean(r)


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(m=MUTATIONS)
def test_mutated_mapping_never_crashes(work, name, m):
    f = work / f"{name}.yaml"
    f.write_bytes(mutate(MAPPING[name], m[0], MAPPING_VOCAB, m[1]))
    r = CliRunner().invoke(
        main,
        ["check", str(ROOT / "programs" / f"{name}.cyp"), "-m", str(f)],
        catch_exceptions=False,
    )
    assert_clean(r)


@FUZZ
@given(text=st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=200))
def test_arbitrary_text_as_program_and_mapping(work, text):
    p, m = work / "any.cyp", work / "any.yaml"
    p.write_text(text, encoding="utf-8")
    m.write_text(text, encoding="utf-8")
    assert_clean(CliRunner().invoke(main, ["check", str(p), "-m", str(m)], catch_exceptions=False))
