"""The paper's §3 promise on the CPU: every bundled gemm mapping (tiles, K tile, stage
depth, one or two consumer warpgroups, warp specialization on and off, epilogue through
shared or straight to global) computes the same result, equal to NumPy, under the
interpreter — in program order and under a random schedule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cypressc.ir.check import random_inputs, run_module
from tests.compiled import snapshots

ROOT = Path(__file__).resolve().parents[2]
MAPPINGS = sorted((ROOT / "tests/mappings/full" / "gemm").glob("*.yaml"))
SIZES = dict(M=100, N=72, K=136)  # partial tiles in every dimension, several K steps


@pytest.fixture(scope="module")
def inputs():
    m = snapshots("gemm", MAPPINGS[0], until="dependence-analysis")[-1][1]
    return random_inputs(m, SIZES, seed=11)


def test_at_least_six_mappings():
    assert len(MAPPINGS) >= 6


@pytest.mark.parametrize("mapping", MAPPINGS, ids=lambda p: p.stem)
def test_mapping_changes_speed_not_results(mapping, inputs):
    m = snapshots("gemm", mapping, until="warp-specialization")[-1][1]
    ref = inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)
    results = []
    for seed in (None, 5):
        c = run_module(m, SIZES, inputs, ["C"], seed)["C"]
        assert not np.isnan(c).any()
        assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < 1e-2
        results.append(c)
    # the same f32 accumulation order per element: identical bits across schedules
    assert np.array_equal(results[0], results[1])
