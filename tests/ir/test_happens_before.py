"""The independent verifier (issue #33 item 2, :mod:`cypressc.ir.happens_before`), the
edges forced both ways (item 4), and copy elimination's fixpoint (item 3)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

import cypressc.ir.hazard_views as H
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.concurrent_state import RaceChecks, Region
from cypressc.ir.happens_before import check_happens_before
from cypressc.ir.schedule_check import check_schedules, small_sizes
from cypressc.ir.subst import walk_ops
from cypressc.passes import copy_elimination as CE
from cypressc.pipeline import PassError, compile_module
from tests.compiled import modules, tree

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = sorted(p.stem for p in (ROOT / "programs").glob("*.cyp"))
FLAGS = {"flash_attention2": {"causal": 0}, "flash_attention3": {"causal": 0}}


def _tree(program: str, mapping: str = "h100"):
    return tree(program, f"tests/mappings/full/{program}/{mapping}.yaml")


def _snaps(program: str, mapping: str = "h100") -> dict[str, N.Module]:
    return modules(program, f"tests/mappings/full/{program}/{mapping}.yaml", until="sync-insertion")


def _blind_interpreter(monkeypatch):
    """The concurrent interpreter without its own race checks: what remains is the
    happens-before check."""
    monkeypatch.setattr(
        RaceChecks,
        "check_read",
        lambda self, t, op, key, retired: {
            "thread": t,
            "op": "",
            "retired": retired,
            "tokens": set(),
        },
    )
    monkeypatch.setattr(RaceChecks, "check_overwrite", lambda self, t, op, key: Region())


def test_a_pair_forced_apart_is_refused_by_the_verifier_but_not_by_the_analysis(monkeypatch):
    real = H.may_meet
    # the stage ring's carried queries answered "apart": the empty barrier loses its edges
    monkeypatch.setattr(
        H,
        "may_meet",
        lambda pairs, space, private=(), shift=None: (
            False if shift else real(pairs, space, private=private, shift=shift)
        ),
    )
    m = dict(compile_module(_tree("gemm"), until="sync-insertion", verify=False))["sync-insertion"]
    from cypressc.ir.sync_verify import verify_sync

    verify_sync(m)  # the verifier that shares the analysis accepts the bug
    _blind_interpreter(monkeypatch)
    f = check_happens_before(m)
    assert f is not None and f.kind == "race" and "no chain of synchronization" in f.message, f
    with pytest.raises(PassError, match="sync-insertion"):
        compile_module(_tree("gemm"), until="sync-insertion")


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_apart_forced_to_may_overlap_only_adds_synchronization(program, monkeypatch):
    """Each same-iteration "apart" of the analysis answered "may overlap" instead: the
    kernel keeps every op, gains or keeps sync ops, and stays clean under the interpreters."""
    base = _snaps(program)["sync-insertion"]
    real = H.may_meet
    monkeypatch.setattr(
        H,
        "may_meet",
        lambda pairs, space, private=(), shift=None: (
            True if not shift else real(pairs, space, private=private, shift=shift)
        ),
    )
    snaps = dict(
        compile_module(_tree(program), until="sync-insertion")
    )  # verified, happens-before included
    m = snaps["sync-insertion"]

    def kinds(mod, sync):
        return Counter(
            type(o).__name__ for o in walk_ops(mod.body) if isinstance(o, S.SYNC_OPS) == sync
        )

    assert kinds(m, False) == kinds(base, False)
    assert not kinds(base, True) - kinds(m, True)
    v = check_schedules(
        m,
        snaps["warp-specialization"],
        sizes={**small_sizes(m), **FLAGS.get(program, {})},
        seed=3,
        schedules=2,
        value_every=1,
    )
    assert v.finding is None, v.line(program)


@pytest.mark.parametrize("program", PROGRAMS)
def test_copy_elimination_converges_in_far_fewer_rounds_than_its_bound(program):
    m = modules(program, f"tests/mappings/full/{program}/h100.yaml", until="vectorization")[
        "vectorization"
    ]
    ops = sum(1 for _ in walk_ops(m.body))
    out, rounds = CE.rewrite_to_fixpoint(m)
    assert 0 < rounds < ops // 2
    assert CE.rewrite_to_fixpoint(out)[1] == 0


def test_copy_elimination_that_does_not_converge_is_an_internal_error(monkeypatch):
    flip = [0]

    def cycling(m):  # a pattern that always fires: renames and renames back
        flip[0] += 1
        return replace(m, name=m.name + "'") if flip[0] % 2 else replace(m, name=m.name[:-1])

    monkeypatch.setattr(CE, "PATTERNS", (cycling,))
    with pytest.raises(PassError, match="copy-elimination.*fixpoint"):
        compile_module(_tree("gemm"), until="copy-elimination")
