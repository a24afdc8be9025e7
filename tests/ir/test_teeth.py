"""The randomized interpreter catches a missing dependence (the checks have teeth)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from cypressc.ir import nodes as N
from cypressc.ir.check import random_inputs, run_module
from cypressc.ir.subst import walk_ops
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.passes.manager import compile_module

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
    tree = instantiate(check_program(parse_file(ROOT / "programs/gemm.cyp")),
                       load_mapping(ROOT / "tests/mappings/gemm_small.yaml"))
    m = compile_module(tree, until="copy-elimination")[-1][1]
    assert any(isinstance(o, N.Call) and o.fn == "warpgroup_mma" and o.pre for o in walk_ops(m.body))
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
