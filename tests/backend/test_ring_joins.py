"""Ring joins (cypressc/passes/rings.py): FlashAttention-3's peeled K[0] and last V tile take
positions of the key loop's K and V stage rings instead of buffers of their own.

What is checked: which tensors join (and that nothing joins without warp specialization or in a
program with no peeled copy); that they get no bytes; the synchronized IR (the members wait and
release on their ring's barriers at their ring positions, the verifier accepts it and refuses it
without a member's release or wait, the concurrent interpreter finds the race of a missing wait
on two tiles of one persistent block); the kernel (the members' stage and parity from the running
counters, one extra ring position per tile).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import pytest

from cypressc.backend.emit import emit_cuda
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.schedule_check import check_schedules, small_sizes, two_tile_sizes
from cypressc.ir.sync_verify import verify_sync
from cypressc.ir.verify import VerifyError
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module
from cypressc.passes.rings import ring_joins

ROOT = Path(__file__).resolve().parents[2]
PPS = ROOT / "tests/mappings/full" / "flash_attention3" / "h100_d128_pp_staged_persistent.yaml"
K_RING, V_RING = "K_smem_1", "V_smem"


def _tree(program: str, mapping: Path):
    return instantiate(
        check_program(parse_file(ROOT / "programs" / f"{program}.cyp")), load_mapping(mapping)
    )


@functools.lru_cache(maxsize=None)
def _snaps(program: str, mapping: Path) -> dict[str, N.Module]:
    return dict(compile_module(_tree(program, mapping), until="sync-insertion"))


def _top(m: N.Module, kind) -> list:
    return [o for o in m.body.ops if isinstance(o, kind)]


def test_the_peeled_k_and_the_last_v_tile_join_the_key_loops_rings():
    m = _snaps("flash_attention3", PPS)["copy-elimination"]
    joins = ring_joins(m, True)
    assert {(j.member, j.ring, j.side, j.index, j.pre) for j in joins.values()} == {
        ("K_smem", K_RING, "pre", 0, 1),
        ("V_smem_1", V_RING, "post", 0, 0),
    }
    assert ring_joins(m, False) == {}  # no producer to issue the ring's copies in ring order
    fa2 = _snaps(
        "flash_attention2",
        ROOT / "tests/mappings/full" / "flash_attention2" / "h100_d128_pp_staged_persistent.yaml",
    )
    assert (
        ring_joins(fa2["copy-elimination"], True) == {}
    )  # no copy outside the loop of a loop copy's partition


def test_members_have_no_bytes_and_the_loop_counts_their_positions():
    m = _snaps("flash_attention3", PPS)["warp-specialization"]
    assert set(m.resources.smem) == {K_RING, V_RING, "Q_smem", "O_smem"}
    assert m.resources.war == ()  # nothing left to share bytes with the last V tile
    (lp,) = _top(m, N.For)
    assert lp.ring_extra == 1
    k0 = next(
        o
        for o in _top(m, N.Copy)
        if o.dst
        == N.Piece(
            f"{K_RING}#stage", (N.IBin("%", N.IBin("+", N.IConst(0), N.IConst(0)), N.IConst(2)),)
        )
    )
    v_last = next(
        o
        for o in _top(m, N.Copy)
        if isinstance(o.dst, N.Piece) and o.dst.partition == f"{V_RING}#stage"
    )
    assert v_last.dst.idx == (N.IBin("%", N.IBin("+", lp.hi, N.IConst(0)), N.IConst(2)),)
    assert lp.ev in {
        r.name for r in v_last.pre
    }  # after the loop's reads of the ring, in event order
    assert k0.ev != v_last.ev


def test_members_wait_and_release_on_their_rings_barriers():
    m = _snaps("flash_attention3", PPS)["sync-insertion"]
    bars = {b.name: b for b in _top(m, S.MBarrier)}
    assert {n for n in bars if "K_smem" in n or "V_smem" in n} == {
        f"full_{K_RING}",
        f"empty_{K_RING}",
        f"full_{V_RING}",
        f"empty_{V_RING}",
    }
    assert bars[f"empty_{K_RING}"].stages == 2 and bars[f"empty_{K_RING}"].count == 2
    waits = [o for o in _top(m, S.Wait) if o.bar == f"empty_{K_RING}"]
    (k0_wait,) = waits
    assert k0_wait.role == "producer" and all(e.via == "ring" for e in k0_wait.edges)
    arrives = [o for o in _top(m, S.Arrive) if o.bar == f"empty_{K_RING}"]
    (k0_release,) = arrives  # right after S = Q·K[0]ᵀ retired, not at the end of the tile
    ops = list(m.body.ops)
    before = ops[ops.index(k0_release) - 1]
    assert isinstance(before, S.WaitGroup) and before.pending == 0
    assert ops.index(k0_release) < ops.index(_top(m, N.For)[0])
    verify_sync(m)


@pytest.mark.parametrize("bar", [f"empty_{K_RING}", f"empty_{V_RING}"])
@pytest.mark.parametrize("kind", [S.Wait, S.Arrive])
def test_a_members_missing_wait_or_release_is_refused(bar, kind):
    m = _snaps("flash_attention3", PPS)["sync-insertion"]
    (victim,) = [o for o in _top(m, kind) if o.bar == bar]
    mutant = replace(
        m, body=N.Block(tuple(o for o in m.body.ops if o is not victim), m.body.yields)
    )
    with pytest.raises(VerifyError):
        verify_sync(mutant)


def test_two_tiles_on_one_ring_are_clean_and_a_missing_member_wait_races():
    """The last V tile without its wait overwrites the stage O += P·V[k] still reads.  (K[0]'s
    wait is refused by the verifier above but races in no schedule of this program: the next
    tile's Q wait before it comes after the same stage's reads.)"""
    snaps = _snaps("flash_attention3", PPS)
    m, ref = snaps["sync-insertion"], snaps["warp-specialization"]
    base = {**small_sizes(m), "causal": 0}
    sizes = two_tile_sizes(m, base)
    assert sizes is not None
    ok = check_schedules(m, ref, sizes=sizes, seed=3, schedules=6, value_every=3, persistent=True)
    assert ok.finding is None, ok.line("ring")
    (victim,) = [o for o in _top(m, S.Wait) if o.bar == f"empty_{V_RING}"]
    mutant = replace(
        m, body=N.Block(tuple(o for o in m.body.ops if o is not victim), m.body.yields)
    )
    bad = check_schedules(
        mutant, ref, sizes=sizes, seed=3, schedules=30, value_every=0, persistent=True
    )
    assert bad.finding is not None and bad.finding.kind == "race", bad.line("mutant")


def test_the_kernel_counts_member_positions_on_the_running_counters():
    plan = dict(compile_module(_tree("flash_attention3", PPS)))["cuda-lowering"].kernel
    cu = emit_cuda(plan)
    assert (
        "tma_load_3d(s_K_smem_1 + pipe.index * K_smem_1_STAGE" in cu
    )  # K[0] at the ring's position
    assert "cypress::wait(&full_K_smem_1[pipe.index], pipe.phase);" in cu
    assert plan.ring_extra == [1]  # one ring position per tile besides the loop's steps
    assert cu.count("// ring positions of the tiles copied outside main loop 0: 1 per tile") == 2
    assert "s_K_smem =" not in cu and "V_smem_1" not in cu and "free_" not in cu
    assert cu.count("pipe.advance();") == 4  # per role: each step, each tile
