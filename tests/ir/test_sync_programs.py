"""``sync-insertion`` on the bundled programs under every bundled mapping: the pass and the
sync verifier accept each one, the synchronization it derives from the events is what the
template backend emits today (read from cuda-lowering's plan, not restated), and every op it
inserts has teeth: taken away, the verifier refuses the module."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cypressc.backend import plan as P
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.analysis import Symbols
from cypressc.ir.printer import sync_line
from cypressc.ir.subst import walk_ops
from cypressc.ir.sync_verify import verify_sync
from cypressc.ir.verify import VerifyError
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module
from cypressc.passes.sync_insertion import SyncInsertion

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted(
    (p.stem, m.relative_to(ROOT).as_posix())
    for p in (ROOT / "programs").glob("*.cyp")
    for m in (ROOT / "tests/mappings/full" / p.stem).glob("*.yaml")
)
# The GEMM-family programs, whose derived synchronization is compared with the template kernel
# the backend used to fill.  FlashAttention's (2 and 3) is not that template (a Q panel loaded once on a
# one-stage barrier, two wgmma groups per step, register fences between them): the concurrent
# interpreter and its teeth (tests/ir/test_concurrent.py) and test_cuda_from_sync.py check it.
# gemm_reduction's Tensor-Core row sums (h100_tc, h100_tc_plain) add a shared table the threads
# fill: their sync is checked on its own below.
TENSOR_CORE_SUMS = ("gemm_reduction", "tests/mappings/full/gemm_reduction/h100_tc.yaml")
# gemm_fp8_blockwise's step also copies a scale vector on a channel of its own (its
# transaction bytes are the boxes', not the 16-byte-padded buffers') and promotes on the CUDA
# cores between the wgmma and the next step: the concurrent interpreter checks it.
TEMPLATE = [
    (p, m)
    for p, m in CASES
    if not p.startswith("flash_attention")
    and not m.startswith("tests/mappings/full/gemm_reduction/h100_tc")
    and p != "gemm_fp8_blockwise"
]


def compiled(program: str, mapping: str):
    """The module after sync-insertion and cuda-lowering's plan (every pass verified)."""
    tree = instantiate(
        check_program(parse_file(ROOT / "programs" / f"{program}.cyp")),
        load_mapping(ROOT / mapping),
    )
    snaps = dict(compile_module(tree))
    return snaps["sync-insertion"], snaps["cuda-lowering"].kernel


def syncs(m: N.Module, cls) -> list:
    return [o for o in walk_ops(m.body) if isinstance(o, cls)]


def in_loop(m: N.Module) -> list:
    (lp,) = [o for o in walk_ops(m.body) if isinstance(o, N.For) and o.pipeline]
    return list(lp.body.ops)


@pytest.mark.parametrize("program, mapping", TEMPLATE)
def test_the_synchronization_derived_from_the_events_is_the_templates(program, mapping):
    m, plan = compiled(program, mapping)
    assert m.synchronized
    sym = Symbols(m)
    loads = [o for o in walk_ops(m.body) if isinstance(o, N.Copy) and sym.mem(o.src) == "GLOBAL"]
    assert loads and all(o.bar is not None for o in loads)  # every TMA load completes on a barrier
    full = syncs(m, S.MBarrier)
    full, empty = [b for b in full if b.kind == "full"], [b for b in full if b.kind == "empty"]
    assert all(b.stages == plan.stages and b.count == 1 for b in full)
    # the template's one full barrier lands STAGE_TX bytes per stage: the channels split it
    assert sum(o.bytes for o in syncs(m, S.ArriveExpectTx)) == sum(
        b.stage_bytes for b in plan.buffers
    )
    # the template's empty barrier: one arrival per consumer warpgroup, per warp when SIMT code
    # reads the stages (gemm_reduction's row sums)
    per = 4 if plan.simt_body else 1
    assert {b.count for b in empty} == {per * plan.consumers}
    assert bool(syncs(m, S.SyncWarp)) == bool(plan.simt_body)
    body = in_loop(m)
    lag = min(plan.mma_in_flight, plan.stages - 1)
    assert [o.pending for o in body if isinstance(o, S.WaitGroup)] == [lag]
    assert {o.when is not None for o in body if isinstance(o, S.Arrive)} == {lag > 0}
    assert sum(isinstance(o, S.CommitGroup) for o in body) == 1  # all wgmmas of a step: one group
    assert 0 in [
        o.pending for o in syncs(m, S.WaitGroup) if o.unit == "wgmma"
    ]  # before the epilogue
    # named barriers: the staged TMA store syncs each warpgroup (128 threads), the shared bytes
    # reused after the loop sync every consumer
    bars = sorted(o.threads for o in syncs(m, S.BarSync))
    staged = any(isinstance(e, P.TmaStore) for e in plan.epilogue)
    assert bars == sorted(
        [128] * staged + [128 * plan.consumers] * bool(m.resources and m.resources.war)
    )
    fences = {o.kind for o in syncs(m, S.Fence)}
    assert fences == {"wgmma"} | ({"proxy_async"} if staged else set())
    assert bool([o for o in syncs(m, S.CommitGroup) if o.unit == "bulk"]) == staged


def test_a_table_the_threads_fill_is_fenced_met_and_released_at_the_tile_end():
    """h100_tc: the consumers fill the shared table E (1/8) before the main loop and every step's
    N = 8 wgmma reads it.  Derived: fence.proxy.async, then a 256-thread barrier before the loop
    (RAW: each warpgroup reads the rows the other wrote); the wgmmas' group retired after the
    loop and a second 256-thread barrier at the end of the tile (WAR into the next tile's fill,
    ``via = "tile"``); one wgmma fence per step for both accumulators."""
    m, plan = compiled(*TENSOR_CORE_SUMS)
    top = list(m.body.ops[-1].body.ops)  # the HOST loop's block program
    loop = next(i for i, o in enumerate(top) if isinstance(o, N.For) and o.pipeline)
    fill = next(
        i
        for i, o in enumerate(top)
        if isinstance(o, N.Call) and o.fn == "fill" and Symbols(m).mem(o.args[0]) == "SHARED"
    )
    between = [
        o
        for o in top[fill + 1 : loop]
        if isinstance(o, S.SYNC_OPS) and not isinstance(o, S.MBarrier)
    ]
    assert [type(o).__name__ for o in between] == ["Fence", "BarSync"]
    assert between[0].kind == "proxy_async" and between[1].threads == 256
    end = top[-1]
    assert isinstance(end, S.BarSync) and end.threads == 256 and end.id != between[1].id
    assert {(e.via, e.hazard, e.tensor) for e in end.edges} == {("tile", "war", "E")}
    after = [o for o in top[loop + 1 :] if isinstance(o, S.WaitGroup) and o.unit == "wgmma"]
    assert after[0].pending == 0 and any(e.via == "tile" for e in after[0].edges)
    fences = [o for o in in_loop(m) if isinstance(o, S.Fence) and o.kind == "wgmma"]
    assert len(fences) == 1 and len({e.tensor for e in fences[0].edges}) == 2
    assert any(isinstance(st, P.FillShared) for st in plan.prologue)


def test_dual_gemm_channels_follow_the_wait_points():
    """A and B1 are first read by the first wgmma: one channel; B2 only by the second: its own,
    waited just before it (the template made the first wgmma wait for B2 too)."""
    m, _ = compiled("dual_gemm", "tests/mappings/full/dual_gemm/h100.yaml")
    assert [(b.name, b.kind) for b in syncs(m, S.MBarrier)] == [
        ("full_A_smem_B1_smem", "full"),
        ("empty_A_smem_B1_smem", "empty"),
        ("full_B2_smem", "full"),
        ("empty_B2_smem", "empty"),
    ]
    body = in_loop(m)
    calls = [i for i, o in enumerate(body) if isinstance(o, N.Call)]
    waits = [
        (i, o.bar) for i, o in enumerate(body) if isinstance(o, S.Wait) and o.role == "consumer"
    ]
    assert waits[0][0] < calls[0] < waits[1][0] < calls[1] and waits[1][1] == "full_B2_smem"


def _sites(b: N.Block, path=()):
    for i, op in enumerate(b.ops):
        if isinstance(op, S.SYNC_OPS):
            yield path + (i,), op
        if isinstance(op, N.Copy) and op.bar is not None:
            yield path + (i, "bar"), op
        if isinstance(op, N.For):
            yield from _sites(op.body, path + (i,))


def _without(b: N.Block, path) -> N.Block:
    ops = list(b.ops)
    if len(path) == 1:
        del ops[path[0]]
    elif path[1] == "bar":
        ops[path[0]] = replace(ops[path[0]], bar=None)
    else:
        ops[path[0]] = replace(ops[path[0]], body=_without(ops[path[0]].body, path[1:]))
    return N.Block(tuple(ops), b.yields)


TEETH = [
    (p, f"tests/mappings/full/{p}/h100.yaml", None)
    for p in ("gemm", "gemm_reduction", "dual_gemm", "batched_gemm")
] + [
    ("gemm", "tests/mappings/full/gemm/h100_alias.yaml", None),
    ("gemm", "tests/mappings/full/gemm/h100_nows.yaml", None),
    ("gemm_reduction", "tests/mappings/full/gemm_reduction/h100_tc.yaml", None),
    ("gemm_reduction", "tests/mappings/full/gemm_reduction/h100.yaml", 0),
    ("dual_gemm", "tests/mappings/full/dual_gemm/h100.yaml", 2),
]


@pytest.mark.parametrize("program, mapping, in_flight", TEETH)
def test_every_inserted_sync_op_has_teeth(program, mapping, in_flight):
    """Remove each inserted sync op (and each copy's completion barrier) alone: the sync
    verifier refuses every such module (``in_flight``: the pass run with that
    ``mma_in_flight`` instead of the mapping's).  The table names what caught each one."""
    m, _ = compiled(program, mapping)
    if in_flight is not None:
        tree = instantiate(
            check_program(parse_file(ROOT / "programs" / f"{program}.cyp")),
            load_mapping(ROOT / mapping),
        )
        m = SyncInsertion(mma_in_flight=in_flight)(
            compile_module(tree, until="warp-specialization")[-1][1]
        )
    table = []
    for path, op in _sites(m.body):
        broken = replace(m, body=_without(m.body, path))
        what = (
            f"bar of copy {op.ev}"
            if isinstance(op, N.Copy)
            else sync_line(op, lambda e: e, str)[:60]
        )
        with pytest.raises(VerifyError) as e:
            verify_sync(broken)
            pytest.fail(f"{program} {mapping} {in_flight}: removing `{what}` went unnoticed")
        table.append(f"{type(op).__name__:15} {str(e.value)[:110]}")
    assert len(table) >= 10
    print(f"\n{program} {mapping}:\n  " + "\n  ".join(table))


def test_explain_after_sync_insertion_prints_the_sync_ops(monkeypatch):
    from click.testing import CliRunner

    from cypressc.cli import main

    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(
        main,
        [
            "explain",
            "programs/gemm.cyp",
            "-m",
            "tests/mappings/full/gemm/h100.yaml",
            "--after",
            "sync-insertion",
            "--no-tree",
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "// ---- after sync-insertion"
    assert any(
        x.strip().startswith("wait %full_A_smem_B_smem[(%k % 3)] parity ((%k // 3) % 2)")
        for x in lines
    )
    assert sum("= mbarrier[3]" in x for x in lines) == 2


def test_the_interpreter_runs_synchronized_ir():
    """Sync ops realize events the interpreter tracks itself: the synchronized module still
    computes A @ B."""
    import numpy as np

    from cypressc.ir.check import random_inputs, run_module

    tree = instantiate(
        check_program(parse_file(ROOT / "programs/gemm.cyp")),
        load_mapping(ROOT / "tests/mappings/gemm_small.yaml"),
    )
    m = compile_module(tree, until="sync-insertion")[-1][1]
    assert m.synchronized and syncs(m, S.Wait)
    sizes = dict(M=50, N=24, K=40)
    a = random_inputs(m, sizes, seed=3)
    got = run_module(m, sizes, a, ["C"], seed=5)["C"].astype(np.float64)
    ref = a["A"].astype(np.float64) @ a["B"].astype(np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2
