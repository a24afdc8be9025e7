"""docs/language.md stays in step with the front end: every diagnostic code and every
mapping key is documented, and every code block the docs mark `<!-- compiles -->` (with
the mapping block after it) passes `cypressc check`, `explain` and `build` as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main
from cypressc.lang.intrinsics import LEAF_FUNCTIONS
from cypressc.mapping.schema import Instance, MappingSpec, TemplateLevel, TreeEntry

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "language.md").read_text()


def test_every_front_end_code_is_documented():
    codes: set[str] = set()
    for f in [
        *(ROOT / "cypressc" / "lang").glob("*.py"),
        *(ROOT / "cypressc" / "mapping").glob("*.py"),
        *(ROOT / "cypressc" / "ir").glob("reader*.py"),  # printed IR read back (cypressc opt)
    ]:
        codes |= set(re.findall(r'"([EMW]\d{3})"', f.read_text()))
    missing = sorted(c for c in codes if f"| {c} |" not in DOC)
    assert not missing, f"codes missing from the tables of docs/language.md: {missing}"


def test_every_mapping_key_is_documented():
    for key in [
        *MappingSpec.model_fields,
        *Instance.model_fields,
        *TreeEntry.model_fields,
        *TemplateLevel.model_fields,
    ]:
        assert f"| `{key}` |" in DOC, key


def test_every_leaf_function_is_documented():
    for name in LEAF_FUNCTIONS:
        assert f"`{name}(" in DOC, name


MARKER = "<!-- compiles -->"
DOCS = sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md"])
FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def _blocks(path: Path) -> list[tuple[int, str, str, bool]]:
    """Fenced code blocks of ``path``: (line, language, text, marked), where ``marked``
    means the line just before the opening fence is the marker ``<!-- compiles -->``."""
    text = path.read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2), before == MARKER))
    return out


def _examples() -> list[tuple[str, str, str]]:
    """Every example the docs claim compiles: a marked ```python block (the program) and the
    ```yaml block right after it (its mapping), as (id, program, mapping)."""
    out = []
    for doc in DOCS:
        blocks = _blocks(doc)
        for i, (line, lang, text, marked) in enumerate(blocks):
            if marked:
                nxt = blocks[i + 1] if i + 1 < len(blocks) else None
                assert lang == "python" and nxt is not None and nxt[1] == "yaml" and not nxt[3], (
                    f"{doc.name}:{line}: {MARKER} goes before a ```python program followed by its ```yaml mapping"
                )
                out.append((f"{doc.name}:{line}", text, nxt[2]))
    return out


EXAMPLES = _examples()


def test_docs_have_compiled_examples():
    """The marker convention is in use (a test over no examples would pass vacuously)."""
    assert any(name.startswith("language.md:") for name, _, _ in EXAMPLES), EXAMPLES


def _unmarked_complete(path: Path) -> list[int]:
    """Lines of ```python blocks with @task variants followed by a ```yaml block with an
    entrypoint — a complete program + mapping — that lack the marker."""
    blocks = _blocks(path)
    lines = path.read_text().splitlines()
    return [
        line
        for (line, lang, text, marked), nxt in zip(blocks, blocks[1:])
        if not marked
        # a copy of a program file (tests/lang/test_tutorial.py), compiled where it is run
        and not (line >= 2 and lines[line - 2].startswith("<!-- file: "))
        and lang == "python"
        and "@task(" in text
        and nxt[1] == "yaml"
        and re.search(r"^entrypoint:", nxt[2], re.MULTILINE)
    ]


def test_every_complete_example_is_marked():
    """A complete example must carry the marker, so that it is compiled below.  Fragments
    (a decorator, a loop, one instance) are not complete and stay unmarked."""
    for doc in DOCS:
        assert _unmarked_complete(doc) == [], f"{doc.name}: complete examples without {MARKER}"


def _compile(program: str, mapping: str, tmp_path: Path) -> tuple[str, object] | None:
    """Run `cypressc check`, `explain` and `build` on the example in ``tmp_path``; the first
    command that fails or warns, with its result, or None when all three are clean."""
    (tmp_path / "example.cyp").write_text(program)
    (tmp_path / "example.yaml").write_text(mapping)
    args = ["example.cyp", "-m", "example.yaml"]
    for cmd in (["check"], ["explain"], ["build", "-o", str(tmp_path / "out")]):
        r = CliRunner().invoke(main, cmd + args, catch_exceptions=False)
        if r.exit_code != 0 or r.stderr:
            return cmd[0], r
    return None


@pytest.mark.parametrize("name, program, mapping", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_marked_example_compiles(name, program, mapping, tmp_path, monkeypatch):
    """`cypressc check`, `explain` and `build` accept the example exactly as the docs print it,
    without warnings (a W001, or explain's E050 "cannot lower yet", means a broken example)."""
    monkeypatch.chdir(tmp_path)
    failed = _compile(program, mapping, tmp_path)
    assert failed is None, (
        f"{name}: cypressc {failed[0]} (exit {failed[1].exit_code}):\n{failed[1].stderr}"
    )
    assert "__global__" in (tmp_path / "out" / "example.cu").read_text()
    assert {"example.cu", "example.h", "main.cu", "Makefile", "example.json"} <= {
        p.name for p in (tmp_path / "out").iterdir()
    }


# The example docs/language.md §10 printed before issue #9: a HOST prange launched straight
# onto WARPGROUPs.  `check` passed it, `explain` and `build` did not.
OLD_EXAMPLE = (
    """\
@task("clear", Inner, writes=["C"])
def clear_host(C: tensor[(M, N), f32]):
    U = tunable(int)
    Cp = partition_by_blocks(C, (U, U))
    for i, j in prange(cdiv(M, U), cdiv(N, U)):
        launch("clear", Cp[i, j])

@task("clear", Inner, writes=["C"])
def clear_inner(C: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("clear", Cp[i])

@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
""",
    """\
machine: h100
entrypoint: host
instances:
  - {instance: host,   variant: clear_host,   proc: HOST,      mems: [GLOBAL], tunables: {U: 64}, calls: [wg]}
  - {instance: wg,     variant: clear_inner,  proc: WARPGROUP, mems: [NONE],
     tunables: {PIECES: 128, PROC: THREAD, MMA: WGMMA_64x64x16}, calls: [thread]}
  - {instance: thread, variant: clear_thread, proc: THREAD,    mems: [REGISTER]}
""",
)


def test_the_old_example_is_caught(tmp_path, monkeypatch):
    """Both checks have teeth: the old §10 example fails to compile, and printed without the
    marker it is reported as an unmarked complete example."""
    monkeypatch.chdir(tmp_path)
    failed = _compile(*OLD_EXAMPLE, tmp_path)
    assert failed is not None and failed[1].exit_code == 1 and "error[E041]" in failed[1].stderr, (
        failed
    )
    doc = tmp_path / "doc.md"
    doc.write_text(f"text\n\n```python\n{OLD_EXAMPLE[0]}```\n\n```yaml\n{OLD_EXAMPLE[1]}```\n")
    assert _unmarked_complete(doc) == [3]
    doc.write_text(f"{MARKER}\n```python\n{OLD_EXAMPLE[0]}```\n\n```yaml\n{OLD_EXAMPLE[1]}```\n")
    assert _unmarked_complete(doc) == [] and _blocks(doc)[0][3]


# ---- quoted tool output (issue #35): every fenced block of the docs that shows what cypressc
# prints follows an `<!-- output: … -->` comment naming the command (and the edit of a bundled
# file it runs on); the command is run here and its output compared.

OUTPUT = re.compile(
    r"^<!-- output: (.*?)-->[ \t]*\n```[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE
)
# what only a tool prints: a located diagnostic, a file-level one, explain's task tree
PRINTED = re.compile(
    r"^(\S+:\d+:\d+: (error|warning|note)\[?|\S+: (error|warning)\[[EMW]\d{3}\]|task tree \(|"
    r"\S+\.cyp: (clean|deadlock|race|mismatch) |checking \S+\.cyp: |built \S+ into |ok: \S+\.cyp)",
    re.MULTILINE,
)


def _outputs(path: Path) -> list[tuple[str, list[str], list[tuple[str, str, str, str]], str]]:
    """The marked output blocks of ``path``: (id, command argv, edits, expected text).  An edit
    ``FILE: SOURCE with OLD -> NEW`` writes FILE as the bundled SOURCE with the first OLD
    (which must occur) replaced by NEW."""
    import shlex

    text = path.read_text()
    out = []
    for m in OUTPUT.finditer(text):
        lines = [x.strip() for x in m.group(1).strip().splitlines()]
        argv = shlex.split(lines[0])
        assert argv[0] == "cypressc", lines[0]
        edits = []
        for e in lines[1:]:
            em = re.fullmatch(r"(\S+): (\S+) with (.*?) -> (.*)", e)
            assert em, f"{path.name}: an edit is FILE: SOURCE with OLD -> NEW, not {e!r}"
            edits.append(em.groups())
        out.append(
            (f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}", argv[1:], edits, m.group(2))
        )
    return out


QUOTED = [q for doc in DOCS for q in _outputs(doc)]


def _matches(expected: list[str], got: list[str]) -> bool:
    """``expected`` equals ``got`` line by line, a line ``…`` standing for any number of lines."""
    if not expected:
        return not got
    if expected[0].strip() == "…":
        return any(_matches(expected[1:], got[i:]) for i in range(len(got) + 1))
    return bool(got) and expected[0] == got[0] and _matches(expected[1:], got[1:])


def test_docs_quote_tool_output():
    """The convention is in use, and no fenced block shows tool output without its command."""
    assert any(name.startswith("language.md:") for name, *_ in QUOTED)
    for doc in DOCS:
        text = doc.read_text()
        marked = {m.start(2) for m in OUTPUT.finditer(text)}
        for m in FENCE.finditer(text):
            # a `<!-- run -->` transcript is compared by tests/lang/test_tutorial.py
            transcript = text[: m.start()].rstrip("\n").endswith("<!-- run -->")
            if m.start(2) not in marked and not transcript and PRINTED.search(m.group(2)):
                line = text.count("\n", 0, m.start()) + 1
                raise AssertionError(
                    f"{doc.name}:{line}: a block of tool output without <!-- output: … -->"
                )


@pytest.mark.parametrize("name, args, edits, expected", QUOTED, ids=[q[0] for q in QUOTED])
def test_quoted_output_is_what_the_tool_prints(name, args, edits, expected, tmp_path, monkeypatch):
    """Run in a copy of programs/ and mappings/, so the paths print as the docs show them."""
    import shutil

    for d in ("programs", "mappings"):
        shutil.copytree(ROOT / d, tmp_path / d)
    for file, source, old, new in edits:
        text = (ROOT / source).read_text()
        assert old in text, f"{name}: {old!r} is not in {source}"
        (tmp_path / file).write_text(text.replace(old, new, 1))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    got = r.output.splitlines()  # stdout and stderr as a terminal shows them
    assert _matches(expected.splitlines(), got), (
        f"{name}: cypressc {' '.join(args)} printed:\n" + "\n".join(got)
    )


def _table_examples(path: Path) -> list[tuple[str, str]]:
    """(code, example) for each backticked example of a table whose last column is `example`."""
    out, example_table = [], False
    for line in path.read_text().splitlines():
        if line.startswith("| code |"):
            example_table = line.rstrip(" |").endswith("example")
        elif not line.startswith("|"):
            example_table = False
        elif example_table and (m := re.match(r"^\| ([EMW]\d{3}) \|", line)):
            last = line.rstrip().removesuffix("|").rsplit(" | ", 1)[-1]
            out += [(m.group(1), s) for s in re.findall(r"`([^`]+)`", last)]
    return out


def test_table_examples_are_tool_output():
    """Each example message in the code tables is printed by `cypressc check` on some case of
    tests/corpus (its golden output, compared by tests/lang/test_corpus.py), or, for the codes
    `check` never reaches (`tune`'s M024), by the test named in KNOWN."""
    printed = "\n".join(
        p.read_text() for p in sorted((ROOT / "tests" / "golden" / "diagnostics").glob("*.txt"))
    )
    examples = _table_examples(ROOT / "docs" / "language.md")
    assert len(examples) > 50, examples
    missing = [(c, s) for c, s in examples if s not in printed and (c, s) not in KNOWN]
    assert not missing, f"table examples no test prints: {missing}"


# examples printed by a command `check` is not: the test that runs it asserts the message
KNOWN = {
    ("M024", "tune: 'UU' is not a knob of this mapping"): "tests/tune/test_space.py",
    ("E037", "the kernel takes its name from the file, and '1x' is not a C identifier"): (
        "tests/lang/test_checker.py"
    ),
}


def test_known_examples_are_asserted():
    for (code, message), test in KNOWN.items():
        assert message in (ROOT / test).read_text(), (code, message, test)


def test_a_stale_quote_is_caught(tmp_path, monkeypatch):
    """The comparison has teeth: §1's example as printed before issue #35 (24:16, no error
    count) is not what the tool prints."""
    name, args, edits, expected = next(q for q in QUOTED if "error[E021]" in q[3])
    stale = expected.replace("27:9", "24:16").replace("   27 |", "   24 |").replace("1 error\n", "")
    with pytest.raises(AssertionError, match="printed"):
        test_quoted_output_is_what_the_tool_prints(name, args, edits, stale, tmp_path, monkeypatch)
    assert _matches(["a", "…", "d"], ["a", "b", "c", "d"]) and not _matches(
        ["a", "…", "d"], ["a", "b"]
    )


def test_every_bundled_program_is_in_section_10():
    """§10's table lists every program under programs/."""
    section = DOC.split("## 10. The bundled programs", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `programs/(\w+)\.cyp` \|", section, re.MULTILINE))
    assert rows == {p.stem for p in (ROOT / "programs").glob("*.cyp")}, rows


def test_the_quoted_schedule_findings_are_what_the_interpreter_reports():
    """§11's three findings (a deadlock, a race, a wrong value) as the concurrent interpreter
    reports them on gemm's synchronized module with one fault each (``…`` in the docs: any
    text)."""
    from dataclasses import replace

    from cypressc.ir import nodes as N
    from cypressc.ir import sync as S
    from cypressc.ir.analysis import map_ops, remove_ops
    from cypressc.ir.schedule_check import check_schedules
    from tests import compiled

    snaps = compiled.modules("gemm", "mappings/gemm/h100.yaml")
    m, ref = snaps["sync-insertion"], snaps["warp-specialization"]

    def without(kind, bar: str):
        return lambda mod: remove_ops(
            mod, lambda op: isinstance(op, kind) and op.bar.startswith(bar)
        )

    def cleared_to_one(op):
        if isinstance(op, N.Call) and op.fn == "fill":
            return replace(
                op, args=tuple(N.IConst(1) if isinstance(a, N.IConst) else a for a in op.args)
            )
        return op

    found = {}
    for fault, values in (
        (without(S.Wait, "empty_"), 10),
        (without(S.ArriveExpectTx, "full_"), 10),
        (lambda mod: map_ops(mod, cleared_to_one), 1),
    ):
        v = check_schedules(fault(m), ref, seed=0, schedules=20, value_every=values)
        assert v.finding is not None
        found[v.finding.kind] = str(v.finding)
    quoted = re.findall(r"^\* `((?:deadlock|race|mismatch) at [^`]*)`", DOC, re.M)
    assert len(quoted) == 3, quoted
    for q in quoted:
        kind = q.split(" at ")[0]
        pattern = ".*?".join(re.escape(part) for part in q.split("…"))
        assert re.fullmatch(pattern + (".*" if q.endswith("…") else ""), found[kind]), (
            q,
            found[kind],
        )
