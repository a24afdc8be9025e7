"""A reduction through shared memory inside the main loop (issue #38: FlashAttention-3's dQ
path).  The attention backward's variant ``dq_staged`` writes each step's dQ piece into the dq
task's private copy of its dQacc tile (``put``, a plain store) and the reduction privilege adds
that copy into dQacc; the ``_tma`` mappings keep the copy in SHARED, so the add is a TMA
reduce-add of the staged tile, issued every step.  A later step writes the same stage again
while the reduce-add may still read it: a carried WAR edge from a TMA store to thread code,
which sync-insertion realizes with the issuing thread's ``wait_group bulk N`` (N: the reduce-adds
committed in between) and a named barrier over the writers.  The static verifier and the
concurrent interpreter (its odd seeds keep TMA stores in flight as long as any thread can
run) each catch the wait removed or made too lax."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import pytest

from cypressc.build import render_build
from cypressc.diagnostics import VerifyError
from cypressc.ir import nodes as N
from cypressc.ir.analysis import map_ops, remove_ops
from cypressc.ir import sync as S
from cypressc.ir.kinds import GroupUnit, Hazard
from cypressc.ir.schedule_check import check_schedules
from cypressc.ir.subst import walk_ops
from cypressc.ir.sync_verify import verify_sync
from cypressc.pipeline import compile_program
from tests.compiled import tree

ROOT = Path(__file__).resolve().parents[2]
FAB = ROOT / "tests" / "programs" / "flash_attention_bwd.cyp"
MAPS = ROOT / "tests" / "mappings" / "flash_attention_bwd"
SIZES = dict(B=1, H=2, HK=1, M=70, N=128, D=8, causal=0)  # 2 heads x 2 query blocks: 4 steps


@functools.cache
def _main_kernel(mapping: str) -> dict[str, N.Module]:
    return dict(compile_program(tree(FAB, MAPS / mapping), until="sync-insertion")[1])


def _war_wait(o) -> bool:
    return (
        isinstance(o, S.WaitGroup)
        and o.unit == GroupUnit.BULK
        and any(e.hazard == Hazard.WAR for e in o.edges)
    )


@pytest.mark.parametrize(
    "mapping, pending, threads",
    [
        ("h100_d128_tma.yaml", 1, 256),
        ("h100_d64_tma.yaml", 1, 128),
        ("h100_d128_tmawg.yaml", 1, 128),
    ],
    ids=["d128-block", "d64-per-warpgroup", "d128-per-warpgroup-columns"],
)
def test_the_staged_reduce_waits_for_the_reduce_of_two_steps_before(mapping, pending, threads):
    """Two stages of the staged tile: the wait leaves the previous step's reduce-add in flight
    (N = 1); at d128 one reduce-add of the block's tile after a 256-thread barrier, at d64 (dQ
    split by keys) and under h100_d128_tmawg (dQ split by columns into a dq task per warpgroup)
    one per warpgroup of its own tile after its own 128-thread barrier.  Clean in the verifier and
    under 2 schedules (the second keeps the reduce-adds in flight), values compared."""
    s = _main_kernel(mapping)
    m = s["sync-insertion"]
    waits = [o for o in walk_ops(m.body) if _war_wait(o)]
    assert [w.pending for w in waits] == [pending]
    bars = [
        o for o in walk_ops(m.body) if isinstance(o, S.BarSync) and waits[0].edges[0] in o.edges
    ]
    assert [b.threads for b in bars] == [threads]
    verify_sync(m)
    v = check_schedules(m, s["warp-specialization"], sizes=SIZES, schedules=2, value_every=2)
    assert v.finding is None, v.line("flash_attention_bwd")


@pytest.mark.parametrize("how", ["dropped", "too-lax"])
def test_a_missing_or_lax_wait_is_caught_by_the_verifier_and_the_interpreter(how):
    s = _main_kernel("h100_d64_tma.yaml")
    m = s["sync-insertion"]
    bad = (
        remove_ops(m, _war_wait)
        if how == "dropped"
        else map_ops(m, lambda o: replace(o, pending=2) if _war_wait(o) else o)
    )
    with pytest.raises(VerifyError, match="no wait_group bulk retires the TMA store's reads"):
        verify_sync(bad)
    v = check_schedules(
        bad, s["warp-specialization"], sizes=SIZES, seed=1, schedules=1, value_every=0
    )
    assert v.finding is not None and v.finding.kind == "race", v.line("flash_attention_bwd")
    assert "%dQacc_smem" in v.finding.message and "may still read it" in v.finding.message


def test_the_kernel_writes_the_stage_after_the_wait_and_reduces_it_inside_the_loop():
    """The CUDA of the d128 mapping's main loop: the first warpgroup's leader waits for the
    reduce-add of two steps before (``tma_store_wait<1>``), a 256-thread barrier, the threads
    write their 64-column halves into the step's stage, fence, barrier, and the leader sends the
    two halves (two 64 x 32 f32 boxes each) with TMA reduce-adds and commits them."""
    cu = render_build(tree(FAB, MAPS / "h100_d128_tma.yaml")).files["flash_attention_bwd.cu"]
    loop = cu[cu.index("if (leader && cw == 0) cypress::tma_store_wait<1>();") :]
    loop = loop[: loop.index("pipe.advance();")]
    order = [
        "cypress::named_sync(",
        "smem + dQacc_smem_SMEM + (pipe.index) * dQacc_smem_STAGE + cw * dQacc_smem_TILE",
        "cypress::fence_proxy_async();",
        "cypress::named_sync(",
        "cypress::tma_reduce_add_3d(&tm_dQacc_64x32, smem + dQacc_smem_SMEM + (pipe.index) * "
        "dQacc_smem_STAGE + g * dQacc_smem_TILE + b * 8192, (0) + 32 * b + g * 64,",
        "if (leader && cw == 0) cypress::tma_store_commit();",
    ]
    at = 0
    for piece in order:
        at = loop.index(piece, at) + len(piece)
    assert "red_add2" not in cu
    assert "constexpr int dQacc_smem_SMEM = " in cu and "dQacc_smem_STAGE = 32768;" in cu
