"""The setmaxnreg split fits the registers a block is launched with, not the whole register
file: with ``__launch_bounds__(THREADS, 1)`` ptxas gives each thread 65536 / THREADS
registers rounded down to 8, so 4 consumer warpgroups + a producer (640 threads) start with
96 each, 61440 in all.  A consumer ``setmaxnreg.inc`` beyond what the producer's ``.dec``
frees waits forever: the 3 gemm candidates that hung ``cypressc tune`` on an H100 (U=256
V=128 WGS=4, warp-specialized, consumers at 112 = 62464 registers)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.build import render_build
from cypressc.cli import main
from cypressc.cli.common import load_program as _front_end
from cypressc.passes.resource_allocation import _register_pool
from cypressc.tuner.build import cutlass_include
from cypressc.tuner.space import derive_space

ROOT = Path(__file__).resolve().parents[2]
PLAIN = ROOT / "tests/mappings/full/gemm/h100_plain.yaml"


def mapping(tmp_path: Path, wgs: int, extra: str = "") -> Path:
    """The plain gemm mapping as the tuner renders it: 256x128 tiles, ``wgs`` consumer
    warpgroups, warp-specialized and persistent."""
    tree = _front_end(str(ROOT / "programs/gemm.cyp"), str(PLAIN))
    sp = derive_space(tree, PLAIN.read_text())
    text = sp.render(
        dict(
            sp.base,
            U=256,
            V=128,
            WGS=wgs,
            warpspecialize=True,
            persistent=True,
            **{"copy_block.D": "SHARED"},
        )
    )
    if extra:
        text = text.replace(
            "    proc: BLOCK\n    warpspecialize: true\n",
            f"    proc: BLOCK\n    warpspecialize: true\n{extra}",
            1,
        )
    p = tmp_path / f"wgs{wgs}.yaml"
    p.write_text(text)
    return p


def cuda_source(m: Path) -> str:
    return render_build(_front_end(str(ROOT / "programs/gemm.cyp"), str(m))).files["gemm.cu"]


def test_the_pool_is_what_launch_bounds_leave():
    assert _register_pool(2, True, 65536) == (168, 504)  # 384 threads: 170 -> 168
    assert _register_pool(4, True, 65536) == (96, 480)  # 640 threads: 102 -> 96
    assert _register_pool(1, True, 65536) == (256, 512)
    assert _register_pool(4, False, 65536) == (128, 512)


def test_four_consumers_get_what_the_producer_frees(tmp_path):
    src = cuda_source(mapping(tmp_path, 4))
    assert "CONSUMERS = 4" in src
    producer = int(re.search(r"regs_dealloc<(\d+)>", src).group(1))
    consumer = int(re.search(r"regs_alloc<(\d+)>", src).group(1))
    assert (producer, consumer) == (40, 104)
    assert 128 * (producer + 4 * consumer) <= 640 * 96
    two = cuda_source(mapping(tmp_path, 2))  # 3 warpgroups: as before, 40 + 2 x 232
    assert "regs_dealloc<40>" in two and "regs_alloc<232>" in two


def test_an_explicit_budget_above_the_launch_registers_is_e047(tmp_path):
    m = mapping(tmp_path, 4, "    consumer_registers: 112\n")
    r = CliRunner().invoke(main, ["check", str(ROOT / "programs/gemm.cyp"), "-m", str(m)])
    assert r.exit_code == 1
    first = r.stderr.splitlines()[0]
    assert (
        "error[E047]: registers: 4 consumer warpgroup(s) x 112 + a producer warpgroup x 40 per thread need "
        "62464 of the 61440 registers a block of 640 threads is launched with (96 per thread"
        in first
    ), first
    assert f"{m}:" in first and "consumer_registers: 112" in r.stderr


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("wgs", [2, 4])
def test_ptxas_gives_each_thread_what_the_model_says(tmp_path, wgs):
    """The premise, checked against ptxas itself: the kernel's register count is the
    launch-bounds cap that :func:`_register_pool` computes."""
    src = tmp_path / "gemm.cu"
    files = render_build(
        _front_end(str(ROOT / "programs/gemm.cyp"), str(mapping(tmp_path, wgs)))
    ).files
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    p = subprocess.run(
        [
            "nvcc",
            "-O3",
            "-std=c++17",
            "-gencode=arch=compute_90a,code=sm_90a",
            f"-I{ROOT / 'cypressc/backend/runtime'}",
            f"-I{cutlass_include()}",
            "-cubin",
            "-Xptxas",
            "-v",
            "-o",
            str(tmp_path / "k.cubin"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    used = int(re.search(r"Used (\d+) registers", p.stdout + p.stderr).group(1))
    assert used == _register_pool(wgs, True, 65536)[0]
