"""programs/flash_attention2.cyp through the backend (issue #11): every bundled mapping lowers;
the kernel's interface (a float ``scale`` argument, the ``causal`` flag, the launcher's
requirements derived from the program: H a multiple of HK from its exact division, D at most
the mapping's E from the one block column it writes); the causal trip count computed per
tile; [B, H, S, D] tensors addressed as [B·H, S, D] (TMA batch, grouped-query key/value
head); the masks and the log-sum-exp store; the mask and LSE leaves' NumPy semantics; and
(with nvcc) kernels without spills or ptxas-injected wgmma waits."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cypressc.abi.info import KernelInfo
from cypressc.cli import main
from cypressc.lang.intrinsics import LEAF_FUNCTIONS, Operand
from tests.compiled import rendered

ROOT = Path(__file__).resolve().parents[2]
FA2 = ROOT / "programs" / "flash_attention2.cyp"
MAPPINGS = sorted((ROOT / "tests/mappings/full" / "flash_attention2").glob("h100_*.yaml"))


def _build(tmp_path: Path, mapping: Path, *extra: str) -> tuple[str, KernelInfo, Path]:
    out = tmp_path / mapping.stem
    r = CliRunner().invoke(main, ["build", str(FA2), "-m", str(mapping), "-o", str(out), *extra])
    assert r.exit_code == 0, r.output
    info = KernelInfo.from_dict(json.loads((out / "flash_attention2.json").read_text()))
    return (out / "flash_attention2.cu").read_text(), info, out


def _sizes(**kw) -> dict:
    return {**dict(B=2, H=8, M=1000, D=64, HK=2, N=777, causal=1), **kw}


def test_every_mapping_lowers(tmp_path):
    assert {m.stem for m in MAPPINGS} >= {"h100_d64", "h100_d128", "h100_d128_wg3", "h100_d64_w64"}
    for m in MAPPINGS:  # everything `check` does, on the session's compile (tests/compiled.py)
        assert rendered(FA2, m).files
    m = (
        ROOT / "tests/mappings/full" / "flash_attention2" / "h100.yaml"
    )  # and through the command, as a user checks one
    r = CliRunner().invoke(main, ["check", str(FA2), "-m", str(m)])
    assert r.exit_code == 0, (m.name, r.output)


def test_the_kernel_interface_and_its_requirements(tmp_path):
    cu, info, _ = _build(
        tmp_path, ROOT / "tests/mappings/full" / "flash_attention2" / "h100_d64.yaml"
    )
    assert [p.name for p in info.params] == ["O", "LSE", "Q", "K", "V"]
    assert info.sizes == ("B", "H", "M", "D", "HK", "N", "causal") and info.floats == ("scale",)
    assert "int64_t causal, float scale, cudaStream_t stream)" in cu
    assert info.failed_requires(_sizes()) == []
    # the program's `O.shape[0] / K.shape[0]` is exact division: H must be a multiple of HK
    assert any("H must be a multiple of HK" in w for w in info.failed_requires(_sizes(H=6, HK=4)))
    # O is written in one block column of E = 64: a wider head would leave columns unwritten
    assert any("D must be at most 64" in w for w in info.failed_requires(_sizes(D=128)))
    assert info.failed_requires(_sizes(D=32)) == []
    _, info128, _ = _build(
        tmp_path, ROOT / "tests/mappings/full" / "flash_attention2" / "h100_d128.yaml"
    )
    assert (
        info128.failed_requires(_sizes(D=128)) == [] and info128.failed_requires(_sizes(D=64)) == []
    )


def test_the_causal_trip_count_is_computed_per_tile(tmp_path):
    cu, _, _ = _build(tmp_path, ROOT / "tests/mappings/full" / "flash_attention2" / "h100_d64.yaml")
    trip = "const int num_k = cdiv(min(N, (((b2 * 128) + 128) + ((1 - causal) * N))), 128);"
    # once per role (producer, consumers), each time after the tile's coordinates are known
    assert cu.count(trip) == 2
    for part in cu.split("tile_coords(t, b0, b1, b2);")[1:]:
        assert trip in part.split("for (int kb")[0]
    assert "const int num_k" not in cu.split("auto tile_coords")[0]


def test_heads_are_tma_batches_and_kv_heads_are_shared(tmp_path):
    cu, _, _ = _build(
        tmp_path, ROOT / "tests/mappings/full" / "flash_attention2" / "h100_d128.yaml"
    )
    # [B, H, M, D] as [B·H, M, D]: a 3-D map whose batch extent is B * H (B * HK for K and V)
    assert re.search(r"make_tma_map\(&tm_Q_128x64, Q, false, D, M, B \* H, 64, 128, 3\)", cu)
    assert re.search(r"make_tma_map\(&tm_K_128x64, K, false, D, N, B \* HK, 64, 128, 3\)", cu)
    # query head b1 reads key/value head b1 / (H / HK)
    assert cu.count("((b0 * HK) + (b1 / (H / HK))));") == 2  # the K and the V tile loads
    assert "((b0 * H) + b1))" in cu


def test_masks_and_the_log_sum_exp_store(tmp_path):
    cu, _, _ = _build(tmp_path, ROOT / "tests/mappings/full" / "flash_attention2" / "h100_d64.yaml")
    assert "cypress::mask_columns(S_reg[0], (N - (kb * 128)));" in cu  # one atom: no loop
    # the diagonal offset: the block's first row minus the tile's first key, per warpgroup and atom
    assert re.search(r"cypress::mask_causal\(S_reg\[0\], .*\(cw \* 64\)\)\);", cu)
    assert "cypress::row_log_sum_exp(LSE_finish_thread[0], m_reg[0], l_reg[0], scale);" in cu
    store = cu.split("copy %LSE_finish_thread -> LSE")[1].split("}")[0]
    assert "threadIdx.x % 4 == 0" in store and "LSE + size_t(((b0 * H) + b1)) * M" in store
    assert "if (r0 + 8 * h < M)" in store


def test_mask_and_log_sum_exp_semantics():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    rows, cols = np.array([0, 5, 9]), np.array([2, 3, 6, 7])
    got = LEAF_FUNCTIONS["mask_columns"].semantics(Operand(x, (rows, cols)), 6)[0]
    assert np.array_equal(np.isneginf(got), np.broadcast_to(cols >= 6, x.shape))
    assert np.array_equal(got[:, :2], x[:, :2])
    # causal: column c masked past row r + d
    got = LEAF_FUNCTIONS["mask_causal"].semantics(Operand(x, (rows, cols)), -2)[0]
    assert np.array_equal(np.isneginf(got), cols[None, :] > rows[:, None] - 2)
    m, l = np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, np.e, 0.0], np.float32)
    lse = Operand(np.zeros(2, np.float32), (np.array([0, 1]),))
    got = LEAF_FUNCTIONS["row_log_sum_exp"].semantics(
        lse, Operand(m, (np.arange(3),)), Operand(l, (np.arange(3),)), 0.5
    )[0]
    assert np.allclose(got, [0.5, 2.0])


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("mapping", ["h100_d128", "h100_d128_wg3"])
def test_the_kernel_compiles_without_spills(tmp_path, mapping, clean_ptxas):
    _, _, out = _build(
        tmp_path,
        ROOT / "tests/mappings/full" / "flash_attention2" / f"{mapping}.yaml",
        "--dtype",
        "T=bf16",
    )
    clean_ptxas(out, "libflash_attention2.so")
