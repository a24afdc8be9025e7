"""Hints that work (issue #9, item 5), through the real CLI on real files.

Each hint names what *this* program and mapping have — the program's own tile and
warpgroup tunables with the instances that bind them, its own dtype parameters — never
a knob that is already at its limit; following a hint's suggestion gets past the error;
no raw pydantic text reaches the user; E060 (graphviz) has a real location.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main

ROOT = Path(__file__).resolve().parent.parent
# the full form (every tree written out): these tests edit the program's own text
GEMM = ROOT / "tests" / "programs" / "full" / "gemm.cyp"
GEMM_MAP = (ROOT / "tests/mappings/full" / "gemm" / "h100.yaml").read_text()
WGS_INSTANCES = "WGS (clear_block, mma_block, copy_block)"


def cli(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def hint(stderr: str) -> str:
    (h,) = [ln for ln in stderr.splitlines() if ln.startswith("hint: ")]
    return h.removeprefix("hint: ")


def at(path: Path, needle: str, token: str | None = None) -> str:
    """``path:line:col`` of ``token`` (default: ``needle``) on the first line holding ``needle``."""
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return f"{path}:{i}:{line.index(token or needle, line.index(needle)) + 1}"
    raise AssertionError(f"{needle!r} not in {path}")


def knob(text: str, line: str) -> str:
    """The gemm mapping with ``line`` added to the gemm_block instance's knobs."""
    assert "    raster: 16\n" in text
    return text.replace("    raster: 16\n", f"    raster: 16\n{line}\n", 1)


# ----------------------------------------------------------------------------- E046
def test_e046_names_the_programs_tile_tunables_and_not_smem_limit_at_the_maximum(tmp_path):
    m = write(tmp_path, "m.yaml", GEMM_MAP.replace("pipeline: 3", "pipeline: 8"))
    assert "smem_limit: 227KiB" in m.read_text()  # already the machine's maximum
    r = cli("check", GEMM, "-m", m)
    assert r.exit_code == 1
    block = at(m, "- instance: gemm_block", "gemm_block")
    assert r.stderr.startswith(f"{block}: error[E046]: shared memory does not fit")
    h = hint(r.stderr)
    assert h.startswith(
        "lower `pipeline: 8`, shrink the tile tunables U, V (gemm_host) or W (gemm_block)"
    )
    assert "smem_limit" not in h and "WGS" not in h


def test_e046_in_a_persistent_block_pipeline_stages_share_no_bytes(tmp_path):
    """h100_alias fits only by giving the epilogue tile the bytes of the K-loop's stages; a
    persistent block's next tile refills those stages while this one's epilogue still uses
    them, so there it does not fit, and the hint says which tensors may share bytes."""
    alias = (ROOT / "tests/mappings/full" / "gemm" / "h100_alias.yaml").read_text()
    assert cli("check", GEMM, "-m", write(tmp_path, "a.yaml", alias)).exit_code == 0
    r = cli(
        "check",
        GEMM,
        "-m",
        write(tmp_path, "p.yaml", alias.replace("persistent: false", "persistent: true")),
    )
    assert r.exit_code == 1 and "error[E046]" in r.stderr
    assert (
        "drop `persistent: true` (in a persistent block only a tensor copied in once per tile, outside "
        "the main loop, shares its bytes with one used after it)" in hint(r.stderr)
    )


def test_e046_without_smem_limit_does_not_suggest_raising_it(tmp_path):
    text = GEMM_MAP.replace("pipeline: 3", "pipeline: 8").replace("    smem_limit: 227KiB\n", "")
    r = cli("check", GEMM, "-m", write(tmp_path, "m.yaml", text))
    assert r.exit_code == 1 and "error[E046]" in r.stderr
    assert "smem_limit" not in hint(r.stderr)


def test_e046_below_the_maximum_is_located_at_smem_limit_and_suggests_raising_it(tmp_path):
    m = write(tmp_path, "m.yaml", GEMM_MAP.replace("smem_limit: 227KiB", "smem_limit: 100KiB"))
    r = cli("check", GEMM, "-m", m)
    assert r.exit_code == 1
    assert r.stderr.startswith(f"{at(m, '100KiB')}: error[E046]: shared memory does not fit")
    h = hint(r.stderr)
    assert "shrink the tile tunables U, V (gemm_host) or W (gemm_block)" in h
    assert h.endswith("or raise `smem_limit:` (at most 227KiB on h100)")


def test_e046_smem_limit_above_the_machine_is_located_at_its_value(tmp_path):
    m = write(tmp_path, "m.yaml", GEMM_MAP.replace("smem_limit: 227KiB", "smem_limit: 300KiB"))
    r = cli("check", GEMM, "-m", m)
    assert r.exit_code == 1
    assert r.stderr.startswith(
        f"{at(m, '300KiB')}: error[E046]: smem_limit 307200 exceeds the 232448 bytes"
    )
    assert hint(r.stderr).startswith("lower `smem_limit:` to at most 227KiB")


def test_e046_following_the_hint_compiles(tmp_path):
    """The first remedy offered, applied, makes the mapping fit."""
    text = GEMM_MAP.replace("pipeline: 3", "pipeline: 8")
    r = cli("check", GEMM, "-m", write(tmp_path, "m.yaml", text))
    assert "lower `pipeline: 8`" in hint(r.stderr)
    r = cli(
        "check",
        GEMM,
        "-m",
        write(tmp_path, "fixed.yaml", text.replace("pipeline: 8", "pipeline: 3")),
    )
    assert r.exit_code == 0, r.stderr


def _renamed(tmp_path: Path) -> tuple[Path, str]:
    """gemm.cyp and its mapping with every tunable renamed: U, V, W, WGS -> TM, TN, TK, NWG."""
    names = {"U": "TM", "V": "TN", "W": "TK", "WGS": "NWG"}
    prog = GEMM.read_text()
    mapping = GEMM_MAP
    for old, new in names.items():
        prog = re.sub(rf"\b{old}\b", new, prog)
        mapping = re.sub(rf"\b{old}:", f"{new}:", mapping)
    p = write(tmp_path, "renamed.cyp", prog)
    assert cli("check", p, "-m", write(tmp_path, "ok.yaml", mapping)).exit_code == 0
    return p, mapping


def test_hints_name_the_programs_own_tunables_whatever_they_are_called(tmp_path):
    prog, mapping = _renamed(tmp_path)
    r = cli(
        "check",
        prog,
        "-m",
        write(tmp_path, "a.yaml", mapping.replace("pipeline: 3", "pipeline: 8")),
    )
    h = hint(r.stderr)
    assert "shrink the tile tunables TM, TN (gemm_host) or TK (gemm_block)" in h
    assert not re.search(r"\b(U|V|W|WGS)\b", h), h
    r = cli(
        "check", prog, "-m", write(tmp_path, "b.yaml", knob(mapping, "    consumer_registers: 144"))
    )
    h = hint(r.stderr)
    assert "raise the warpgroup count NWG (clear_block, mma_block, copy_block)" in h
    assert "shrink the tile tunables TM, TN (gemm_host)" in h
    assert not re.search(r"\b(U|V|W|WGS)\b", h), h


# ----------------------------------------------------------------------------- E047
def test_e047_accumulators_name_the_warpgroup_tunable_and_register_tiles(tmp_path):
    m = write(tmp_path, "m.yaml", knob(GEMM_MAP, "    consumer_registers: 144"))
    r = cli("check", GEMM, "-m", m)
    assert r.exit_code == 1
    # 128 accumulator words (a 64 x 256 f32 tile per warpgroup) + 24 overhead
    assert r.stderr.startswith(
        f"{at(m, 'consumer_registers: 144', '144')}: error[E047]: the consumer threads "
        "need about 152 registers each"
    )
    h = hint(r.stderr)
    assert h == (
        f"raise the warpgroup count {WGS_INSTANCES} so that each warpgroup holds fewer rows, "
        "shrink the tile tunables U, V (gemm_host), or raise `consumer_registers:` to 152 (at most 232)"
    )
    # the suggested budget works
    m2 = write(tmp_path, "m2.yaml", knob(GEMM_MAP, "    consumer_registers: 152"))
    assert cli("check", GEMM, "-m", m2).exit_code == 0


def test_e047_without_a_warpgroup_tunable_says_how_to_add_warpgroups(tmp_path):
    """The docs' example has no warpgroup-count tunable: the hint does not invent one."""
    doc = (ROOT / "docs" / "language.md").read_text()
    sec = doc[doc.index("<!-- compiles -->\n```python") :]
    prog = re.search(r"```python\n(.*?)```", sec, re.DOTALL).group(1)
    mapping = re.search(r"```yaml\n(.*?)```", sec, re.DOTALL).group(1)
    mapping = mapping.replace("{U: 64, V: 128}", "{U: 128, V: 256}").replace(
        "64x128x16", "64x256x16"
    )
    r = cli("check", write(tmp_path, "ex.cyp", prog), "-m", write(tmp_path, "ex.yaml", mapping))
    assert r.exit_code == 1 and "error[E047]" in r.stderr, r.stderr
    assert hint(r.stderr) == (
        "split the tile over more consumer warpgroups (a prange launching WARPGROUP "
        "instances), or shrink the tile tunables U, V (host)"
    )


def test_e047_register_file_overflow_is_located_at_the_budget(tmp_path):
    m = write(tmp_path, "m.yaml", knob(GEMM_MAP, "    consumer_registers: 256"))
    r = cli("check", GEMM, "-m", m)
    assert r.exit_code == 1
    assert r.stderr.startswith(
        f"{at(m, 'consumer_registers: 256', '256')}: error[E047]: registers: "
        "2 consumer warpgroup(s) x 256"
    )
    assert (
        hint(r.stderr)
        == f"lower `consumer_registers: 256`, or lower the warpgroup count {WGS_INSTANCES}"
    )


def test_e047_producer_above_consumers_says_so(tmp_path):
    m = write(
        tmp_path,
        "m.yaml",
        knob(GEMM_MAP, "    producer_registers: 200\n    consumer_registers: 152"),
    )
    r = cli("check", GEMM, "-m", m)
    assert r.exit_code == 1
    first = r.stderr.splitlines()[0]
    assert first.startswith(
        f"{at(m, 'producer_registers: 200', '200')}: error[E047]: the producer warpgroup "
        "gets 200 registers per thread, more than the consumers' 152"
    ), first


# ----------------------------------------------------------------------------- E002
def test_scalar_augmented_assignment_hint_works(tmp_path):
    src = GEMM.read_text()
    anchor = "    M, N, K = C.shape[0], C.shape[1], A.shape[1]\n    Ap = partition_by_blocks(A, (M, W))\n"
    assert anchor in src
    bad = write(
        tmp_path, "bad.cyp", src.replace(anchor, anchor + "    nk = cdiv(K, W)\n    nk += 1\n")
    )
    m = write(tmp_path, "m.yaml", GEMM_MAP)
    r = cli("check", bad, "-m", m)
    assert r.exit_code == 1 and f"{at(bad, 'nk += 1')}: error[E002]" in r.stderr
    suggestion = re.search(r"new name: `([^`]*)`", hint(r.stderr)).group(1)
    assert suggestion == "nk2 = nk + 1"
    fixed = write(tmp_path, "fixed.cyp", bad.read_text().replace("nk += 1", suggestion))
    assert cli("check", fixed, "-m", m).exit_code == 0
    # and what the old hint said (`x = x + 1`) is indeed an error
    rebound = write(tmp_path, "rebound.cyp", bad.read_text().replace("nk += 1", "nk = nk + 1"))
    assert "error[E026]" in cli("check", rebound, "-m", m).stderr


def test_tensor_augmented_assignment_hint_works(tmp_path):
    src = (ROOT / "tests" / "programs" / "full" / "dual_gemm.cyp").read_text()
    assert src.count("    add(C, X)\n") == 1
    bad = write(tmp_path, "dual.cyp", src.replace("    add(C, X)\n", "    C += X\n"))
    m = ROOT / "tests/mappings/full" / "dual_gemm" / "h100.yaml"
    r = cli("check", bad, "-m", m)
    assert r.exit_code == 1 and "error[E002]" in r.stderr
    call = re.search(r"`(add\([^`]*\))`", hint(r.stderr)).group(1)
    fixed = write(tmp_path, "fixed.cyp", bad.read_text().replace("C += X", call))
    assert cli("check", fixed, "-m", m).exit_code == 0


# ----------------------------------------------------------------------------- E013
def test_dtype_hint_names_the_programs_dtype_parameter(tmp_path):
    m = write(tmp_path, "m.yaml", GEMM_MAP)
    r = cli("check", GEMM, "-m", m, "--dtype", "U=bf16")
    assert r.exit_code == 1 and "error[E013]: --dtype binds 'U'" in r.stderr
    assert "tests/programs/full/gemm.cyp:6:1: note: 'T' is declared here" in r.stderr
    h = hint(r.stderr)
    assert h == "this program's dtype parameters: T (f16 or bf16); e.g. `--dtype T=bf16`"
    name, dt = re.search(r"`--dtype (\w+)=(\w+)`", h).groups()
    assert cli("check", GEMM, "-m", m, "--dtype", f"{name}={dt}").exit_code == 0


def test_dtype_hint_for_a_program_without_dtype_parameters(tmp_path):
    prog = write(
        tmp_path,
        "f16.cyp",
        re.sub(r"\bT\b", "f16", GEMM.read_text().replace("T = dtype(f16, bf16)", "")),
    )
    r = cli("check", prog, "-m", write(tmp_path, "m.yaml", GEMM_MAP), "--dtype", "T=bf16")
    assert r.exit_code == 1
    assert hint(r.stderr).startswith(
        "this program declares no dtype parameter: drop `--dtype T=bf16`"
    )


# ----------------------------------------------------------------------------- E060
def _svg(monkeypatch, path: str):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PATH", path)
    return CliRunner().invoke(
        main,
        [
            "explain",
            "programs/gemm.cyp",
            "-m",
            "tests/mappings/full/gemm/h100.yaml",
            "--graph",
            "--graph-format",
            "svg",
        ],
        catch_exceptions=False,
    )


def test_e060_without_graphviz_is_located_at_the_program(tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    r = _svg(monkeypatch, str(empty))
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.splitlines()[0] == (
        "programs/gemm.cyp: error[E060]: --graph-format svg needs graphviz's "
        "`dot` program, which is not on PATH"
    )
    assert "<graphviz>" not in r.stderr and "Traceback" not in r.stderr
    assert "--graph-format dot" in hint(r.stderr)
    assert "| E060 |" in (ROOT / "docs" / "language.md").read_text()


def test_e060_when_dot_fails(tmp_path, monkeypatch):
    """A `dot` that exits non-zero (a real executable script) is a located E060, not a crash."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    dot = bin_ / "dot"
    dot.write_text("#!/bin/sh\necho 'Error: syntax error in line 1' >&2\nexit 3\n")
    dot.chmod(0o755)
    r = _svg(monkeypatch, str(bin_))
    assert r.exit_code == 1
    assert r.stderr.splitlines()[0] == (
        f"programs/gemm.cyp: error[E060]: graphviz's `dot` ({dot}) failed with "
        "exit status 3: Error: syntax error in line 1"
    )


# ----------------------------------------------------------------------------- M002
PYDANTIC = re.compile(
    r"Input should|should be|after validation|instance of|unable to|valid dictionary"
)


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            None,
            "machine: h100\nentrypoint: gemm_host\ninstances: []\n",
            "'instances' is empty; it needs at least one instance",
        ),
        (
            None,
            "machine: h100\nentrypoint: gemm_host\ninstances:\n  - gemm_host\n",
            "'instances[0]': an instance is a mapping of instance, variant, proc, mems, … (got 'gemm_host')",
        ),
        (
            None,
            "machine: h100\nentrypoint: gemm_host\ninstances:\n",
            "'instances': expected a list (got an empty value)",
        ),
        ("machine: h100", "machine: [h100]", "'machine': expected a string (got a list)"),
        ("pipeline: 3", "pipeline: '3'", "'pipeline': expected an integer (got '3')"),
        ("pipeline: 3", "pipeline: 2.5", "'pipeline': expected an integer (got 2.5)"),
        ("pipeline: 3", "pipeline: 9", "'pipeline' must be at most 8 (got 9)"),
        ("pipeline: 3", "pipeline: 0", "'pipeline' must be at least 1 (got 0)"),
        (
            "warpspecialize: true",
            "warpspecialize: 1",
            "'warpspecialize': expected true or false (got 1)",
        ),
        (
            "tunables: {W: 64}",
            "tunables: [64]",
            "'tunables': expected a mapping (key: value) (got a list)",
        ),
        (
            "proc: BLOCK",
            "proc: 3",
            "'proc': expected 'HOST', 'BLOCK', 'WARPGROUP', 'WARP' or 'THREAD' (got 3)",
        ),
        ("calls: [mma_thread]", "calls: mma_thread", "'calls': expected a list (got 'mma_thread')"),
    ],
)
def test_schema_errors_speak_the_projects_words(tmp_path, old, new, message):
    text = new if old is None else GEMM_MAP.replace(old, new, 1)
    assert text != GEMM_MAP
    r = cli("check", GEMM, "-m", write(tmp_path, "m.yaml", text))
    assert r.exit_code == 1
    first = r.stderr.splitlines()[0]
    assert re.match(rf"^{re.escape(str(tmp_path))}/m\.yaml:\d+:\d+: error\[M002\]: ", first), first
    assert first.endswith(message), first
    assert not PYDANTIC.search(r.stderr), r.stderr
