"""bench/mapping_sweep.py, the mapping variants of the GPU correctness sweep: each knob lands
where the compiler reads it, the S atoms follow W while O's stay, and the script writes only
variants the compiler builds."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = str(ROOT / "bench")
FA3 = ROOT / "mappings" / "flash_attention3"


@pytest.fixture(scope="module")
def ms():
    sys.path.insert(0, BENCH)
    try:
        yield importlib.import_module("mapping_sweep")
    finally:
        sys.path.remove(BENCH)


def test_knobs_land_in_the_block_instance(ms):
    src = (FA3 / "h100_d64.yaml").read_text()  # U 128, W 128, E 64; no ping-pong, not persistent
    assert "pingpong" not in src and "persistent: true" not in src
    out = ms.variant(src, {"U": 256, "WGS": 2, "W": 64, "pipeline": 3, "pingpong": True, "persistent": True})
    assert "{U: 256, E: 64}" in out and "{W: 64}" in out
    block = next(line for line in out.splitlines() if "pipeline:" in line)
    assert "pipeline: 3" in block and "pingpong: true" in block and "persistent: true" in block
    assert ms._base_knobs(out) == {"U": 256, "WGS": 2, "W": 64, "pipeline": 3, "pingpong": True, "persistent": True}
    # S's atoms (64 x W) followed W; O's (64 x E = 64 x 64) were already 64 wide
    assert "WGMMA_64x128x16" not in out
    off = ms.variant((FA3 / "h100_d64_pp_staged_persistent.yaml").read_text(),
                     {"U": 128, "WGS": 2, "W": 128, "pipeline": 2, "pingpong": False, "persistent": False})
    assert "pingpong: false" in off and "persistent: false" in off


def test_w_equal_to_e_leaves_the_atoms_alone(ms):
    """d = 128 with W = 128: S's and O's atoms are both 64 x 128, so a new W cannot be applied
    to S's alone: no variant (the empty text)."""
    src = (FA3 / "h100_d128.yaml").read_text()
    assert ms.variant(src, {**ms._base_knobs(src), "W": 64}) == ""
    assert ms.variant(src, {**ms._base_knobs(src), "pipeline": 3}) != ""


def test_only_variants_the_compiler_builds_are_written(ms, tmp_path, capsys):
    assert ms.main_(["--out", str(tmp_path), "--count", "3", "--seed", "2", "--programs", "flash_attention3"]) == 0
    printed = [Path(p) for p in capsys.readouterr().out.split()]
    assert len(printed) == 3 and sorted(printed) == sorted(tmp_path.rglob("*.yaml"))
    for p in printed:
        k = re.fullmatch(r".*__U(\d+)_WGS(\d)_W(\d+)_pipeline(\d)_pingpong([01])_persistent([01])", p.stem)
        assert k, p
        assert ms._base_knobs(p.read_text()) == {"U": int(k[1]), "WGS": int(k[2]), "W": int(k[3]), "pipeline": int(k[4]),
                                                 "pingpong": k[5] == "1", "persistent": k[6] == "1"}
