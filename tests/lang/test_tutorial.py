"""docs/tutorial.md is produced by its files and by the tools (issue #37 item 4): every fenced
block of the tutorial follows a marker comment saying what makes it true, and the marker is
checked here (``<!-- compiles -->`` and ``<!-- output: … -->`` are tests/lang/test_docs.py's):

* ``<!-- file: PATH -->`` — the block is the text of PATH (relative to the repository), line
  for line; a line ``…`` stands for any number of lines, a ``…`` within a line for any text
  (an excerpt of a long line).  Any doc may use it.
* ``<!-- run -->`` — a terminal transcript: each ``$ COMMAND`` line is run, in order, in a
  scratch folder holding a copy of docs/tutorial/, and what follows it (up to the next ``$``)
  is compared with what the command printed (stdout and stderr as a terminal shows them; ``…``
  as above).  Commands: ``cypressc …`` (in-process, with ``$CYPRESSC_CACHE_DIR`` in the
  scratch folder), ``ls DIR`` and ``sed -i 's/OLD/NEW/' FILE`` (OLD literal text, no regex
  characters).  A transcript with ``cypressc tune`` needs nvcc.
* ``<!-- gpu -->`` — commands that need nvcc and a GPU (``make``, the harness): ``$`` lines
  only, no quoted output; bench/gpu_check.py runs the same kernels (``--programs
  tutorial_gemm,tutorial_attention``).
* ``<!-- pytorch -->`` — a Python snippet run here on the CPU with ``device="meta"`` tensors in
  place of ``"cuda"`` ones and ``cypressc.compile`` returning the kernel's description
  (``KernelInfo``, no nvcc): the op's signature, argument checks and output shapes and dtypes
  are the real ones; the values are checked by bench/gpu_check.py on a GPU.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main
from tests.lang.test_docs import DOCS, FENCE

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
MARKER = re.compile(r"^<!-- (file: \S+|run|gpu|pytorch|compiles|output: [^\n]*?)[ \t]*-->$")


def marked_blocks(path: Path) -> list[tuple[str, str, str, str]]:
    """Fenced blocks of ``path``: (id ``name:line``, language, text, marker), the marker being
    the comment on the line just before the opening fence without its ``<!-- -->`` (``""``
    when there is none; a multi-line ``output:`` comment counts by its first line)."""
    text = path.read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        if before.endswith("-->") and not before.startswith("<!--"):  # an output: comment's edits
            start = text.rfind("<!--", 0, m.start())
            before = text[start : m.start()].strip().splitlines()[0] + " -->"
        mk = MARKER.match(before)
        line = text.count("\n", 0, m.start()) + 1
        out.append((f"{path.name}:{line}", m.group(1), m.group(2), mk.group(1) if mk else ""))
    return out


def same_line(expected: str, got: str) -> bool:
    """``got`` is ``expected``, each ``…`` in it standing for any text."""
    pattern = ".*".join(re.escape(part) for part in expected.split("…"))
    return re.fullmatch(pattern, got, re.DOTALL) is not None


def excerpt_matches(expected: list[str], got: list[str]) -> bool:
    """``expected`` equals ``got`` line by line, where a line ``…`` stands for any number of
    lines and a ``…`` within a line for any text."""
    if not expected:
        return not got
    if expected[0].strip() == "…":
        return any(excerpt_matches(expected[1:], got[i:]) for i in range(len(got) + 1))
    return bool(got) and same_line(expected[0], got[0]) and excerpt_matches(expected[1:], got[1:])


BLOCKS = {doc: marked_blocks(doc) for doc in DOCS}


def _of(kind: str) -> list[tuple[str, str, str, str]]:
    return [b for bs in BLOCKS.values() for b in bs if b[3].split(":")[0] == kind]


def test_every_tutorial_block_is_marked():
    """Nothing in the tutorial is typed by hand: each block is a file, a transcript, GPU-only
    commands or a snippet run on meta tensors."""
    assert TUTORIAL in BLOCKS
    unmarked = [name for name, _, _, mk in BLOCKS[TUTORIAL] if mk.split(":")[0] not in {
        "file", "run", "gpu", "pytorch"}]  # fmt: skip
    assert not unmarked, f"blocks without <!-- file: …/run/gpu/pytorch -->: {unmarked}"
    kinds = {mk.split(":")[0] for *_, mk in BLOCKS[TUTORIAL]}
    assert kinds == {"file", "run", "gpu", "pytorch"}, kinds


@pytest.mark.parametrize("name, lang, text, marker", _of("file"), ids=[b[0] for b in _of("file")])
def test_file_block_is_the_file(name, lang, text, marker):
    path = ROOT / marker.split(": ", 1)[1]
    assert path.is_file(), f"{name}: no file {path}"
    assert excerpt_matches(text.splitlines(), path.read_text().splitlines()), (
        f"{name}: the block is not {path.relative_to(ROOT)} (or an excerpt of it with …)"
    )


def transcript(text: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for each ``$ `` line of a transcript block."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"a transcript starts with a $ command, not {line!r}"
            out[-1][1].append(line)
    return out


def run_command(command: str) -> list[str]:
    """What ``command`` prints in the current folder: ``cypressc …`` run in-process, ``ls DIR``
    (the entries one per line, dotfiles left out, sorted as in the C locale), ``sed -i
    's/OLD/NEW/' FILE`` (nothing; OLD replaced by NEW once per line, as sed does)."""
    argv = shlex.split(command)
    if argv[0] == "cypressc":
        r = CliRunner().invoke(main, argv[1:], catch_exceptions=False)
        return r.output.splitlines()
    if argv[0] == "ls" and len(argv) == 2:
        return sorted(p.name for p in Path(argv[1]).iterdir() if not p.name.startswith("."))
    sub = re.fullmatch(r"s/([^/\\.*^$\[\]]+)/([^/\\&]*)/", argv[2]) if len(argv) == 4 else None
    if argv[:2] == ["sed", "-i"] and sub:  # literal text: the first occurrence on each line
        f = Path(argv[3])
        f.write_text("".join(x.replace(sub[1], sub[2], 1) for x in f.read_text().splitlines(True)))
        return []
    raise AssertionError(
        f"a transcript runs cypressc, ls DIR or sed -i s/A/B/ FILE, not {command!r}"
    )


def _tunes(text: str) -> bool:
    return any(shlex.split(c)[:2] == ["cypressc", "tune"] for c, _ in transcript(text))


@pytest.mark.parametrize(
    "name, lang, text, marker",
    # `tune --compile-only` runs nvcc (about 15 s): marked, so `-m "not nvcc"` leaves it out
    [
        pytest.param(*b, id=b[0], marks=[pytest.mark.nvcc] if _tunes(b[2]) else [])
        for b in _of("run")
    ],
)
def test_transcript_is_what_the_tools_print(name, lang, text, marker, tmp_path, monkeypatch):
    steps = transcript(text)
    if _tunes(text) and not shutil.which("nvcc"):
        pytest.skip("cypressc tune --compile-only needs nvcc")
    shutil.copytree(ROOT / "docs" / "tutorial", tmp_path / "docs" / "tutorial")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CYPRESSC_CACHE_DIR", str(tmp_path / "cache"))
    for command, expected in steps:
        got = run_command(command)
        assert excerpt_matches(expected, got), f"{name}: $ {command} printed:\n" + "\n".join(got)


def test_gpu_blocks_are_commands_only():
    """A GPU block quotes no output (nothing here could check it)."""
    for name, _, text, _ in _of("gpu"):
        lines = [x for x in text.splitlines() if x.strip()]
        assert lines and all(x.startswith("$ ") for x in lines), name


def _kernel_info(program, mapping, dtype=None, **_):
    """``cypressc.compile`` without nvcc: the kernel's description from the compiler."""
    from cypressc.api import bind_dtypes
    from cypressc.backend.emit import build_info
    from cypressc.backend.harness import RUNTIME_DIR
    from cypressc.cli.common import load_program
    from cypressc.pipeline import compile_module
    from cypressc.runtime import KernelInfo

    tree = load_program(str(program), str(mapping), bind_dtypes(program, dtype))
    return KernelInfo.from_dict(build_info(compile_module(tree)[-1][1].kernel, str(RUNTIME_DIR)))


@pytest.mark.parametrize(
    "name, lang, text, marker", _of("pytorch"), ids=[b[0] for b in _of("pytorch")]
)
def test_pytorch_snippet_runs_on_meta_tensors(name, lang, text, marker, monkeypatch):
    pytest.importorskip("torch")
    import cypressc

    assert lang == "python" and 'device="cuda"' in text, name
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(cypressc, "compile", _kernel_info)
    code = text.replace('device="cuda"', 'device="meta"')
    exec(compile(code, name, "exec"), {"__name__": "tutorial_snippet"})


def test_the_markers_have_teeth(tmp_path, monkeypatch):
    """An edited file block, a stale transcript line, an unsupported command and a wrong call of
    the PyTorch op all fail."""
    name, lang, text, marker = _of("file")[0]
    with pytest.raises(AssertionError, match="is not"):
        test_file_block_is_the_file(name, lang, text + "one more line\n", marker)
    assert excerpt_matches(["a …", "…", "d"], ["a b", "b", "c", "d"])
    assert excerpt_matches(["x = […] y"], ["x = [1, 2] y"]) and not same_line("x … y", "x y z")
    assert not excerpt_matches(["a …", "d"], ["b", "d"]) and not excerpt_matches(["a"], ["a", "b"])
    with pytest.raises(AssertionError, match="printed"):
        test_transcript_is_what_the_tools_print(
            "stale", "", "$ ls docs/tutorial\nfused_gemm.cyp\n", "run", tmp_path, monkeypatch
        )
    with pytest.raises(AssertionError, match="not 'make -C build'"):
        run_command("make -C build")
    name, lang, text, marker = _of("pytorch")[0]
    with pytest.raises(Exception, match="bias"):  # the op's own argument check, on meta tensors
        test_pytorch_snippet_runs_on_meta_tensors(
            name, lang, text.replace("(A, B, bias, 0.125)", "(A, B, 0.125)"), marker, monkeypatch
        )
