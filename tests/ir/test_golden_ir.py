"""Golden IR after every pass for every bundled program (``make golden`` rewrites them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cypressc.diagnostics import CypressError
from cypressc.ir.printer import print_module
from cypressc.pipeline import step_names as pass_names
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = sorted(p.stem for p in (ROOT / "programs").glob("*.cyp"))


def snapshots(program: str):
    mapping = ROOT / "tests/mappings/full" / program / "h100.yaml"
    out = []
    try:
        out += compiled.snapshots(program, mapping, until="cluster-multicast")
        out += compiled.snapshots(program, mapping)[-1:]
    except CypressError as e:  # a program the backend refuses (E050) keeps its IR goldens
        assert e.code == "E050" and program not in (
            "gemm",
            "batched_gemm",
            "dual_gemm",
            "gemm_reduction",
        ), e
    return out


@pytest.mark.parametrize("program", PROGRAMS)
def test_ir_after_every_pass_matches_golden(program, golden):
    snaps = snapshots(program)
    assert [n for n, _ in snaps] == pass_names()[: len(snaps)]
    for i, (name, m) in enumerate(snaps, 1):
        golden.check(f"ir/{program}/{i:02d}-{name}.ir", print_module(m))


def test_gemm_after_copy_elimination_keeps_only_the_expert_copies():
    """Paper §4.2.3: per k-step GLOBAL->SHARED tiles of A and B, and C's tile out."""
    from cypressc.ir import nodes as N
    from cypressc.ir.analysis import Symbols
    from cypressc.ir.subst import walk_ops

    m = dict(snapshots("gemm"))["copy-elimination"]
    sym = Symbols(m)
    copies = [
        (sym.root(o.src), sym.mem(o.src), sym.root(o.dst), sym.mem(o.dst))
        for o in walk_ops(m.body)
        if isinstance(o, N.Copy)
    ]
    loop = next(o for o in walk_ops(m.body) if isinstance(o, N.For))
    in_loop = [(sym.root(o.src), sym.mem(o.dst)) for o in loop.body.ops if isinstance(o, N.Copy)]
    assert sorted(in_loop) == [("A", "SHARED"), ("B", "SHARED")]
    # outside the loop only the epilogue remains: the staged tile to C
    rest = [c for c in copies if c[1] != "GLOBAL"]
    assert [(c[2], c[3]) for c in rest] == [("C", "GLOBAL")]
