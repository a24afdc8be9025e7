"""bench/mapping_sweep.py, the mapping variants of the GPU correctness sweep: the knobs are the
tuner's (plus 1.5x an int tunable), an atom follows the one tunable its N is the value of, a
variant's name says what it changed, and the script writes only variants the compiler builds."""

from __future__ import annotations

import importlib
import random
import re
import sys
from pathlib import Path

import pytest

from cypressc.mapping.loader import load_mapping_source

ROOT = Path(__file__).resolve().parents[2]
BENCH = str(ROOT / "bench")
FA3 = ROOT / "programs" / "flash_attention3.cyp"
MAPS = ROOT / "tests/mappings/full" / "flash_attention3"


@pytest.fixture(scope="module")
def ms():
    sys.path.insert(0, BENCH)
    try:
        yield importlib.import_module("mapping_sweep")
    finally:
        sys.path.remove(BENCH)


def _tunables(text: str) -> dict[str, set]:
    spec = load_mapping_source(text, "<variant>").spec
    out: dict[str, set] = {}
    for inst in spec.instances:
        for k, v in inst.tunables.items():
            out.setdefault(k, set()).add(v)
    return out


def _block(text: str):
    return next(
        i
        for i in load_mapping_source(text, "<variant>").spec.instances
        if i.proc == "BLOCK" and i.pipeline is not None
    )


def test_the_space_is_the_tuners_with_one_and_a_half_times_each_int(ms):
    space = ms.space_of(FA3, MAPS / "h100_d64_pp_staged_persistent.yaml")
    knobs = {k.name: k for k in space.knobs}
    assert (
        knobs["U"].current == 128 and 192 in knobs["U"].candidates and 256 in knobs["U"].candidates
    )
    assert 3 in knobs["WGS"].candidates and knobs["pingpong"].candidates == (True, False)
    assert "MMA" not in knobs  # S's and O's atoms differ: not one tied knob


def test_atoms_are_tried_as_they_are_and_moved_with_a_changed_tunable(ms):
    space = ms.space_of(FA3, MAPS / "h100_d64_pp_staged_persistent.yaml")  # S 64 x 128, O 64 x 64
    vals = {**space.base, "W": 64, "pipeline": 3, "persistent": False}
    plain, moved = ms.variants(space, vals)  # W: 128 -> 64 moves the 64 x 128 atoms
    for text in (plain, moved):
        t = _tunables(text)
        assert t["W"] == {64} and t["U"] == {128} and t["E"] == {64}
        blk = _block(text)
        assert blk.pipeline == 3 and blk.persistent is False and blk.pingpong is True
    assert _tunables(plain)["MMA"] == {"WGMMA_64x128x16", "WGMMA_64x64x16"}
    assert _tunables(moved)["MMA"] == {"WGMMA_64x64x16"}
    assert ms.label(space, vals) == "W64_pipeline3_persistent0"
    # a knob that is no atom's N (pipeline) adds no text
    assert len(ms.variants(space, {**space.base, "pipeline": 4})) == 1


def test_the_compiler_picks_which_atoms_follow(ms, tmp_path):
    """d64 (U = W = 128): W = 64 builds with the 64 x 128 atoms moved to 64 x 64 (S's) and is
    refused with them as they were.  FA2 d64 (U = W = 128): U = 64 on one warpgroup builds
    with the atoms as they are and is refused with them moved (64 x 64 atoms on 64 x 128 S
    tiles)."""
    from click.testing import CliRunner

    from cypressc.cli import main

    space = ms.space_of(FA3, MAPS / "h100_d64_pp_staged_persistent.yaml")

    def builds(text: str, program: Path = FA3) -> bool:
        path = tmp_path / "v.yaml"
        path.write_text(text)
        r = CliRunner().invoke(
            main, ["build", str(program), "-m", str(path), "-o", str(tmp_path / "k")]
        )
        return r.exit_code == 0

    plain, moved = ms.variants(space, {**space.base, "W": 64})
    assert not builds(plain) and builds(moved)
    fa2 = ROOT / "programs" / "flash_attention2.cyp"
    space = ms.space_of(fa2, ROOT / "tests/mappings/full" / "flash_attention2" / "h100_d64.yaml")
    plain, moved = ms.variants(space, {**space.base, "U": 64, "WGS": 1})
    assert builds(plain, fa2) and not builds(moved, fa2)


def test_a_draw_changes_one_to_three_knobs(ms):
    space = ms.space_of(FA3, MAPS / "h100_d64_pp_staged_persistent.yaml")
    rng = random.Random(0)
    for _ in range(50):
        vals = ms.draw(space, rng)
        changed = [n for n, v in vals.items() if v != space.base[n]]
        assert 1 <= len(changed) <= 3 and "MMA" not in changed


def test_only_variants_the_compiler_builds_are_written(ms, tmp_path, capsys):
    assert (
        ms.main_(
            [
                "--out",
                str(tmp_path),
                "--count",
                "3",
                "--seed",
                "2",
                "--programs",
                "flash_attention3",
                "--tries",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    printed = [Path(p) for p in out.out.split()]
    assert len(printed) == 3 and sorted(printed) == sorted(tmp_path.rglob("*.yaml"))
    assert re.search(r"# 3 accepted, \d+ refused", out.err)
    for p in printed:
        base, changed = p.stem.split("__")
        assert (MAPS / f"{base}.yaml").exists() and changed
