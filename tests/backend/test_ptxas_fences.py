"""The wgmma fences sync-insertion places reach ptxas as needed (issue #10): dual_gemm's two
wgmmas each get a ``wgmma.fence`` for their accumulator carried across the main loop, the
second one after the mbarrier wait of its B2 stage.  In the IR the first fence already
orders both accumulators, but the wait's try_wait loop is control flow, after which ptxas
no longer counts that fence for the second wgmma: without the second fence ptxas inserts
its own warpgroup.arrive and says so (C7519).  The sync verifier and the teeth test
(tests/ir/test_concurrent.py) rely on this."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from cypressc.backend.emit import emit_cuda
from cypressc.backend.lower import cuda_lowering
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]


def _ptxas(src: str, tmp: Path) -> str:
    cu = tmp / "k.cu"
    cu.write_text(src)
    return compiled.ptxas_report(cu, tmp / "k.o")


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_the_fence_after_the_wait_keeps_ptxas_from_inserting_one(tmp_path):
    tree = instantiate(
        check_program(parse_file(ROOT / "programs/dual_gemm.cyp")),
        load_mapping(ROOT / "tests/mappings/full/dual_gemm/h100.yaml"),
    )
    m = dict(compile_module(tree, until="sync-insertion"))["sync-insertion"]
    (lp,) = [o for o in m.body.ops if isinstance(o, N.For)]
    fences = [o for o in lp.body.ops if isinstance(o, S.Fence) and o.kind == "wgmma"]
    assert len(fences) == 2
    second = fences[1]
    without = replace(
        m,
        body=replace(
            m.body,
            ops=tuple(
                replace(
                    o, body=N.Block(tuple(x for x in o.body.ops if x is not second), o.body.yields)
                )
                if o is lp
                else o
                for o in m.body.ops
            ),
        ),
    )
    assert "C7519" not in _ptxas(emit_cuda(cuda_lowering(m).kernel), tmp_path)
    assert "C7519" in _ptxas(emit_cuda(cuda_lowering(without).kernel), tmp_path)
