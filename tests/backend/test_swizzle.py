"""Shared tiles are swizzled by their row width (issue #10 item 5): 128 B when a row holds a
multiple of 64 16-bit columns, else 64 B (32 columns), else 32 B (16 columns); the TMA box's
inner extent, the tensor map's swizzle mode and the wgmma descriptors follow the choice, and
other widths are refused with E050.  Built through the CLI from real mapping files; the
W=32 kernel is compiled by nvcc for sm_90a."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.backend.plan_decl import StageBuffer, swizzle_for
from cypressc.cli import main
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]
GEMM = str(ROOT / "programs" / "gemm.cyp")
H100 = (ROOT / "tests/mappings/full" / "gemm" / "h100.yaml").read_text()
PLAIN = (ROOT / "tests/mappings/full" / "gemm" / "h100_plain.yaml").read_text()


@pytest.mark.parametrize(
    "cols, swizzle",
    [
        (64, 128),
        (128, 128),
        (192, 128),
        (256, 128),
        (32, 64),
        (96, 64),
        (160, 64),
        (16, 32),
        (48, 32),
        (80, 32),
    ],
)
def test_the_swizzle_is_the_widest_mode_that_divides_the_row(cols, swizzle):
    assert swizzle_for(cols) == swizzle


@pytest.mark.parametrize("cols", [0, 4, 8, 24, 40, 72 + 2])
def test_rows_no_mode_divides_have_no_swizzle(cols):
    assert swizzle_for(cols) is None


def test_chunks_and_stage_bytes_follow_the_swizzle():
    a = StageBuffer("A", "f16", 128, 32, 6, 0, swizzle_for(32))  # W=32: one 64-byte-swizzled chunk
    assert (a.swizzle, a.chunk_cols, a.chunks, a.chunk_bytes, a.stage_bytes) == (
        64,
        32,
        1,
        8192,
        8192,
    )
    a3 = StageBuffer("A", "f16", 128, 96, 2, 0, swizzle_for(96))
    assert (a3.chunk_cols, a3.chunks, a3.chunk_bytes, a3.stage_bytes) == (32, 3, 8192, 24576)
    a16 = StageBuffer("A", "f16", 128, 48, 4, 0, swizzle_for(48))
    assert (a16.swizzle, a16.chunk_cols, a16.chunks, a16.chunk_bytes) == (32, 16, 3, 4096)
    b = StageBuffer("B", "f16", 32, 256, 6, 0)  # the default stays 128 B: 64-column chunks
    assert (b.swizzle, b.chunk_cols, b.chunks, b.chunk_bytes, b.stage_bytes) == (
        128,
        64,
        4,
        4096,
        16384,
    )


def _build(tmp_path: Path, text: str, name: str = "m") -> str:
    m = tmp_path / f"{name}.yaml"
    m.write_text(text)
    r = CliRunner().invoke(main, ["build", GEMM, "-m", str(m), "-o", str(tmp_path / name)])
    assert r.exit_code == 0, r.output
    return (tmp_path / name / "gemm.cu").read_text()


def _one(pattern: str, src: str) -> str:
    found = re.findall(pattern, src)
    assert len(found) == 1, (pattern, found)
    return found[0]


def test_a_32_column_k_tile_is_64_byte_swizzled(tmp_path):
    """A (128 x 32, K-major): 64-byte rows, one TMA box of 32 columns per stage, a SWIZZLE_64B
    map, descriptors of the 64B layout with two k16 steps 32 B apart; B (32 x 256, MN-major)
    keeps 128-byte swizzle, its k16 step 16 rows of 128 B."""
    src = _build(tmp_path, H100.replace("{W: 64}", "{W: 32}"))
    assert "A_smem_STAGE = 8192, A_smem_CHUNK = 8192;" in src
    assert "B_smem_STAGE = 16384, B_smem_CHUNK = 4096;" in src
    assert "cypress::make_tma_map(&tm_A_128x32, A, false, K, M, 1, 32, 128, 2, 64)" in src
    assert (
        "cypress::make_tma_map(&tm_B_32x64, B, false, N, K, 1, 64, 32, 2)" in src
    )  # 128 B: default
    assert "128x32 f16, 1 chunk(s) of 32 columns" in src  # one 32-column box per stage
    load_a = _one(r"tma_load_2d\([^;]*&tm_A_128x32[^;]*;", src)
    assert "(kb * 32)" in load_a and "(b0 * 128)" in load_a and "64 * j" not in load_a
    assert "for (int kk = 0; kk < 2; ++kk)" in src
    da = _one(r"desc_k_sw\d+\([^;]*;", src)
    assert da.startswith("desc_k_sw64(") and "(kk / 2) * A_smem_CHUNK" in da
    assert "* 64 + (kk % 2) * 32)" in da  # rows of 64 B; the second k16 step 32 B along the row
    db = _one(r"desc_mn_sw\d+\([^;]*;", src)
    assert db.startswith("desc_mn_sw128(") and "kk * 16 * 128, B_smem_CHUNK)" in db
    assert "desc_k_sw128" not in src and "desc_mn_sw64" not in src


def test_a_16_column_k_tile_is_32_byte_swizzled(tmp_path):
    src = _build(tmp_path, H100.replace("{W: 64}", "{W: 16}").replace("pipeline: 3", "pipeline: 4"))
    assert "cypress::make_tma_map(&tm_A_128x16, A, false, K, M, 1, 16, 128, 2, 32)" in src
    da = _one(r"desc_k_sw\d+\([^;]*;", src)
    assert da.startswith("desc_k_sw32(") and "kk * A_smem_CHUNK" in da and "kk %" not in da
    assert "* 32)" in da


@pytest.mark.parametrize("n, swizzle, chunks", [(32, 64, 1), (96, 64, 3), (16, 32, 1), (48, 32, 3)])
def test_narrow_b_tiles_are_mn_major_with_narrower_swizzles(tmp_path, n, swizzle, chunks):
    """B (64 x N, MN-major) in chunks of swizzle/2 columns: the descriptor's leading byte
    offset is the chunk stride (several chunks for N = 96, 48), a k16 step 16 rows."""
    src = _build(
        tmp_path,
        PLAIN.replace("{U: 128, V: 128}", f"{{U: 128, V: {n}}}").replace(
            "WGMMA_64x128x16", f"WGMMA_64x{n}x16"
        ),
    )
    cols = swizzle // 2
    assert f"B_smem_STAGE = {64 * n * 2}, B_smem_CHUNK = {64 * swizzle};" in src
    assert f"{chunks} chunk(s) of {cols} columns" in src
    assert (
        f"cypress::make_tma_map(&tm_B_64x{cols}, B, false, N, K, 1, {cols}, 64, 2, {swizzle})"
        in src
    )
    db = _one(r"desc_mn_sw\d+\([^;]*;", src)
    assert db.startswith(f"desc_mn_sw{swizzle}(") and f"kk * 16 * {swizzle}, B_smem_CHUNK)" in db
    assert _one(r"desc_k_sw\d+\(", src) == "desc_k_sw128("  # A keeps its 64-column K tile


def test_a_tile_no_swizzle_fits_is_refused(tmp_path):
    m = tmp_path / "v24.yaml"
    m.write_text(
        H100.replace("{U: 128, V: 256}", "{U: 128, V: 24}").replace(
            "WGMMA_64x256x16", "WGMMA_64x24x16"
        )
    )
    r = CliRunner().invoke(main, ["check", GEMM, "-m", str(m)])
    assert r.exit_code == 1
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"{m}:") and "error[E050]" in first, r.stderr
    assert (
        "shared tile %B_smem has 24 columns (48-byte rows); TMA and wgmma swizzle rows of 128, "
        "64 or 32 bytes, so a tile needs a multiple of 16 columns" in first
    )
    assert "  - instance: gemm_block" in r.stderr  # located at the block instance


def test_row_sum_still_needs_128_byte_stages(tmp_path):
    m = tmp_path / "red32.yaml"
    m.write_text(
        (ROOT / "tests/mappings/full/gemm_reduction/h100.yaml")
        .read_text()
        .replace("{W: 64}", "{W: 32}")
    )
    r = CliRunner().invoke(main, ["check", str(ROOT / "programs/gemm_reduction.cyp"), "-m", str(m)])
    assert r.exit_code == 1
    assert (
        "error[E050]" in r.stderr
        and "row_sum() of %A_smem, whose 32-column rows are "
        "64-byte-swizzled; row_sum reads 128-byte-swizzled stages"
        in r.stderr
    ), r.stderr


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_the_bundled_k32_mapping_compiles_for_sm90a(tmp_path):
    """tests/mappings/full/gemm/h100_k32.yaml (the GPU check runs it): nvcc accepts the 64B descriptors
    and tensor map, with no spills and setmaxnreg honoured."""
    out = tmp_path / "k32"
    r = CliRunner().invoke(
        main,
        ["build", GEMM, "-m", str(ROOT / "tests/mappings/full/gemm/h100_k32.yaml"), "-o", str(out)],
    )
    assert r.exit_code == 0, r.output
    src = (out / "gemm.cu").read_text()
    assert "desc_k_sw64(" in src and "constexpr int STAGES = 6" in src
    stderr = compiled.ptxas_report(out / "gemm.cu", tmp_path / "lib.so")
    spills = [ln for ln in stderr.splitlines() if "spill stores" in ln]
    assert spills and all(" 0 bytes spill stores" in ln for ln in spills), spills
    assert "C7508" not in stderr, "setmaxnreg was ignored"
