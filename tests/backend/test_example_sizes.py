"""The sizes cypressc suggests and checks at are sizes the kernel accepts (issue #35 items 3-4).

``cypressc build`` ends with a ``next:`` line that runs the harness: its sizes must satisfy
every ``requires`` condition of the kernel's ABI -- evaluated by ``KernelInfo.failed_requires``,
the evaluator the runtime checks a call with -- and its tensors must fit a GPU.  FlashAttention
used to get H = 4096 (LSE's [B, H, M] put H among "tile" dimensions), D = 4096 (the launcher
requires D <= 128) and causal = 8: 1.1 TB of cudaMalloc.  ``explain --check-schedule`` ran
FlashAttention at D = 1, which the launcher refuses (TMA needs D % 8 == 0).  Every bundled
program and mapping is checked, read off the kernel (never the program's name).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.build import example_sizes
from cypressc.backend.sizes import (
    EXAMPLE_BYTES,
    check_sizes,
    flag_sizes,
    satisfy,
    sliced_sizes,
    tensor_bytes,
)
from cypressc.cli import main
from cypressc.ir.schedule_check import small_sizes
from tests.compiled import rendered, snapshots

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [
    (p.stem, m.relative_to(ROOT).as_posix())
    for p in sorted((ROOT / "programs").glob("*.cyp"))
    for m in sorted((ROOT / "tests/mappings/full" / p.stem).glob("*.yaml"))
]


def _requires(info) -> list[dict]:
    return [{"tree": r.tree, "why": r.why} for r in info.requires]


@pytest.mark.parametrize("program, mapping", PAIRS, ids=[f"{p}-{Path(m).stem}" for p, m in PAIRS])
def test_the_suggested_run_is_one_the_kernel_accepts(program, mapping):
    r = rendered(program, mapping)
    printed = example_sizes(r)
    info = r.info
    assert len(printed) == len(info.sizes) + len(info.floats)
    sizes = dict(zip(info.sizes, map(int, printed)))
    assert info.failed_requires(sizes) == [], (sizes, info.failed_requires(sizes))
    assert tensor_bytes(info, sizes) <= EXAMPLE_BYTES, sizes
    flags = flag_sizes(r.module)
    for s, v in sizes.items():  # a real run: no dimension shrunk to nothing
        assert v in (0, 1) if s in flags else v >= 8, (s, sizes)


def test_flash_attention_sizes_are_the_kernels_own():
    """D is the mapping's head tile (the launcher requires D <= E), H and HK stay batch-like
    although LSE's shape ends in (H, M), and the causal flag is 0."""
    for mapping, d in [("h100_d128", 128), ("h100_d64", 64), ("h100", 128)]:
        for program in ("flash_attention2", "flash_attention3"):
            r = rendered(program, f"tests/mappings/full/{program}/{mapping}.yaml")
            sizes = dict(zip(r.info.sizes, map(int, example_sizes(r))))
            assert sizes == {"B": 8, "H": 8, "M": 4096, "D": d, "HK": 8, "N": 4096, "causal": 0}, (
                sizes
            )
            assert sliced_sizes(r.module) == {"B", "H", "HK"} and flag_sizes(r.module) == {
                "causal": 0
            }


def test_satisfy_repairs_what_it_can_and_leaves_the_rest():
    le = {"tree": {"op": "<=", "a": {"var": "D"}, "b": {"const": 128}}, "why": "D <= 128"}
    mod8 = {
        "tree": {
            "op": "==",
            "a": {"op": "%", "a": {"var": "D"}, "b": {"const": 8}},
            "b": {"const": 0},
        },
        "why": "D % 8 == 0",
    }
    div = {
        "tree": {
            "op": "==",
            "a": {"op": "%", "a": {"var": "H"}, "b": {"var": "HK"}},
            "b": {"const": 0},
        },
        "why": "H % HK == 0",
    }
    assert satisfy([le, mod8], {"D": 4096}, grow=False) == {"D": 128}
    assert satisfy([le, mod8], {"D": 1}, grow=True) == {"D": 8}
    assert satisfy([div], {"H": 8, "HK": 3}, grow=False) == {
        "H": 8,
        "HK": 1,
    }  # no halving of H: HK's
    never = {"tree": {"op": "<", "a": {"var": "D"}, "b": {"const": 0}}, "why": "D < 0"}
    assert (
        satisfy([never], {"D": 4}, grow=False)["D"] >= 0
    )  # nothing repairs it: the caller sees it fail


@pytest.mark.parametrize("program, mapping", PAIRS, ids=[f"{p}-{Path(m).stem}" for p, m in PAIRS])
def test_the_schedule_check_runs_at_sizes_the_kernel_accepts(program, mapping):
    r = rendered(program, mapping)
    m = dict(snapshots(program, mapping))["sync-insertion"]
    small = small_sizes(m)
    sizes = check_sizes(m, _requires(r.info), small)
    assert r.info.failed_requires(sizes) == [], (small, sizes)
    assert all(sizes[s] >= small[s] for s in small)  # only ever grown: still one block, two wraps


def test_check_schedule_says_what_it_checks_first(monkeypatch):
    """A line on stderr before the long run (what, how many schedules, at which sizes), and
    the verdict with sizes written as on a command line, D = 8 for FlashAttention-3."""
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(
        main,
        [
            "explain",
            "programs/flash_attention3.cyp",
            "-m",
            "tests/mappings/full/flash_attention3/h100_d64.yaml",
            "--check-schedule",
            "--schedules",
            "1",
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    first, last = r.output.splitlines()
    assert first == r.stderr.strip() and first.startswith(
        "checking programs/flash_attention3.cyp: 1 random schedule(s)"
    )
    sizes = re.search(r"sizes (.*)\)$", last).group(1)
    assert (
        sizes == "B=1 H=1 M=128 D=8 HK=1 N=512 causal=1 scale=0.75" and f" at {sizes} " in first
    ), r.output


def test_build_says_the_dtype(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    for program, dtype, line in [
        ("gemm", "T=bf16", "  dtype     bf16 (C, A, B); accumulate f32 (T=bf16)"),
        (
            "flash_attention3",
            "T=f16",
            "  dtype     f16 (O, Q, K, V), f32 (LSE); accumulate f32 (T=f16)",
        ),
    ]:
        r = CliRunner().invoke(
            main,
            [
                "build",
                f"programs/{program}.cyp",
                "-m",
                f"tests/mappings/full/{program}/h100.yaml",
                "--dtype",
                dtype,
                "-o",
                str(tmp_path / program),
            ],
            catch_exceptions=False,
        )
        assert r.exit_code == 0, r.output
        assert line in r.stdout.splitlines(), r.stdout
