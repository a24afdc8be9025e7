"""The randomized interpreter catches a missing dependence (the checks have teeth)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cypressc.ir import nodes as N
from cypressc.ir.check import random_inputs, run_module
from cypressc.ir.interp import InterpreterError
from cypressc.ir.subst import walk_ops
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module
from tests.budget import FULL, pick

ROOT = Path(__file__).resolve().parents[2]


def _drop_mma_preconditions(m: N.Module) -> N.Module:
    """Delete the events the wgmma call waits for (its A and B tiles' copies)."""

    def blk(b: N.Block) -> N.Block:
        ops = []
        for o in b.ops:
            if isinstance(o, N.Call) and o.fn == "warpgroup_mma":
                o = replace(o, pre=())
            if isinstance(o, (N.For, N.PFor)):
                o = replace(o, body=blk(o.body))
            ops.append(o)
        return N.Block(tuple(ops), b.yields)

    return replace(m, body=blk(m.body))


def test_deleting_a_precondition_is_caught():
    tree = instantiate(
        check_program(parse_file(ROOT / "programs/gemm.cyp")),
        load_mapping(ROOT / "tests/mappings/gemm_small.yaml"),
    )
    m = compile_module(tree, until="copy-elimination")[-1][1]
    assert any(
        isinstance(o, N.Call) and o.fn == "warpgroup_mma" and o.pre for o in walk_ops(m.body)
    )
    sizes = dict(M=50, N=24, K=40)
    inputs = random_inputs(m, sizes, seed=1)
    ref = inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)
    good = run_module(m, sizes, inputs, ["C"], seed=0)["C"]
    assert np.linalg.norm(good - ref) / np.linalg.norm(ref) < 1e-2
    broken = _drop_mma_preconditions(m)
    wrong = 0
    for seed in range(10):
        c = run_module(broken, sizes, inputs, ["C"], seed=seed)["C"].astype(np.float64)
        if np.isnan(c).any() or np.linalg.norm(c - ref) / np.linalg.norm(ref) > 1e-2:
            wrong += 1
    assert wrong > 0, "a wgmma with no preconditions read its tiles before they landed, unnoticed"


def _edges(b: N.Block, path: tuple = ()):
    """(path to the op, index of the reference) of every precondition in ``b``."""
    for i, o in enumerate(b.ops):
        for j in range(len(getattr(o, "pre", ()) or ())):
            yield path + (i,), j
        if isinstance(o, (N.For, N.PFor)):
            yield from _edges(o.body, path + (i,))


def _op_at(b: N.Block, path: tuple):
    o = b.ops[path[0]]
    return o if len(path) == 1 else _op_at(o.body, path[1:])


def _without_edge(b: N.Block, path: tuple, j: int) -> N.Block:
    ops = list(b.ops)
    o = ops[path[0]]
    ops[path[0]] = (
        replace(o, pre=o.pre[:j] + o.pre[j + 1 :])
        if len(path) == 1
        else replace(o, body=_without_edge(o.body, path[1:], j))
    )
    return N.Block(tuple(ops), b.yields)


def _implied(home: N.Block, op, j: int) -> bool:
    """The dropped reference is still awaited through another precondition of ``op``: an op
    of the same block that ``op`` still waits on waits on the very same reference (event and
    indices) itself."""
    dropped = op.pre[j]
    defs = {o.ev: o for o in home.ops if isinstance(o, N.AsyncOp)}
    return any(
        k != j and r.name in defs and dropped in defs[r.name].pre for k, r in enumerate(op.pre)
    )


@pytest.mark.parametrize(
    "snapshot",
    pick(
        ["copy-elimination", "warp-specialization"],
        ["vectorization", "copy-elimination", "warp-specialization"],
    ),
)
def test_every_needed_edge_is_caught_by_the_schedules_of_the_pass_tests(snapshot):
    """Remove each precondition edge of gemm's IR in turn: the schedules
    tests/ir/test_passes_interp.py runs (program order, latest-first and its random ones)
    catch every removal (a wrong or unwritten result, or a deadlock), except an edge still
    implied through another precondition.  Under ``make test-full`` (and on the vectorized IR
    too, whose per-thread copies chain edges further than that check follows): every removal
    20 random schedules catch, the fast set catches."""
    from tests.ir.test_passes_interp import CASES, SCHEDULE_ORDERS, SCHEDULES, _compile

    mapping, sizes, ref, outs = CASES["gemm"]
    m = dict(_compile("gemm", mapping))[snapshot]
    inputs = random_inputs(m, sizes, seed=7)
    want = ref(inputs)["C"]

    def wrong(mutant: N.Module, seed) -> bool:
        try:
            c = run_module(mutant, sizes, inputs, outs, seed)["C"].astype(np.float64)
        except InterpreterError:
            return True
        return bool(np.isnan(c).any() or np.linalg.norm(c - want) / np.linalg.norm(want) > 1e-2)

    edges = list(_edges(m.body))
    missed, implied, unseen = [], 0, 0
    for path, j in edges:
        mutant = replace(m, body=_without_edge(m.body, path, j))
        op = _op_at(m.body, path)
        caught = any(wrong(mutant, s) for s in SCHEDULE_ORDERS + list(range(SCHEDULES)))
        if FULL and not caught:
            assert not any(wrong(mutant, s) for s in range(20)), f"{op.ev} <- {op.pre[j].name}"
            unseen += 1  # no schedule of either set sees it go: implied by a longer chain
            continue
        if not caught:
            if _implied(_op_at(m.body, path[:-1]).body if len(path) > 1 else m.body, op, j):
                implied += 1
            else:
                missed.append(f"{op.ev} <- {op.pre[j].name}")
    assert len(edges) >= 6 and implied + unseen < len(edges) // 2, (len(edges), implied, unseen)
    assert not missed, f"edges whose removal the pass tests' schedules miss: {missed}"
