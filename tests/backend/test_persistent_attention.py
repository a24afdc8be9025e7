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
import re
import shutil
import subprocess
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
from cypressc.pipeline import compile_module

ROOT = Path(__file__).resolve().parents[2]
# these tests are about a peeled step's tiles in buffers of their own (what they share, the
# barriers they need); with ring joins FlashAttention-3's take stage-ring positions instead
# (tests/backend/test_ring_joins.py)
pytestmark = pytest.mark.usefixtures("no_ring_joins")
FA3 = "flash_attention3"
PERSISTENT = ROOT / "tests/mappings/full" / FA3 / "h100_d128_persistent.yaml"
PLAIN = ROOT / "tests/mappings/full" / FA3 / "h100_d128.yaml"
STAGED = ROOT / "tests/mappings/full" / FA3 / "h100_d128_staged_persistent.yaml"


@functools.lru_cache(maxsize=None)
def _snaps(mapping: Path) -> dict[str, N.Module]:
    tree = instantiate(
        check_program(parse_file(ROOT / "programs" / f"{FA3}.cyp")), load_mapping(mapping)
    )
    return dict(compile_module(tree, until="sync-insertion"))


def _top(m: N.Module, kind):
    return [o for o in m.body.ops if isinstance(o, kind)]


def _copy(m: N.Module, dst: str) -> N.Copy:
    return next(o for o in _top(m, N.Copy) if o.dst.name == dst)


def test_the_q_panel_is_released_to_the_next_tile_in_the_key_loops_last_step():
    m = _snaps(PERSISTENT)["sync-insertion"]
    ops = list(m.body.ops)
    bars = {b.name: b for b in _top(m, S.MBarrier)}
    assert bars["empty_Q_smem"].kind == "empty" and bars["empty_Q_smem"].stages == 1
    assert bars["empty_Q_smem"].count == 2  # one arrival per consumer warpgroup
    q = _copy(m, "Q_smem")
    wait = ops[ops.index(q) - 2]  # wait on the empty barrier, arrive_expect_tx, the copy
    assert isinstance(wait, S.Wait) and wait.bar == "empty_Q_smem" and wait.role == "producer"
    assert wait.parity == N.IConst(1)  # the tile's first wait passes: the previous tile released it
    loop = next(i for i, o in enumerate(ops) if isinstance(o, N.For))
    lp = ops[loop]
    # in the loop: right after the wait_group 1 the mask needs (it retires S = Q·K[k+1]ᵀ), in
    # the last step only; and after the loop when the loop runs no step
    body = list(lp.body.ops)
    (inner,) = [o for o in body if isinstance(o, S.Arrive) and o.bar == "empty_Q_smem"]
    before = body[body.index(inner) - 1]
    assert isinstance(before, S.WaitGroup) and before.pending == 1
    assert inner.when == S.Guard(N.IVar(lp.var), N.IBin("-", lp.hi, N.IConst(1)))
    after = ops[loop + 1]
    assert isinstance(after, S.Arrive) and after.bar == "empty_Q_smem" and after.role == "consumer"
    assert after.when == S.Guard(lp.lo, lp.hi)
    for arrive in (inner, after):
        assert {e.src for e in arrive.edges} == {e.src for e in wait.edges}
        assert all(e.via == "tile" for e in arrive.edges)


def test_the_peeled_k_tile_needs_no_barrier_of_its_own():
    """S = Q·K[0]ᵀ reads the Q panel and the peeled K tile: the producer loads the next K[0]
    only after waiting for the release of that Q, which comes after the same read retired."""
    m = _snaps(PERSISTENT)["sync-insertion"]
    names = {b.name for b in _top(m, S.MBarrier)}
    assert "full_K_smem" in names and "empty_K_smem" not in names
    assert "empty_V_smem_1" in names  # the last V tile: read by a wgmma no earlier copy waits for


def test_dropping_a_next_tile_release_or_wait_is_refused_by_the_verifier():
    m = _snaps(PERSISTENT)["sync-insertion"]
    victims = [
        o
        for o in _top(m, S.Wait) + _top(m, S.Arrive)
        if o.bar in ("empty_Q_smem", "empty_V_smem_1")
    ]
    assert len(victims) == 4
    for op in victims:
        mutant = replace(
            m, body=N.Block(tuple(o for o in m.body.ops if o is not op), m.body.yields)
        )
        with pytest.raises(VerifyError):
            verify_sync(mutant)


@pytest.mark.parametrize("victim", ["empty_Q_smem", "empty_V_smem_1"])
def test_two_tiles_of_one_block_catch_a_copy_that_does_not_wait_for_the_release(victim):
    """One tile alone never waits on these barriers (its first wait passes); two tiles run back
    to back by one persistent block race without it: with the key loop empty (the second
    sizes), nothing else holds the producer back before the last V tile."""
    snaps = _snaps(PERSISTENT)
    m = snaps["sync-insertion"]
    op = next(o for o in _top(m, S.Wait) if o.bar == victim)
    mutant = replace(m, body=N.Block(tuple(o for o in m.body.ops if o is not op), m.body.yields))
    one = check_schedules(
        mutant,
        snaps["warp-specialization"],
        sizes={**small_sizes(m), "causal": 0},
        seed=0,
        schedules=20,
        value_every=0,
    )
    assert one.finding is None  # invisible in one tile
    found = []
    for base in ({**small_sizes(m), "causal": 0}, {**small_sizes(m, wraps=0), "causal": 0}):
        v = check_schedules(
            mutant,
            snaps["warp-specialization"],
            sizes=two_tile_sizes(m, base),
            seed=0,
            schedules=20,
            value_every=0,
            persistent=True,
        )
        found.append(v.finding)
    assert any(
        f is not None and f.kind == "race" and victim.removeprefix("empty_") in f.message
        for f in found
    ), found


def test_two_tiles_of_the_unmutated_block_are_clean_with_values():
    snaps = _snaps(PERSISTENT)
    m = snaps["sync-insertion"]
    sizes = two_tile_sizes(m, {**small_sizes(m), "causal": 0})
    assert (
        sizes is not None and sizes["B"] == 2
    )  # two (batch) tiles, the key loop wrapping twice in each
    v = check_schedules(
        m,
        snaps["warp-specialization"],
        sizes=sizes,
        seed=5,
        schedules=4,
        value_every=2,
        persistent=True,
    )
    assert v.finding is None, v.line(FA3)


def _cu(tmp_path: Path, mapping: Path) -> str:
    out = tmp_path / mapping.stem
    r = CliRunner().invoke(
        main, ["build", str(ROOT / "programs" / f"{FA3}.cyp"), "-m", str(mapping), "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    return (out / f"{FA3}.cu").read_text()


def test_the_persistent_kernel_flips_the_once_per_tile_parities(tmp_path):
    cu = _cu(tmp_path, PERSISTENT)
    assert cu.count("tphase ^= 1;") == 2  # the producer's tile loop and the consumers'
    assert "cypress::wait(&empty_Q_smem[0], 1 ^ tphase);" in cu
    assert "cypress::wait(&full_Q_smem[0], 0 ^ tphase);" in cu
    assert (
        "cypress::wait(&empty_K_smem_1[pipe.index], pipe.phase ^ 1);" in cu
    )  # the key loop's ring runs on
    assert "const long long grid = tiles < sms ? tiles : sms;" in cu


def test_the_persistent_kernel_takes_causal_tiles_in_long_and_short_pairs(tmp_path):
    """Pairs while the grid has fewer blocks than tiles; with a block for every tile (the
    launcher's grid is min(tiles, SMs)), one tile each: pairs would give half the blocks two
    tiles and the others none (twice the time).  The launcher picks the kernel's instance
    (``kPairs``), so the paired walk is the same code as without the choice."""
    cu = _cu(tmp_path, PERSISTENT)
    assert "template <bool kPairs>" in cu and "constexpr int P = kPairs;" in cu
    loop = "for (int k = 0, t = blockIdx.x << P; t < num_tiles; ++k, t = ((blockIdx.x + (k >> P) * gridDim.x) << P) + (k & P))"
    assert cu.count(loop) == 2
    assert re.search(
        r"if \(tiles > grid\) flash_attention3_kernel<true><<<.*\n\s*else flash_attention3_kernel<false><<<",
        cu,
    )
    assert "b2 = j % 2 ? j / 2 : tiles2 - 1 - j / 2;" in cu
    # the walk visits every tile once, for any grid; one tile per block when the grid covers them
    for tiles, sms in (
        (2048, 132),
        (7, 132),
        (301, 132),
        (264, 132),
        (5, 3),
        (132, 132),
        (100, 132),
    ):
        grid, seen = min(tiles, sms), []
        P = int(tiles > grid)
        for b in range(grid):
            mine, k, t = [], 0, b << P
            while t < tiles:
                mine.append(t)
                k += 1
                t = ((b + (k >> P) * grid) << P) + (k & P)
            assert P or mine == [b], (tiles, grid, b, mine)
            seen += mine
        assert sorted(seen) == list(range(tiles))
    for tiles2 in (1, 2, 5, 8):  # the pair order is a permutation of the query blocks
        assert sorted(j // 2 if j % 2 else tiles2 - 1 - j // 2 for j in range(tiles2)) == list(
            range(tiles2)
        )


WG3 = ROOT / "tests/mappings/full" / FA3 / "h100_d64_wg3_staged_persistent.yaml"


def _walk(tmp_path: Path, cu: str, shapes) -> dict:
    """Run the kernel's own tile walk (its ``tile_coords`` lambda and its tile loop, compiled
    for the host) for each (tiles0, tiles1, tiles2, grid): the block of each tile visited."""
    lam = re.search(r"\n(\s*auto tile_coords = \[&\].*?\n\s*\};)\n", cu, re.S).group(1)
    loop = re.search(r"for \(int k = 0, t = blockIdx\.x << P;.*?\) \{", cu).group(0)
    loop = loop.replace("blockIdx.x", "b").replace("gridDim.x", "grid")
    walk = "    const int P = num_tiles > grid;  // the launcher's choice of kPairs"
    src = tmp_path / "walk.cpp"
    src.write_text(
        "#include <cstdio>\n#include <cstdlib>\nint main(int argc, char** argv) {\n"
        "  const int tiles0 = atoi(argv[1]), tiles1 = atoi(argv[2]), tiles2 = atoi(argv[3]);\n"
        "  const int grid = atoi(argv[4]), num_tiles = tiles0 * tiles1 * tiles2;\n"
        f"{lam}\n  for (int b = 0; b < grid; ++b) {{\n{walk}\n    {loop}\n"
        "      int b0, b1, b2;\n      tile_coords(t, b0, b1, b2);\n"
        '      printf("%d %d %d %d\\n", b, b0, b1, b2);\n    }\n  }\n}\n'
    )
    exe = tmp_path / "walk"
    subprocess.run(
        [shutil.which("g++") or "c++", "-std=c++17", "-O1", str(src), "-o", str(exe)], check=True
    )
    out = {}
    for shape in shapes:
        run = subprocess.run(
            [str(exe), *map(str, shape)], check=True, capture_output=True, text=True
        )
        out[shape] = [tuple(map(int, line.split())) for line in run.stdout.splitlines()]
    return out


@pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None, reason="no host C++ compiler"
)
def test_the_pairs_of_an_odd_row_stay_balanced(tmp_path):
    """Three consumer warpgroups take 192-row tiles: seq 2048 has 11 per (batch, head) row.
    Pairs straddling two rows would give every block of a 132-block grid (12 x 11) the same
    pair each time (long + long or short + short: max/mean block work 1.4 by trip counts); the
    walk pairs an odd row's tiles two rows at a time, the two middle tiles together.  The
    kernel's own walk, compiled for the host: every tile once, blocks within 10 % of the mean."""
    cu = _cu(tmp_path, WG3)
    shapes = [
        (8, 32, 11, 132),
        (8, 32, 11, 131),
        (1, 3, 11, 4),
        (2, 5, 7, 3),
        (3, 1, 1, 2),
        (4, 4, 8, 132),
        (1, 1, 5, 1),
    ]
    for shape, visits in _walk(tmp_path, cu, shapes).items():
        t0, t1, t2, grid = shape
        assert sorted(v[1:] for v in visits) == [
            (a, b, c) for a in range(t0) for b in range(t1) for c in range(t2)
        ], shape
        work = [0] * grid
        for b, _, _, b2 in visits:
            work[b] += b2 + 1  # the causal trip count grows with the query block
        if shape[:3] == (8, 32, 11):
            assert max(work) / (sum(work) / grid) < 1.1, (shape, max(work), sum(work) / grid)


def test_a_one_tile_block_has_no_next_tile_to_release_to(tmp_path):
    """``persistent: false``: each block runs one tile, no tile edge, no empty barrier for Q."""
    m = _snaps(PLAIN)["sync-insertion"]
    assert not [
        b
        for b in _top(m, S.MBarrier)
        if b.kind == "empty" and b.name in ("empty_Q_smem", "empty_V_smem_1")
    ]
    cu = _cu(tmp_path, PLAIN)
    assert "tphase" not in cu and "empty_Q_smem" not in cu
    assert "t += num_tiles" in cu


def test_ping_pong_turns_do_not_run_into_the_next_tile():
    """With ping-pong, the last warpgroup hands warpgroup 0 each tile's first turn.  Were
    warpgroup 0 to pass it to itself (the one-tile protocol), it could start the next tile's
    turns while the last warpgroup still waits for this tile's last one, and complete that
    warpgroup's barrier with two passes; two tiles of one block find it."""
    snaps = _snaps(ROOT / "tests/mappings/full" / FA3 / "h100_d128_pp_persistent.yaml")
    m = snaps["sync-insertion"]
    start = m.body.ops[0]
    assert isinstance(start, S.Turn) and start.kind == "pass"
    assert start.when == S.Guard(N.IProc("WARPGROUP"), N.IConst(1))  # the last of two warpgroups
    sizes = two_tile_sizes(m, {**small_sizes(m), "causal": 0})
    ok = check_schedules(
        m,
        snaps["warp-specialization"],
        sizes=sizes,
        seed=11,
        schedules=20,
        value_every=0,
        persistent=True,
    )
    assert ok.finding is None, ok.line(FA3)
    one_tile = replace(start, when=S.Guard(N.IConst(0), N.IProc("WARPGROUP")))  # warpgroup 0 itself
    mutant = replace(m, body=N.Block((one_tile, *m.body.ops[1:]), m.body.yields))
    bad = check_schedules(
        mutant,
        snaps["warp-specialization"],
        sizes=sizes,
        seed=11,
        schedules=20,
        value_every=0,
        persistent=True,
    )
    assert (
        bad.finding is not None
        and bad.finding.kind == "race"
        and "turn barrier" in bad.finding.message
    ), bad


# ----------------------------------------------------------------------------- the peeled K tile and the last V tile share bytes
def test_a_persistent_block_shares_the_peeled_k_tiles_bytes_with_the_last_v_tile():
    """With O staged, d = 128 needs 32 KiB more than a block has.  The peeled K tile (copied
    first in the tile, read by S = Q·K[0]ᵀ) and the last V tile (copied after the main loop)
    are both TMA-loaded once per tile outside every loop: of the pairs that qualify, that one
    wins, and the staged O tile keeps bytes of its own."""
    res = _snaps(STAGED)["resource-allocation"].resources
    assert {frozenset(p) for p in res.war} == {frozenset(("K_smem", "V_smem_1"))}
    k, v, o = res.smem["K_smem"], res.smem["V_smem_1"], res.smem["O_smem"]
    assert k.offset == v.offset and k.bytes == v.bytes == 32768
    for t in (k, v):  # O's bytes overlap neither
        assert o.offset + o.bytes <= t.offset or t.offset + t.bytes <= o.offset, (o, t)
    others = [n for n in res.smem if n not in ("K_smem", "V_smem_1")]
    spans = sorted(
        (res.smem[n].offset, res.smem[n].offset + res.smem[n].bytes) for n in others + ["K_smem"]
    )
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # nothing else shares
    plain = _snaps(PERSISTENT)["resource-allocation"].resources
    assert not plain.war  # everything fits: nothing shares
    spans = sorted((s.offset, s.offset + s.bytes) for s in plain.smem.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    end = lambda r: max(s.offset + s.bytes for s in r.smem.values())  # noqa: E731
    assert end(res) == end(plain)  # O takes the 32 KiB the shared pair frees


def test_the_last_v_copy_waits_for_s_q_k0_to_retire():
    """The copy of the last V tile overwrites the peeled K tile's bytes: a ``war`` edge from
    S = Q·K[0]ᵀ (outside the loop) to that copy, realized by a one-stage empty barrier of this
    tile (its wait trails no phase: parity 0).  Each consumer warpgroup arrives once the
    ``wait_group wgmma 0`` after S = Q·K[0]ᵀ retired it; no 256-thread barrier is left."""
    m = _snaps(STAGED)["sync-insertion"]
    ops = list(m.body.ops)
    bar = next(o for o in _top(m, S.MBarrier) if o.name == "free_V_smem_1")
    assert bar.kind == "empty" and bar.stages == 1 and bar.same_tile and bar.lag == 0
    assert bar.count == 2  # one arrival per consumer warpgroup
    assert bar.arrive_role == ("consumer",) and bar.wait_role == ("producer",)
    v = _copy(m, "V_smem_1")
    assert bar.channel == (v.ev,)
    (arrive,) = [o for o in _top(m, S.Arrive) if o.bar == "free_V_smem_1"]
    assert arrive.when is None and arrive.role == "consumer"
    assert {(e.hazard, e.dst, e.tensor, e.via) for e in arrive.edges} == {
        ("war", v.ev, "K_smem", "same")
    }
    (src,) = {e.src for e in arrive.edges}
    qk = next(o for o in _top(m, N.Call) if o.ev == src)  # top level: outside the loop
    assert qk.fn == "warpgroup_mma_bt"
    assert qk is next(
        o for o in _top(m, N.Call) if o.fn == "warpgroup_mma_bt"
    )  # the first: S = Q·K[0]ᵀ
    retire = next(o for o in ops[ops.index(qk) :] if isinstance(o, S.WaitGroup))
    assert retire.unit == "wgmma" and retire.pending == 0
    assert ops.index(qk) < ops.index(retire) < ops.index(arrive)
    (wait,) = [o for o in _top(m, S.Wait) if o.bar == "free_V_smem_1"]
    assert wait.role == "producer" and wait.parity == N.IConst(0) and wait.edges == arrive.edges
    assert ops.index(wait) < ops.index(v)
    assert not [
        o for o in ops[ops.index(wait) : ops.index(v)] if isinstance(o, N.Copy)
    ]  # right before the V copy
    # the peeled K copy is handed to the next tile after the last O += P·V (its bytes are V's)
    names = {b.name for b in _top(m, S.MBarrier)}
    assert "empty_K_smem" in names
    assert not [o for o in _top(m, S.BarSync) if o.threads == 256]


def _drop(m: N.Module, op) -> N.Module:
    return replace(m, body=N.Block(tuple(o for o in m.body.ops if o is not op), m.body.yields))


def _two_tiles(snaps, mutant):
    m = snaps["sync-insertion"]
    return [
        check_schedules(
            mutant,
            snaps["warp-specialization"],
            sizes=two_tile_sizes(m, base),
            seed=s,
            schedules=20,
            value_every=0,
            persistent=True,
        ).finding
        for base in ({**small_sizes(m), "causal": 0}, {**small_sizes(m, wraps=0), "causal": 0})
        for s in (0, 11)
    ]


def test_dropping_the_k_tiles_release_to_the_v_copy_is_refused_and_raced():
    snaps = _snaps(STAGED)
    m = snaps["sync-insertion"]
    assert _two_tiles(snaps, m) == [None] * 4  # the unmutated block is clean
    wait = next(o for o in _top(m, S.Wait) if o.bar == "free_V_smem_1")
    mutant = _drop(m, wait)
    with pytest.raises(VerifyError, match=r"the copy does not wait for phase 0 of %free_V_smem_1"):
        verify_sync(mutant)
    found = _two_tiles(snaps, mutant)
    assert any(
        f is not None and f.kind == "race" and ("V_smem_1" in f.message or "K_smem" in f.message)
        for f in found
    ), found
    arrive = next(o for o in _top(m, S.Arrive) if o.bar == "free_V_smem_1")
    mutant = _drop(m, arrive)
    with pytest.raises(
        VerifyError, match=r"waits for phase 0 of %free_V_smem_1\[0\], which completes 0"
    ):
        verify_sync(mutant)
    found = _two_tiles(snaps, mutant)  # nobody releases the bytes: the producer waits forever
    assert any(
        f is not None and f.kind == "deadlock" and "free_V_smem_1" in f.message for f in found
    ), found


def test_the_interpreter_sees_the_shared_bytes():
    """Without the wait on ``free_V_smem_1`` one tile suffices when the key loop runs no step:
    the last V copy follows the peeled K copy at once and overwrites K[0] while S = Q·K[0]ᵀ may
    still read it; only a model of the shared bytes sees it (the copies are of different
    tensors)."""
    snaps = _snaps(STAGED)
    m = snaps["sync-insertion"]
    wait = next(o for o in _top(m, S.Wait) if o.bar == "free_V_smem_1")
    mutant = _drop(m, wait)
    sizes = {**small_sizes(m, wraps=0), "causal": 0}
    ok = check_schedules(
        m, snaps["warp-specialization"], sizes=sizes, seed=0, schedules=20, value_every=0
    )
    assert ok.finding is None, ok.line(FA3)
    v = check_schedules(
        mutant, snaps["warp-specialization"], sizes=sizes, seed=0, schedules=20, value_every=0
    )
    assert v.finding is not None and v.finding.kind == "race" and "K_smem" in v.finding.message, (
        v.finding
    )
    assert "%e7" in v.finding.message  # the reader: S = Q·K[0]ᵀ


def test_the_staged_kernel_loads_the_last_v_tile_into_the_k_tiles_bytes(tmp_path):
    cu = _cu(tmp_path, STAGED)
    off = lambda name: cu.split(f"uint8_t* {name} = smem + ", 1)[1].split(";", 1)[0]  # noqa: E731
    assert off("s_K_smem") == off("s_V_smem_1")
    # each warpgroup's 64 rows of O: a staging tile named by its offset constants
    staged = re.search(r"constexpr int (\w+)_SMEM = (\d+), \1_TILE = 16384;", cu)
    assert f"uint8_t* box = smem + {staged[1]}_SMEM + cw * {staged[1]}_TILE + " in cu
    o = staged[2]
    assert o.isdigit() and o != off("s_V_smem_1")
    assert o not in {
        off(n) for n in ("s_Q_smem", "s_K_smem_1", "s_V_smem")
    }  # O's bytes are its own
    producer = cu[cu.index("// ---- producer warpgroup") : cu.index("// ---- consumer warpgroups")]
    w = producer.index("cypress::wait(&free_V_smem_1[0], 0 ^ tphase);")
    assert w < producer.index("cypress::tma_load_3d(s_V_smem_1")
    assert "cypress::tma_load_3d(s_V_smem_1" not in producer[:w]
    consumer = cu[cu.index("// ---- consumer warpgroups") :]
    qk = consumer.index("// %e7: warpgroup_mma")
    retire = consumer.index("cypress::wait<0>();", qk)
    a = consumer.index("cypress::arrive(&free_V_smem_1[0]);")
    assert qk < retire < a and consumer.count("cypress::arrive(&free_V_smem_1[0]);") == 1
    assert "cypress::commit();" not in consumer[retire:a]  # no other group in between
    assert "named_sync(1, 256)" not in cu and ", 256);" not in cu


def test_a_reader_in_the_loop_releases_the_shared_bytes_after_it(monkeypatch):
    """Were the Q panel (read by S = Q·Kᵀ in every step of the key loop) to share its bytes
    with the last V tile, the V copy's ``free`` barrier would wait for the loop's reads (``via
    after``): released in the loop's last step once its S = Q·Kᵀ retired, and after the loop
    when it runs no step — accepted by the verifier (which once looked for the read at the
    copy's own step and refused)."""
    import cypressc.passes.resource_allocation as ra

    real = ra.resource_allocation

    def forced(m):
        m = real(m)
        return replace(m, resources=replace(m.resources, war=(("Q_smem", "V_smem_1"),)))

    monkeypatch.setattr(ra, "resource_allocation", forced)
    tree = instantiate(
        check_program(parse_file(ROOT / "programs" / f"{FA3}.cyp")), load_mapping(STAGED)
    )
    m = dict(compile_module(tree, until="sync-insertion"))["sync-insertion"]  # verifies the sync
    (arrive,) = [o for o in _top(m, S.Arrive) if o.bar == "free_V_smem_1"]
    assert {(e.via, e.tensor) for e in arrive.edges} == {("same", "Q_smem"), ("after", "Q_smem")}
    ops = list(m.body.ops)
    loop = next(o for o in ops if isinstance(o, N.For))
    assert ops.index(arrive) > ops.index(loop) and arrive.when is not None  # the loop ran no step
    inner = [o for o in loop.body.ops if isinstance(o, S.Arrive) and o.bar == "free_V_smem_1"]
    assert len(inner) == 1 and inner[0].when is not None  # its last step
    verify_sync(m)


def test_without_a_producer_role_o_shares_the_last_v_tiles_bytes(tmp_path):
    """``warpspecialize: false``: one role issues the copies and reads the tiles, so a copy
    cannot wait on a release of its own role's reads; resource allocation keeps O over the last
    V tile (the next V copy waits for the O store's reads) and the kernel builds."""
    mapping = tmp_path / "nows.yaml"
    mapping.write_text(STAGED.read_text().replace("warpspecialize: true", "warpspecialize: false"))
    snaps = _snaps(mapping)
    assert {frozenset(p) for p in snaps["resource-allocation"].resources.war} == {
        frozenset(("V_smem_1", "O_smem"))
    }
    m = snaps["sync-insertion"]
    assert not [b for b in _top(m, S.MBarrier) if b.same_tile]
    wait = next(o for o in _top(m, S.WaitGroup) if o.unit == "bulk")
    arrive = next(o for o in _top(m, S.Arrive) if o.bar == "empty_V_smem_1")
    assert list(m.body.ops).index(wait) < list(m.body.ops).index(arrive)
    cu = _cu(tmp_path, mapping)  # and lowers to CUDA
    assert "free_V_smem_1" not in cu and "cypress::arrive(&empty_V_smem_1[0])" in cu
