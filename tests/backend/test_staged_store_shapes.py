"""The staged epilogue (accumulator -> shared tile -> TMA store) writes and stores 64 x 64 boxes
of 128-byte swizzled rows.  A tile narrower than 64 columns (flash_attention3 with E = 32 and O
staged in SHARED, found by bench/mapping_sweep.py on an H100: an illegal shared-memory address,
since the boxes ran past the 64 x 32 tile) is refused with a located E050 that says what to
change; the same mapping with O stored from registers builds, and bench/gpu_check.py runs its
harness at a size the kernel accepts."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

from click.testing import CliRunner

from cypressc.cli import main
from cypressc.runtime import KernelInfo

ROOT = Path(__file__).resolve().parents[2]
FA3 = ROOT / "programs" / "flash_attention3.cyp"


BASE = ROOT / "tests/mappings/full" / "flash_attention3" / "h100_d64_pp_staged.yaml"
# E = 32: O is 64 x 32 per warpgroup; O's atoms are 64 x E (S's, 64 x W = 128, stay)
E32 = (("{U: 128, E: 64}", "{U: 128, E: 32}"), ("WGMMA_64x64x16", "WGMMA_64x32x16"))
DIRECT = (
    ("mems: [NONE, SHARED]", "mems: [NONE, GLOBAL]"),
    ("mems: [REGISTER, SHARED]}", "mems: [REGISTER, GLOBAL]}"),
)


def test_a_staged_tile_narrower_than_a_box_is_refused(tmp_path, mapping_variant):
    mapping = mapping_variant(BASE, *E32[0], *E32[1:])
    r = CliRunner().invoke(main, ["build", str(FA3), "-m", str(mapping), "-o", str(tmp_path / "k")])
    assert r.exit_code == 1, r.output
    assert re.search(
        rf"^{re.escape(str(mapping))}:\d+:\d+: error\[E050\]: .*a staged epilogue tile of 32 "
        r"columns .*boxes of 64 columns",
        r.output,
        re.M,
    ), r.output
    assert "store it from registers" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "k").exists()  # nothing half-written


def test_the_same_tile_stored_from_registers_builds(tmp_path, mapping_variant):
    mapping = mapping_variant(BASE, *E32[0], *E32[1:], *DIRECT)
    r = CliRunner().invoke(main, ["build", str(FA3), "-m", str(mapping), "-o", str(tmp_path / "k")])
    assert r.exit_code == 0, r.output
    cu = (tmp_path / "k" / "flash_attention3.cu").read_text()
    assert "64x32 f32 per warpgroup" in cu and "tma_store" not in cu
    # bench/gpu_check.py times such a build at a size its launcher accepts (D <= E = 32), not at
    # its table's D = 64 run size, which the kernel refuses
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        gc = importlib.import_module("gpu_check")
    finally:
        sys.path.remove(str(ROOT / "bench"))
    info = KernelInfo.load_json(tmp_path / "k" / "flash_attention3.json")
    table = gc.PROGRAMS["flash_attention3"]
    assert info.failed_requires(table.run)
    _, check, _, run, why = gc.program_for("flash_attention3", info)
    assert why == "" and not info.failed_requires(run) and run in check and run["D"] <= 32
