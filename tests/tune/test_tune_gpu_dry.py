"""bench/tune_gpu.py's dry run (``--compile-only``), as the lead runs it before a GPU call:
timestamped phase lines, sizes in order with the space, the verdicts and the kernels carried
from one size to the next, the final table and the JSON."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTION = """tune:
  U: [128, 256]
  V: 128
  W: 64
  WGS: 2
  copy.D: GLOBAL
  pipeline: [3, 4]
  warpspecialize: true
  persistent: true
  raster: 16
  mma_in_flight: 1
  cluster: [1, 1]
"""

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH"),
]


def test_dry_run_prints_the_time_split_and_carries_the_caches(tmp_path):
    (tmp_path / "section.yaml").write_text(SECTION)
    out = tmp_path / "out"
    env = dict(
        os.environ, OUT=str(out), CYPRESSC_CACHE_DIR=str(tmp_path / "cache"), PYTHONUNBUFFERED="1"
    )
    p = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench/tune_gpu.py"),
            "--compile-only",
            "--programs",
            "gemm",
            "--sizes",
            "4096,8192",
            "--budget",
            "1",
            "--jobs",
            "2",
            "--tune-section",
            str(tmp_path / "section.yaml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = [x for x in p.stdout.splitlines() if re.match(r"\[ *\d+\.\d+s\] ", x)]
    said = [re.sub(r"^\[ *\d+\.\d+s\] ", "", x) for x in lines]
    stamps = [float(re.match(r"\[ *(\d+\.\d+)s\]", x).group(1)) for x in lines]
    assert stamps == sorted(stamps)
    assert said[:5] == [
        "==== tune gemm at 4096^3",
        "gemm@4096: round 1: checking: 4",
        next(x for x in said if x.startswith("gemm@4096: round 1: checking: done in ")),
        "gemm@4096: round 1: compiling: 2",
        next(x for x in said if x.startswith("gemm@4096: round 1: compiling: done in ")),
    ]
    # the second size re-checks nothing and builds nothing: same space, verdicts, kernels
    assert "gemm@8192: round 1: checking: 4 (4 cached)" in said
    assert "0 compiled, 2 from the kernel cache" in p.stdout.split("tune gemm at 8192^3")[1]
    rows = [
        x for x in p.stdout.split("## cypressc tune")[1].splitlines() if x.startswith("| gemm |")
    ]
    assert [r.split(" | ")[1] for r in rows] == ["4096", "8192"]
    assert all(" | 2/0/0/0 | " in r for r in rows), rows  # built/pruned/timed/failed
    doc = json.loads((out / "tune_gpu.json").read_text())
    assert [(r["n"], r["failures"], r["counts"]["compiled"]) for r in doc["rows"]] == [
        (4096, [], 2),
        (8192, [], 0),
    ]
    assert (
        (out / "tuned_gemm_4096.yaml")
        .read_text()
        .startswith("# cypressc tune: the best of 5 candidates")
    )
