"""Persistent attention blocks (issue #12, item 2): a copy outside the main loop (the Q panel,
FlashAttention-3's peeled K tile, its last V tile) is loaded once per tile into one buffer, so
the block's next tile must not overwrite it while this tile still reads it.  The per-tile IR
gets a ``tile`` edge from each reader to the copy; sync-insertion realizes it with a one-stage
*empty* mbarrier (the readers release it once their reads are over, the copy's role waits
before loading), or drops it with proof (an earlier copy the same reader released); the
backend flips the once-per-tile barriers' parity on odd tiles (``tphase``) and deals the
tiles in long + short pairs when their trip counts differ (causal).  The concurrent
interpreter runs two tiles of one block back to back and finds what a missing op breaks."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.schedule_check import check_schedules, small_sizes, two_tile_sizes
from cypressc.ir.sync_verify import verify_sync
from cypressc.ir.verify import VerifyError
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.passes.manager import compile_module

ROOT = Path(__file__).resolve().parents[2]
FA3 = "flash_attention3"
PERSISTENT = ROOT / "mappings" / FA3 / "h100_d128_persistent.yaml"
PLAIN = ROOT / "mappings" / FA3 / "h100_d128.yaml"
STAGED = ROOT / "mappings" / FA3 / "h100_d128_staged_persistent.yaml"


@functools.lru_cache(maxsize=None)
def _snaps(mapping: Path) -> dict[str, N.Module]:
    tree = instantiate(check_program(parse_file(ROOT / "programs" / f"{FA3}.cyp")), load_mapping(mapping))
    return dict(compile_module(tree, until="sync-insertion"))


def _top(m: N.Module, kind):
    return [o for o in m.body.ops if isinstance(o, kind)]


def _copy(m: N.Module, dst: str) -> N.Copy:
    return next(o for o in _top(m, N.Copy) if o.dst.name == dst)


def test_the_q_panel_is_released_to_the_next_tile_in_the_key_loops_last_step():
    m = _snaps(PERSISTENT)["sync-insertion"]
    ops = list(m.body.ops)
    bars = {b.name: b for b in _top(m, S.MBarrier)}
    assert bars["empty_Q_block"].kind == "empty" and bars["empty_Q_block"].stages == 1
    assert bars["empty_Q_block"].count == 2  # one arrival per consumer warpgroup
    q = _copy(m, "Q_block")
    wait = ops[ops.index(q) - 2]  # wait on the empty barrier, arrive_expect_tx, the copy
    assert isinstance(wait, S.Wait) and wait.bar == "empty_Q_block" and wait.role == "producer"
    assert wait.parity == N.IConst(1)  # the tile's first wait passes: the previous tile released it
    loop = next(i for i, o in enumerate(ops) if isinstance(o, N.For))
    lp = ops[loop]
    # in the loop: right after the wait_group 1 the mask needs (it retires S = Q·K[k+1]ᵀ), in
    # the last step only; and after the loop when the loop runs no step
    body = list(lp.body.ops)
    (inner,) = [o for o in body if isinstance(o, S.Arrive) and o.bar == "empty_Q_block"]
    before = body[body.index(inner) - 1]
    assert isinstance(before, S.WaitGroup) and before.pending == 1
    assert inner.when == S.Guard(N.IVar(lp.var), N.IBin("-", lp.hi, N.IConst(1)))
    after = ops[loop + 1]
    assert isinstance(after, S.Arrive) and after.bar == "empty_Q_block" and after.role == "consumer"
    assert after.when == S.Guard(lp.lo, lp.hi)
    for arrive in (inner, after):
        assert {e.src for e in arrive.edges} == {e.src for e in wait.edges}
        assert all(e.via == "tile" for e in arrive.edges)


def test_the_peeled_k_tile_needs_no_barrier_of_its_own():
    """S = Q·K[0]ᵀ reads the Q panel and the peeled K tile: the producer loads the next K[0]
    only after waiting for the release of that Q, which comes after the same read retired."""
    m = _snaps(PERSISTENT)["sync-insertion"]
    names = {b.name for b in _top(m, S.MBarrier)}
    assert "full_B_mma_qk" in names and "empty_B_mma_qk" not in names
    assert "empty_B_mma_pv_1" in names  # the last V tile: read by a wgmma no earlier copy waits for


def test_dropping_a_next_tile_release_or_wait_is_refused_by_the_verifier():
    m = _snaps(PERSISTENT)["sync-insertion"]
    victims = [o for o in _top(m, S.Wait) + _top(m, S.Arrive) if o.bar in ("empty_Q_block", "empty_B_mma_pv_1")]
    assert len(victims) == 4
    for op in victims:
        mutant = replace(m, body=N.Block(tuple(o for o in m.body.ops if o is not op), m.body.yields))
        with pytest.raises(VerifyError):
            verify_sync(mutant)


@pytest.mark.parametrize("victim", ["empty_Q_block", "empty_B_mma_pv_1"])
def test_two_tiles_of_one_block_catch_a_copy_that_does_not_wait_for_the_release(victim):
    """One tile alone never waits on these barriers (its first wait passes); two tiles run back
    to back by one persistent block race without it: with the key loop empty (the second
    sizes), nothing else holds the producer back before the last V tile."""
    snaps = _snaps(PERSISTENT)
    m = snaps["sync-insertion"]
    op = next(o for o in _top(m, S.Wait) if o.bar == victim)
    mutant = replace(m, body=N.Block(tuple(o for o in m.body.ops if o is not op), m.body.yields))
    one = check_schedules(mutant, snaps["warp-specialization"], sizes={**small_sizes(m), "causal": 0},
                          seed=0, schedules=20, value_every=0)
    assert one.finding is None  # invisible in one tile
    found = []
    for base in ({**small_sizes(m), "causal": 0}, {**small_sizes(m, wraps=0), "causal": 0}):
        v = check_schedules(mutant, snaps["warp-specialization"], sizes=two_tile_sizes(m, base), seed=0,
                            schedules=20, value_every=0, persistent=True)
        found.append(v.finding)
    assert any(f is not None and f.kind == "race" and victim.removeprefix("empty_") in f.message for f in found), found


def test_two_tiles_of_the_unmutated_block_are_clean_with_values():
    snaps = _snaps(PERSISTENT)
    m = snaps["sync-insertion"]
    sizes = two_tile_sizes(m, {**small_sizes(m), "causal": 0})
    assert sizes is not None and sizes["B"] == 2  # two (batch) tiles, the key loop wrapping twice in each
    v = check_schedules(m, snaps["warp-specialization"], sizes=sizes, seed=5, schedules=4, value_every=2,
                        persistent=True)
    assert v.finding is None, v.line(FA3)


def _cu(tmp_path: Path, mapping: Path) -> str:
    out = tmp_path / mapping.stem
    r = CliRunner().invoke(main, ["build", str(ROOT / "programs" / f"{FA3}.cyp"), "-m", str(mapping), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return (out / f"{FA3}.cu").read_text()


def test_the_persistent_kernel_flips_the_once_per_tile_parities(tmp_path):
    cu = _cu(tmp_path, PERSISTENT)
    assert cu.count("tphase ^= 1;") == 2  # the producer's tile loop and the consumers'
    assert "cypress::wait(&empty_Q_block[0], (1 ^ tphase));" in cu
    assert "cypress::wait(&full_Q_block[0], (0 ^ tphase));" in cu
    assert "cypress::wait(&empty_B_mma_qk_1[stage], (phase ^ 1));" in cu  # the key loop's ring runs on
    assert "const long long grid = tiles < sms ? tiles : sms;" in cu


def test_the_persistent_kernel_takes_causal_tiles_in_long_and_short_pairs(tmp_path):
    cu = _cu(tmp_path, PERSISTENT)
    assert "t = 2 * (blockIdx.x + (k >> 1) * gridDim.x) + (k & 1)" in cu
    assert "b2 = j % 2 ? j / 2 : tiles2 - 1 - j / 2;" in cu
    # the walk visits every tile once, for any grid
    for tiles, grid in ((2048, 132), (7, 132), (301, 132), (264, 132), (5, 3)):
        seen = []
        for b in range(min(tiles, grid)):
            k, t = 0, 2 * b
            while t < tiles:
                seen.append(t)
                k += 1
                t = 2 * (b + (k >> 1) * grid) + (k & 1)
        assert sorted(seen) == list(range(tiles))
    for tiles2 in (1, 2, 5, 8):  # the pair order is a permutation of the query blocks
        assert sorted(j // 2 if j % 2 else tiles2 - 1 - j // 2 for j in range(tiles2)) == list(range(tiles2))


def test_a_one_tile_block_has_no_next_tile_to_release_to(tmp_path):
    """``persistent: false``: each block runs one tile, no tile edge, no empty barrier for Q."""
    m = _snaps(PLAIN)["sync-insertion"]
    assert not [b for b in _top(m, S.MBarrier) if b.kind == "empty" and b.name in ("empty_Q_block", "empty_B_mma_pv_1")]
    cu = _cu(tmp_path, PLAIN)
    assert "tphase" not in cu and "empty_Q_block" not in cu
    assert "t += num_tiles" in cu


def test_ping_pong_turns_do_not_run_into_the_next_tile():
    """With ping-pong, the last warpgroup hands warpgroup 0 each tile's first turn.  Were
    warpgroup 0 to pass it to itself (the one-tile protocol), it could start the next tile's
    turns while the last warpgroup still waits for this tile's last one, and complete that
    warpgroup's barrier with two passes; two tiles of one block find it."""
    snaps = _snaps(ROOT / "mappings" / FA3 / "h100_d128_pp_persistent.yaml")
    m = snaps["sync-insertion"]
    start = m.body.ops[0]
    assert isinstance(start, S.Turn) and start.kind == "pass"
    assert start.when == S.Guard(N.IProc("WARPGROUP"), N.IConst(1))  # the last of two warpgroups
    sizes = two_tile_sizes(m, {**small_sizes(m), "causal": 0})
    ok = check_schedules(m, snaps["warp-specialization"], sizes=sizes, seed=11, schedules=20, value_every=0,
                         persistent=True)
    assert ok.finding is None, ok.line(FA3)
    one_tile = replace(start, when=S.Guard(N.IConst(0), N.IProc("WARPGROUP")))  # warpgroup 0 itself
    mutant = replace(m, body=N.Block((one_tile, *m.body.ops[1:]), m.body.yields))
    bad = check_schedules(mutant, snaps["warp-specialization"], sizes=sizes, seed=11, schedules=20, value_every=0,
                          persistent=True)
    assert bad.finding is not None and bad.finding.kind == "race" and "turn barrier" in bad.finding.message, bad


# ----------------------------------------------------------------------------- O staged over the last V tile
def test_a_persistent_block_shares_only_a_reloaded_tiles_bytes():
    """With O staged, d = 128 needs 32 KiB more than a block has.  The staged O tile comes after
    the last V tile in the tile and that V tile is copied in once per tile, outside the loop: in
    a persistent block they may share bytes (the next V copy waits for the O store).  Of the
    pairs that qualify, the one whose earlier tensor comes latest wins (not the peeled K tile,
    whose next copy starts the next tile)."""
    res = _snaps(STAGED)["resource-allocation"].resources
    assert {frozenset(p) for p in res.war} == {frozenset(("B_mma_pv_1", "D_store_wg"))}
    assert res.smem["B_mma_pv_1"].offset == res.smem["D_store_wg"].offset
    plain = _snaps(PERSISTENT)["resource-allocation"].resources
    assert not plain.war  # everything fits: nothing shares
    assert [s.offset for s in plain.smem.values()] == [res.smem[n].offset for n in plain.smem]


def test_the_next_v_tile_waits_for_the_o_stores_reads():
    """The last V tile's empty barrier gets a ``tile`` edge from the TMA store of the bytes it
    shares: the storing thread waits for its bulk group's reads (``wait_group bulk 0``) and then
    arrives; the writes of the staged tile need no edge of their own (the store reads after
    them); both warpgroups' last O += P·V read the whole V tile, so a 256-thread barrier comes
    before either writes its O rows over it."""
    m = _snaps(STAGED)["sync-insertion"]
    ops = list(m.body.ops)
    store = next(o for o in _top(m, N.Copy) if isinstance(o.src, N.TRef) and o.src.name == "D_store_wg")
    arrive = next(o for o in _top(m, S.Arrive) if o.bar == "empty_B_mma_pv_1")
    between = ops[ops.index(store) + 1:ops.index(arrive)]
    assert [type(o) for o in between] == [S.CommitGroup, S.WaitGroup]
    assert between[1].unit == "bulk" and between[1].pending == 0
    assert {e.hazard for e in arrive.edges} == {"war"}
    (pv,) = [o for o in _top(m, N.Call) if o.ev in {e.src for e in arrive.edges} - {store.ev}]
    assert store.ev in {e.src for e in arrive.edges} and pv.fn == "warpgroup_mma"  # the last O += P·V
    bar = next(o for o in _top(m, S.MBarrier) if o.name == "empty_B_mma_pv_1")
    assert bar.count == 2  # one arrival per consumer warpgroup, from its storing thread
    sync = [o for o in _top(m, S.BarSync) if o.threads == 256]
    assert len(sync) == 1 and ops.index(sync[0]) < ops.index(store)


def test_dropping_the_o_stores_retirement_is_refused_and_raced():
    snaps = _snaps(STAGED)
    m = snaps["sync-insertion"]
    wait = next(o for o in _top(m, S.WaitGroup) if o.unit == "bulk")
    mutant = replace(m, body=N.Block(tuple(o for o in m.body.ops if o is not wait), m.body.yields))
    with pytest.raises(VerifyError, match="bulk group retired its reads"):
        verify_sync(mutant)
    found = [check_schedules(mutant, snaps["warp-specialization"], sizes=two_tile_sizes(m, base), seed=s,
                             schedules=20, value_every=0, persistent=True).finding
             for base in ({**small_sizes(m), "causal": 0}, {**small_sizes(m, wraps=0), "causal": 0})
             for s in (0, 11)]
    assert any(f is not None and f.kind == "race" for f in found), found


def test_the_interpreter_sees_the_shared_bytes():
    """Without the 256-thread barrier one warpgroup writes its O rows over V bytes the other's
    last O += P·V may still read: only a model of the shared bytes sees it."""
    snaps = _snaps(STAGED)
    m = snaps["sync-insertion"]
    sync = next(o for o in _top(m, S.BarSync) if o.threads == 256)
    mutant = replace(m, body=N.Block(tuple(o for o in m.body.ops if o is not sync), m.body.yields))
    v = check_schedules(mutant, snaps["warp-specialization"], sizes={**small_sizes(m), "causal": 0}, seed=0,
                        schedules=20, value_every=0)
    assert v.finding is not None and v.finding.kind == "race" and "D_store_wg" in v.finding.message, v.finding


def test_the_staged_kernel_stores_o_through_the_v_tiles_bytes(tmp_path):
    cu = _cu(tmp_path, STAGED)
    v = cu.index("uint8_t* s_B_mma_pv_1 = smem + ")
    off = cu[v:].split("smem + ", 1)[1].split(";", 1)[0]
    assert f"uint8_t* box = smem + {off} + cw * 16384" in cu  # each warpgroup's 64 rows of O
    tail = cu[cu.index("cypress::tma_store_commit();"):]
    assert tail.index("cypress::tma_store_wait<0>();") < tail.index("cypress::arrive(&empty_B_mma_pv_1[0]);")
