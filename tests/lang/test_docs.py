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
from cypressc.mapping.schema import Instance, MappingSpec

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "language.md").read_text()


def test_every_front_end_code_is_documented():
    codes: set[str] = set()
    for f in [*(ROOT / "cypressc" / "lang").glob("*.py"), *(ROOT / "cypressc" / "mapping").glob("*.py")]:
        codes |= set(re.findall(r'"([EMW]\d{3})"', f.read_text()))
    missing = sorted(c for c in codes if f"| {c} |" not in DOC)
    assert not missing, f"codes missing from the tables of docs/language.md: {missing}"


def test_every_mapping_key_is_documented():
    for key in [*MappingSpec.model_fields, *Instance.model_fields]:
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
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
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
                assert lang == "python" and nxt is not None and nxt[1] == "yaml" and not nxt[3], \
                    f"{doc.name}:{line}: {MARKER} goes before a ```python program followed by its ```yaml mapping"
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
    return [line for (line, lang, text, marked), nxt in zip(blocks, blocks[1:])
            if not marked and lang == "python" and "@task(" in text and nxt[1] == "yaml"
            and re.search(r"^entrypoint:", nxt[2], re.MULTILINE)]


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
    assert failed is None, f"{name}: cypressc {failed[0]} (exit {failed[1].exit_code}):\n{failed[1].stderr}"
    assert "__global__" in (tmp_path / "out" / "example.cu").read_text()
    assert {"example.cu", "example.h", "main.cu", "Makefile", "example.json"} <= \
        {p.name for p in (tmp_path / "out").iterdir()}


# The example docs/language.md §10 printed before issue #9: a HOST prange launched straight
# onto WARPGROUPs.  `check` passed it, `explain` and `build` did not.
OLD_EXAMPLE = ("""\
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
""", """\
machine: h100
entrypoint: host
instances:
  - {instance: host,   variant: clear_host,   proc: HOST,      mems: [GLOBAL], tunables: {U: 64}, calls: [wg]}
  - {instance: wg,     variant: clear_inner,  proc: WARPGROUP, mems: [NONE],
     tunables: {PIECES: 128, PROC: THREAD, MMA: WGMMA_64x64x16}, calls: [thread]}
  - {instance: thread, variant: clear_thread, proc: THREAD,    mems: [REGISTER]}
""")


def test_the_old_example_is_caught(tmp_path, monkeypatch):
    """Both checks have teeth: the old §10 example fails to compile, and printed without the
    marker it is reported as an unmarked complete example."""
    monkeypatch.chdir(tmp_path)
    failed = _compile(*OLD_EXAMPLE, tmp_path)
    assert failed is not None and failed[1].exit_code == 1 and "error[E041]" in failed[1].stderr, failed
    doc = tmp_path / "doc.md"
    doc.write_text(f"text\n\n```python\n{OLD_EXAMPLE[0]}```\n\n```yaml\n{OLD_EXAMPLE[1]}```\n")
    assert _unmarked_complete(doc) == [3]
    doc.write_text(f"{MARKER}\n```python\n{OLD_EXAMPLE[0]}```\n\n```yaml\n{OLD_EXAMPLE[1]}```\n")
    assert _unmarked_complete(doc) == [] and _blocks(doc)[0][3]
