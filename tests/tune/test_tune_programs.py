"""``cypressc tune --compile-only`` works on every bundled program (issue #35), through the
real CLI and nvcc, and stays cheap: each program's shipped ``mappings/<program>/h100.yaml``
with a ``tune:`` section that fixes every knob as the mapping sets it (a BLOCK knob it leaves
unset at the compiler's default, so that point is the mapping itself) but for one int
tunable, which also takes 3 — a tile the compiler refuses.  So the search derives the space,
prunes one candidate, ranks, compiles the starting mapping and writes the best mapping, and
nvcc runs once per program: with ptxas verbose, as tests/backend/test_golden_cu.py compiles
the same kernel, so the session's nvcc cache (tests/tools/nvcc) serves the second of the two.
Without a terminal, the progress is plain lines on stderr."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main
from cypressc.mapping.loader import load_mapping
from cypressc.frontend import front_end
from cypressc.tuner.search import _space, kernel_sizes
from cypressc.tuner.space import _DEFAULTS
from tests.backend.test_golden_cu import PTXAS_V, kernel_group

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = sorted(p.stem for p in (ROOT / "programs").glob("*.cyp"))

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH"),
]


def small_space(program: Path, mapping: Path) -> tuple[str, str]:
    """The mapping's text with the ``tune:`` section described above, and the knob that
    takes the refused 3."""
    text = mapping.read_text()
    assert "\ntune:" not in text, mapping
    space = _space(str(program), str(mapping), text, {})
    lines, bad = ["tune:"], None
    for k in space.knobs:
        if len(k.candidates) < 2:
            continue
        v = k.current if k.current is not None else _DEFAULTS[k.name]
        if k.kind == "tunable" and bad is None:
            bad = k.name
            lines.append(f"  {k.name}: [{v}, 3]")
        elif v is None:  # a knob without a value (no cluster): its one-block-per-cluster value
            lines.append(f"  {k.name}: [1, 1]")
        else:
            lines.append(f"  {k.name}: {str(v).lower() if isinstance(v, bool) else v}")
    assert bad is not None, f"{mapping}: no int tunable to search"
    return text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n", bad


@pytest.mark.parametrize("program", [kernel_group(p) for p in PROGRAMS])
def test_compile_only_tunes_every_bundled_program(program, tmp_path, monkeypatch, tune_cache):
    for k, v in PTXAS_V.items():
        monkeypatch.setenv(k, v)
    prog = ROOT / "programs" / f"{program}.cyp"
    text, bad = small_space(prog, ROOT / "tests/mappings/full" / program / "h100.yaml")
    mapping = tmp_path / f"{program}.yaml"
    mapping.write_text(text)
    sizes, _ = kernel_sizes(front_end(prog, mapping, mapping_text=text))
    best = tmp_path / "best.yaml"
    r = CliRunner().invoke(
        main,
        [
            "tune",
            str(prog),
            "-m",
            str(mapping),
            *(f"--size={s}=256" for s in sizes),
            "--compile-only",
            "--budget",
            "1",
            "--jobs",
            "1",
            "-o",
            str(best),
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output + r.stderr
    assert re.search(
        r"2 candidates: 1 pruned by the compiler \(E0\d\d 1\), (1 compiled, 0|0 compiled, 1) from "
        r"the kernel cache, 0 failed to build",
        r.stdout,
    ), r.stdout
    assert re.search(r"pruned 1 of 2 in \d+\.\d s: ", r.stdout), r.stdout
    assert "(start)" in r.stdout
    head = best.read_text()
    assert head.startswith(f"# cypressc tune: the best of 2 candidates for {prog}")
    assert load_mapping(best).spec.tune is not None  # the best mapping loads, tune: kept
    # stderr is no terminal: plain progress lines, each phase's start and end
    err = r.stderr
    assert "tune: round 1: checking: 1 candidate\n" in err, err
    assert re.search(r"tune: round 1: checking: pruned 1 of 1 \(E0\d\d 1\) in \d+\.\d s\n", err), (
        err
    )
    assert "tune: round 1: compiling: 1 candidate\n" in err, err
    assert re.search(
        r"tune: round 1: compiling: (1 compiled, 0|0 compiled, 1) from the kernel cache, "
        r"0 failed to build in \d+\.\d s\n",
        err,
    ), err
    assert f"{bad}=3" not in head
