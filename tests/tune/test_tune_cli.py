"""``cypressc tune --compile-only`` on a small gemm space, through the real CLI and nvcc:
pruning counts, parallel compiles, the kernel cache on a second run, the best mapping."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main
from cypressc.mapping.loader import load_mapping

ROOT = Path(__file__).resolve().parents[2]
SPACE = """tune:
  U: [128, 256]
  V: [128, 256]
  W: 64
  WGS: 2
  MMA: WGMMA_64x128x16
  copy_block.D: GLOBAL
  pipeline: [4, 5]
  warpspecialize: true
  persistent: true
  raster: 16
  mma_in_flight: 1
  cluster: [1, 1]
"""
SIZES = ["--size", "M=4096", "--size", "N=4096", "--size", "K=4096"]

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.xdist_group("tune"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH"),
]


def tune(*args: str):
    return CliRunner().invoke(main, ["tune", *args], catch_exceptions=False)


def counts(out: str) -> dict[str, int]:
    m = re.search(
        r"(\d+) candidates: (\d+) pruned by the compiler \((.*?)\), (\d+) compiled, (\d+) from the "
        r"kernel cache, (\d+) failed to build",
        out,
    )
    assert m, out
    n = [int(m.group(i)) for i in (1, 2, 4, 5, 6)]
    return {
        "considered": n[0],
        "pruned": n[1],
        "by": m.group(3),
        "compiled": n[2],
        "hits": n[3],
        "failed": n[4],
    }


def test_compile_only_prunes_compiles_and_hits_the_cache(tmp_path, monkeypatch):
    tune_cache = tmp_path / "cache"  # its own: other tests may have built the plain gemm
    monkeypatch.setenv("CYPRESSC_CACHE_DIR", str(tune_cache))
    mapping = tmp_path / "plain.yaml"
    mapping.write_text((ROOT / "tests/mappings/full/gemm/h100_plain.yaml").read_text() + SPACE)
    best = tmp_path / "best.yaml"
    args = [
        str(ROOT / "programs/gemm.cyp"),
        "-m",
        str(mapping),
        *SIZES,
        "--compile-only",
        "--budget",
        "1",
        "-o",
        str(best),
        "--jobs",
        "2",
    ]
    r = tune(*args)
    assert r.exit_code == 0, r.output + r.stderr
    first = counts(r.stdout)
    assert re.search(
        r"\npruned 5 of 9 in \d+\.\d s: 9 checked by the compiler on 2 processes \(about \d+\.\d\d s of "
        r"a core each\), 0 from the prune cache\n",
        r.stdout,
    ), r.stdout
    # stderr is no terminal (CliRunner): plain progress lines, not bars
    assert r.stderr.startswith("tune: round 1: checking: 8 candidates\n"), r.stderr
    assert re.search(
        r"\ntune: round 1: checking: pruned 5 of 8 \(E040 4, E046 1\) in \d+\.\d s\n"
        r"tune: round 1: compiling: 2 candidates\n",
        r.stderr,
    ), r.stderr
    assert re.search(
        r"\ntune: round 1: compiling: 2 compiled, 0 from the kernel cache, 0 failed to build in "
        r"\d+\.\d s\n",
        r.stderr,
    ), r.stderr
    # 8 points + the starting mapping: the 4 with V = 256 issue WGMMA_64x128x16 on 256-column tiles
    # (E040, found before shared memory is counted), 1 of the others overflows shared memory (E046)
    assert first == {
        "considered": 9,
        "pruned": 5,
        "by": "E040 4, E046 1",
        "compiled": 2,
        "hits": 0,
        "failed": 0,
    }
    assert "| 1 |" in r.stdout and "(start)" in r.stdout
    text = best.read_text()
    assert text.startswith("# cypressc tune: the best of 9 candidates for")
    assert "# not timed (--compile-only)" in text and "# runner-up:" in text
    spec = load_mapping(best).spec  # the best mapping is a valid mapping
    block = next(i for i in spec.instances if i.instance == "gemm_block")
    assert block.warpspecialize is True and block.persistent is True
    assert len(list((tune_cache / "kernels").glob("*/libgemm.so"))) == 2

    again = tune(*args, "--no-progress")  # nothing is compiled or re-checked the second time
    assert again.exit_code == 0, again.output
    assert counts(again.stdout) == dict(first, compiled=0, hits=2), again.stdout + again.stderr
    assert "prune 0.0 s" in again.stdout
    assert (
        "pruned 5 of 9 in 0.0 s: none checked by the compiler, 9 from the prune cache"
        in again.stdout
    )
    assert "tune:" not in again.stderr  # --no-progress: none
    assert best.read_text() == text


def test_sizes_must_bind_the_kernel(tune_cache):
    r = CliRunner().invoke(
        main,
        [
            "tune",
            str(ROOT / "programs/gemm.cyp"),
            "-m",
            str(ROOT / "tests/mappings/full/gemm/h100_plain.yaml"),
            "--size",
            "M=64",
            "--size",
            "N=64",
            "--compile-only",
        ],
    )
    assert r.exit_code == 2 and "bind K with --size NAME=N" in r.stderr
    r = CliRunner().invoke(
        main,
        [
            "tune",
            str(ROOT / "programs/gemm.cyp"),
            "-m",
            str(ROOT / "tests/mappings/full/gemm/h100_plain.yaml"),
            "--size",
            "M=x",
        ],
    )
    assert r.exit_code == 2 and "write NAME=N" in r.stderr


def test_timing_needs_a_gpu_or_compile_only(tune_cache):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    r = CliRunner().invoke(
        main,
        [
            "tune",
            str(ROOT / "programs/gemm.cyp"),
            "-m",
            str(ROOT / "tests/mappings/full/gemm/h100_plain.yaml"),
            *SIZES,
        ],
    )
    assert r.exit_code == 1 and "--compile-only" in r.stderr


def test_output_never_overwrites_a_users_mapping(tmp_path, tune_cache):
    """`-o` may replace an earlier tune result, never a hand-written mapping (refused before tuning)."""
    mine = tmp_path / "h100.yaml"
    mine.write_text((ROOT / "tests/mappings/full/gemm/h100.yaml").read_text())
    before = mine.read_text()
    r = tune(
        str(ROOT / "programs/gemm.cyp"),
        "-m",
        str(ROOT / "tests/mappings/full/gemm/h100_plain.yaml"),
        *SIZES,
        "--compile-only",
        "--budget",
        "1",
        "-o",
        str(mine),
    )
    assert r.exit_code == 1
    assert r.stderr.startswith(
        f"{mine}: error[E062]: refusing to overwrite {mine}: it was not written by `cypressc tune`"
    ), r.stderr
    assert "candidates" not in r.stdout  # refused before any search
    assert mine.read_text() == before


def test_a_size_of_zero_is_a_size_and_malformed_ones_are_usage_errors():
    """``--size causal=0`` binds FlashAttention's flag (it was refused as not positive)."""
    import click

    from cypressc.cli.tune import _parse_sizes

    param = click.Option(["--size"])
    assert _parse_sizes(None, param, ("causal=0", "M=1024")) == {"causal": 0, "M": 1024}
    for bad in ("causal=-1", "M=abc", "M", "1M=4"):
        with pytest.raises(click.BadParameter, match="non-negative integer"):
            _parse_sizes(None, param, (bad,))


def test_the_budget_is_an_upper_bound_across_both_rounds():
    """``--budget 2`` compiled three candidates besides the start on FlashAttention-3's space."""
    from cypressc.tuner.search import round_budgets

    for budget in range(1, 40):
        n1, n2 = round_budgets(budget)
        assert n1 >= 1 and n2 >= 0 and n1 + n2 == budget
    assert round_budgets(24) == (16, 8)


def test_sizes_named_after_shapes_are_one_size_by_any_of_their_names(tmp_path, tune_cache):
    """tests/programs/gemm_shapes.cyp names its sizes with ``M, N, K = C.shape[0], C.shape[1],
    A.shape[1]``: tune asks for M, N and K (it asked for six, C_d0 ... B_d1), takes them by
    any of their names, and refuses two values for one size."""
    mapping = tmp_path / "plain.yaml"  # one candidate: the mapping itself
    mapping.write_text(
        (ROOT / "tests/mappings/full/gemm/h100_plain.yaml").read_text()
        + "tune:\n  U: 128\n  V: 128\n"
        "  W: 64\n  WGS: 2\n  MMA: WGMMA_64x128x16\n  copy_block.D: GLOBAL\n  pipeline: 3\n"
        "  warpspecialize: false\n  persistent: false\n  raster: 16\n  mma_in_flight: 1\n"
        "  cluster: [1, 1]\n"
    )
    prog = str(ROOT / "tests/programs/gemm_shapes.cyp")

    def run(*sizes: str):
        return CliRunner().invoke(
            main,
            [
                "tune",
                prog,
                "-m",
                str(mapping),
                *(f"--size={s}" for s in sizes),
                "--compile-only",
                "--no-progress",
            ],
        )

    r = run("C_d0=256", "N=512", "B_d0=128")
    assert r.exit_code == 0, r.output + r.stderr
    assert "1 candidates: 0 pruned by the compiler (none), 1 compiled" in r.stdout
    assert "# device: none (--compile-only); sizes M=256 N=512 K=128; dtypes defaults" in r.stdout
    r = run("C_d0=256", "A_d0=128", "N=512", "K=128")
    assert (
        r.exit_code == 2 and "C_d0=256 and A_d0=128 name one size, M: give it one value" in r.stderr
    ), r.stderr
    r = run("M=256", "N=512")
    assert r.exit_code == 2, r.stderr
    assert (
        "the kernel's sizes are M (or C_d0, A_d0), N (or C_d1, B_d1), K (or A_d1, B_d0): bind K with "
        "--size NAME=N"
    ) in " ".join(r.stderr.split()), r.stderr


def test_plain_progress_lines_say_each_tenth_at_most_every_gap():
    import io

    from cypressc.tuner.report import Progress

    out = io.StringIO()
    p = Progress("lines", out)
    p.GAP = 0.0
    p.start("prune", "round 1: checking", 20, done=2)
    for _ in range(18):
        p.advance("prune")
    p.finish("prune", "pruned 7 of 20")
    lines = out.getvalue().splitlines()
    assert lines[0] == "tune: round 1: checking: 20 candidates (2 already done)"
    assert [ln.split(": ")[3].split(" in ")[0] for ln in lines[1:-1]] == [
        f"{n}/20 ({5 * n}%)" for n in range(4, 20, 2)
    ]  # every tenth; the last is the end line
    assert re.fullmatch(r"tune: round 1: checking: pruned 7 of 20 in \d+\.\d s", lines[-1])
    out = io.StringIO()
    p = Progress("lines", out)  # a fast phase: its start and its end only
    p.start("compile", "round 1: compiling", 1000)
    for _ in range(1000):
        p.advance("compile")
    p.finish("compile", "1000 compiled")
    assert len(out.getvalue().splitlines()) == 2
    out = io.StringIO()
    with Progress(False, out) as p:  # --no-progress
        p.start("prune", "round 1: checking", 3)
        p.advance("prune")
        p.finish("prune", "done")
    assert out.getvalue() == ""
