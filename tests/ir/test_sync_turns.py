"""Ping-pong (``pingpong: true``; cypressc/passes/sync_turns.py): the consumer warpgroups'
runs of wgmma issues become ``turn take`` / ``turn pass`` named barriers from ``turn``
edges, on hand-written IR and on the FlashAttention programs; the verifier and the
concurrent interpreter refuse a ring with an op taken away; the CUDA issues each run
between a ``bar.sync`` on the warpgroup's own barrier and a ``bar.arrive`` on the next's."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main
from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.schedule_check import check_schedules, small_sizes
from cypressc.ir.sync_verify import verify_sync
from cypressc.ir.verify import VerifyError
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module
from cypressc.passes.sync_insertion import SyncInsertion
from tests.ir.test_sync_insertion import (
    ATOM,
    BLOCK,
    C,
    THREADS,
    acc,
    drop,
    kinds,
    module,
    ref,
    run,
    staged,
)

ROOT = Path(__file__).resolve().parents[2]


def _turns(ops) -> list[str]:
    """The turn ops of a block, as ``take``/``pass`` with the warpgroups a guard lets through
    (of two)."""
    out = []
    for o in ops:
        if isinstance(o, S.Turn):
            side = lambda e: "wg" if isinstance(e, N.IProc) else str(e.value)  # noqa: E731
            g = "" if o.when is None else f" if {side(o.when.a)} >= {side(o.when.b)}"
            out.append(f"{o.kind}{g}")
    return out


def _straight_line(dims=THREADS) -> N.Module:
    """a and b issued back to back, a read, c issued, b and c read: two runs, [a, b] and [c]."""
    sa, sb = N.Piece("SA#stage", (C(0),)), N.Piece("SB#stage", (C(0),))
    a1, a2, o1, o2 = (replace(acc(n), dims=dims) for n in ("a1", "a2", "o1", "o2"))
    return module(
        [
            *staged("SA", 64, 64, 1),
            *staged("SB", 64, 64, 1),
            a1,
            a2,
            o1,
            o2,
            N.Call("f1", "fill", (N.TRef("a1"), C(0)), (), dims),
            N.Call("f2", "fill", (N.TRef("a2"), C(0)), (), dims),
            N.Call("a", "warpgroup_mma", (ATOM, N.TRef("a1"), sa, sb), (ref("f1", dims),), dims),
            N.Call("b", "warpgroup_mma", (ATOM, N.TRef("a2"), sa, sb), (ref("f2", dims),), dims),
            N.Call("ra", "copy", (N.TRef("a1"), N.TRef("o1")), (ref("a", dims),), dims),
            N.Call("c", "warpgroup_mma", (ATOM, N.TRef("a1"), sa, sb), (ref("ra", dims),), dims),
            N.Call("rb", "copy", (N.TRef("a2"), N.TRef("o2")), (ref("b", dims),), dims),
            N.Call("rc", "copy", (N.TRef("a1"), N.TRef("o1")), (ref("c", dims),), dims),
        ],
        {},
    )


def test_each_run_of_wgmmas_is_one_turn():
    """The last warpgroup passes warpgroup 0 the first turn; each run takes the turn after its operands'
    waits and before its first wgmma's fence, and passes it on after the commit of its last
    wgmma (before any wait_group); the last warpgroup passes nothing after the tile's last run."""
    m = run(_straight_line(), pingpong=True)
    assert kinds(m.body.ops) == [
        "Turn",
        "f1",
        "f2",
        "Turn",
        "Fence(wgmma)",
        "a",
        "CommitGroup(wgmma)",
        "Fence(wgmma)",
        "b",
        "CommitGroup(wgmma)",
        "Turn",
        "WaitGroup(wgmma 1)",
        "ra",
        "Turn",
        "Fence(wgmma)",
        "c",
        "CommitGroup(wgmma)",
        "Turn",
        "WaitGroup(wgmma 1)",
        "rb",
        "WaitGroup(wgmma 0)",
        "rc",
    ]
    assert _turns(m.body.ops) == ["pass if wg >= 1", "take", "pass", "take", "pass if 0 >= wg"]
    t = [o for o in m.body.ops if isinstance(o, S.Turn)]
    assert t[0].id == C(1) and {o.threads for o in t} == {256}
    assert all(e.hazard == "turn" for o in t for e in o.edges)
    assert [(e.src, e.dst) for o in t[1:3] for e in o.edges] == [("b", "a"), ("b", "a")]
    # no turn without the knob: the same program's sync is unchanged
    assert not _turns(run(_straight_line()).body.ops)


@pytest.mark.parametrize("which", range(5))
def test_the_verifier_refuses_a_ring_with_a_turn_op_taken_away(which):
    m = run(_straight_line(), pingpong=True)
    seen = []

    def nth(o):
        if isinstance(o, S.Turn):
            seen.append(o)
            return len(seen) == which + 1
        return False

    with pytest.raises(VerifyError, match="turn barrier"):
        verify_sync(drop(m, nth))


def test_one_consumer_warpgroup_has_no_one_to_take_turns_with():
    one = BLOCK + (N.Dim(C(1), "WARPGROUP"), N.Dim(C(4), "WARP"), N.Dim(C(32), "THREAD"))
    with pytest.raises(CypressError, match="two or more consumer warpgroups"):
        SyncInsertion(pingpong=True)(_straight_line(one))


def _snaps(program: str, mapping: str) -> dict:
    tree = instantiate(
        check_program(parse_file(ROOT / "programs" / f"{program}.cyp")),
        load_mapping(ROOT / mapping),
    )
    return dict(compile_module(tree, until="sync-insertion"))


def _loop_turns(m: N.Module) -> tuple[list, list, list]:
    """The turn ops before, inside and after the main loop."""
    i = next(i for i, o in enumerate(m.body.ops) if isinstance(o, N.For))
    return (_turns(m.body.ops[:i]), _turns(m.body.ops[i].body.ops), _turns(m.body.ops[i + 1 :]))


def test_flash_attention3_takes_one_turn_per_step_for_both_gemms():
    """S = Q·K[k+1]ᵀ and O += P·V[k] are one run (no wait between them): one take before the
    first, one pass after the second's commit, the wait_group 1 after the pass; the peeled
    step 0 and the last O += P·V are runs of their own."""
    m = _snaps("flash_attention3", "tests/mappings/full/flash_attention3/h100_d128_pp.yaml")[
        "sync-insertion"
    ]
    assert _loop_turns(m) == (
        ["pass if wg >= 1", "take", "pass"],
        ["take", "pass"],
        ["take", "pass if 0 >= wg"],
    )
    body = kinds(next(o for o in m.body.ops if isinstance(o, N.For)).body.ops)
    take, pas = body.index("Turn"), len(body) - 1 - body[::-1].index("Turn")
    commits = [i for i, k in enumerate(body) if k == "CommitGroup(wgmma)"]
    assert take < commits[0] < commits[1] == pas - 1 < body.index("WaitGroup(wgmma 1)")


def test_flash_attention2_joins_the_runs_across_the_back_edge():
    """O += P·V of step k and S = Q·K[k+1]ᵀ follow each other with no wait: one run across the
    loop's back edge, taken before the loop and before O += P·V, passed after S and after
    the loop."""
    m = _snaps("flash_attention2", "tests/mappings/full/flash_attention2/h100_d128_pp.yaml")[
        "sync-insertion"
    ]
    assert _loop_turns(m) == (["pass if wg >= 1", "take"], ["pass", "take"], ["pass if 0 >= wg"])


@pytest.mark.parametrize(
    "program,mapping",
    [
        ("flash_attention2", "h100_d64_pp"),
        ("flash_attention3", "h100_d128_pp"),
        ("flash_attention3", "h100_d128_wg3_pp"),
    ],
)
def test_the_ring_runs_in_the_concurrent_interpreter_and_a_missing_pass_deadlocks(program, mapping):
    snaps = _snaps(program, f"tests/mappings/full/{program}/{mapping}.yaml")
    m, ref_m = snaps["sync-insertion"], snaps["warp-specialization"]
    sizes = {**small_sizes(m), "causal": 0}
    v = check_schedules(m, ref_m, sizes=sizes, seed=2, schedules=3, value_every=0)
    assert v.finding is None, v.line(program)
    mutant = drop(m, lambda o: isinstance(o, S.Turn) and o.kind == "pass" and o.when is None)
    v = check_schedules(mutant, ref_m, sizes=sizes, seed=2, schedules=2, value_every=0)
    assert v.finding is not None and v.finding.kind == "deadlock"


def _cuda(tmp_path: Path, program: str, mapping: str) -> tuple[str, Path]:
    out = tmp_path / mapping
    r = CliRunner().invoke(
        main,
        [
            "build",
            str(ROOT / "programs" / f"{program}.cyp"),
            "-m",
            str(ROOT / "tests/mappings/full" / program / f"{mapping}.yaml"),
            "-o",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    return (out / f"{program}.cu").read_text(), out


def test_the_cuda_takes_and_passes_on_each_warpgroups_own_barrier(tmp_path):
    cu, _ = _cuda(tmp_path, "flash_attention3", "h100_d128_wg3_pp")
    lines = [ln.strip() for ln in cu.splitlines()]
    syncs = [ln for ln in lines if ln.startswith("cypress::named_sync(")]
    arrives = [ln for ln in lines if ln.startswith("cypress::named_arrive(")]
    assert syncs and all(ln.startswith("cypress::named_sync((1 + cw), 256);") for ln in syncs)
    assert arrives[0].startswith("cypress::named_arrive(1, 256);")
    assert all(
        ln.startswith("cypress::named_arrive((1 + ((cw + 1) % 3)), 256);") for ln in arrives[1:]
    )
    assert len(syncs) == len(arrives) - 1 == 3  # step 0, the loop's step, the last O += P V
    assert (
        "if (cw >= 2) {" in cu and "if (1 >= cw) {" in cu
    )  # the first turn, by the last warpgroup; its last pass
    plain, _ = _cuda(tmp_path, "flash_attention3", "h100_d128_wg3")
    assert "named_arrive" not in plain and "named_sync" not in plain


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_the_ping_pong_kernel_compiles_without_spills(tmp_path, clean_ptxas):
    _, out = _cuda(tmp_path, "flash_attention2", "h100_d128_pp")
    clean_ptxas(out, "libflash_attention2.so")
    assert re.search(r"named_sync\(\(1 \+ cw\), 256\)", (out / "flash_attention2.cu").read_text())
