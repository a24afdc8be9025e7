"""The concurrent interpreter (cypressc/ir/concurrent.py) on the synchronized IR: every
bundled program x mapping is clean under 50 random schedules (one of them with values,
compared with the sequential interpreter; ``make test-full``: 200, four with values; ``make
test`` checks one mapping of each set whose synchronized IR differs only in sizes), and
removing any one sync op that ``sync-insertion`` inserted is caught (issue #10 items 3
and 4)."""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.concurrent import op_label as _where
from cypressc.ir.hazards import Program
from cypressc.ir.schedule_check import check_schedules, small_sizes, two_tile_sizes
from cypressc.ir.sync_verify import verify_sync
from cypressc.ir.verify import VerifyError
from cypressc.lang.intrinsics import leaf_of
from cypressc.ir.printer import print_module
from tests.budget import FULL, pick
from tests.compiled import modules, tree

ROOT = Path(__file__).resolve().parents[2]
SCHEDULES = pick(50, 200)
TILE_SCHEDULES = pick(20, 80)  # two tiles of a persistent block (each schedule runs twice the ops)
VALUES = pick(1, 4)  # schedules that also compare values with the sequential interpreter, per check
PROVEN_SCHEDULES = (
    5  # teeth: for an op whose removal may survive (a proof, a blind spot), for the table
)
PAIRS = sorted(
    (p.stem, m.relative_to(ROOT).as_posix())
    for p in (ROOT / "programs").glob("*.cyp")
    for m in (ROOT / "tests/mappings/full" / p.stem).glob("*.yaml")
)
# test programs (tests/programs, by path): a GLOBAL->SHARED copy before the main loop; two
# wgmmas per step, the second's A operand converted from the first's result in registers; two
# pipelined main loops in one block; an A operand stored K x M, read MN-major; a wgmma's
# result written by the threads into a shared tile that a later wgmma of the step reads (one
# warpgroup, and two that write and read across each other)
PAIRS += [
    ("tests/programs/gemm_resident_a.cyp", "tests/mappings/gemm_resident_a.yaml"),
    ("tests/programs/chain_gemm.cyp", "tests/mappings/chain_gemm.yaml"),
    ("tests/programs/gemm_two_loops.cyp", "tests/mappings/gemm_two_loops_small.yaml"),
    ("tests/programs/gemm_at.cyp", "tests/mappings/gemm_at.yaml"),
    ("tests/programs/chain_stage.cyp", "tests/mappings/chain_stage.yaml"),
    ("tests/programs/chain_stage.cyp", "tests/mappings/chain_stage_wgs2.yaml"),
]

# Sync ops the interpreter cannot see missing, and why; each must still be refused by the verifier.
MODEL_BLIND = {
    S.SyncWarp: "orders the lanes of one warp; the interpreter runs the lanes and warps of a warpgroup "
    "in lockstep (one thread of control per warpgroup), so their order is not modelled",
    S.BarSync: "a named barrier of 128 threads orders the 4 warps of one warpgroup, which the "
    "interpreter runs in lockstep",
}


def _snaps(program: str, mapping: str) -> dict[str, N.Module]:
    return modules(program, mapping, until="sync-insertion")


@functools.lru_cache(maxsize=None)
def _signature(program: str, mapping: str) -> str:
    """The synchronized block program with every number of 16 or more erased from its other
    lines: tile extents, sizes, byte offsets and expected bytes go; every number on a named
    barrier (its thread count), an mbarrier declaration (its arrival count) or an arrival
    stays, and so do stage counts, wait_group depths, barrier ids, warpgroup and warp counts
    and loop distances (and every op, edge, role and guard)."""
    text = re.sub(r"WGMMA_\w+", "ATOM", print_module(_snaps(program, mapping)["sync-insertion"]))
    keep = re.compile(r"^\s*(bar_sync|arrive |%\w+ = mbarrier)")
    return "\n".join(
        line
        if keep.match(line)
        else re.sub(r"\b\d+\b", lambda x: x.group() if int(x.group()) < 16 else "N", line)
        for line in text.splitlines()
    )


def _twin(program: str, mapping: str) -> str | None:
    """Under ``make test``, an earlier mapping of ``program`` in PAIRS whose synchronized IR is
    this one's up to sizes (:func:`_signature`; a head-dimension-64 twin of a 128 one): its
    check exercises every op and edge of this one.  None under ``make test-full``."""
    if FULL:
        return None
    for p, m in PAIRS:
        if (p, m) == (program, mapping):
            return None
        if p == program and _signature(p, m) == _signature(program, mapping):
            return m
    return None


@functools.lru_cache(maxsize=None)
def _persistent(program: str, mapping: str) -> bool:
    block = tree(program, mapping).block_node()
    return bool(block is not None and block.instance.persistent)


def _tile_sizes(program: str, m: N.Module) -> list[dict]:
    """Sizes for two tiles run back to back by one persistent block: the pipelines wrap twice
    in each, and (second) the pipelined loops do not run at all, so the copies after the
    loop follow the ones before it at once (no loop step orders them)."""
    flags = FLAGS.get(Path(program).stem, {})
    out = [
        two_tile_sizes(m, _sizes(program, m)),
        two_tile_sizes(m, {**small_sizes(m, wraps=0), **flags}),
    ]
    assert out[0] is not None, "no size gives a persistent block two tiles"
    return [x for x in out if x is not None]


def _sync_ops(b: N.Block):
    for op in b.ops:
        if isinstance(op, S.SYNC_OPS) and not isinstance(op, S.MBarrier):
            yield op
        if isinstance(op, (N.For, N.PFor)):
            yield from _sync_ops(op.body)


def _drop(b: N.Block, victim) -> N.Block:
    ops = []
    for op in b.ops:
        if op is victim:
            continue
        if isinstance(op, (N.For, N.PFor)):
            op = replace(op, body=_drop(op.body, victim))
        ops.append(op)
    return N.Block(tuple(ops), b.yields)


def _last_release(b: N.Block, op) -> bool:
    """Proof that ``op`` (an arrive) is redundant in a block: no wait on its barrier comes
    after it in program order, and no loop around it waits on that barrier (nothing ever
    observes the phase it would complete: the block ends)."""
    if not isinstance(op, S.Arrive):
        return False
    seen, ok = [False], [True]

    def walk(blk: N.Block, loops: list[N.Block]) -> None:
        for o in blk.ops:
            if o is op:
                seen[0] = True
                if any(
                    isinstance(w, S.Wait) and w.bar == op.bar for lp in loops for w in _sync_ops(lp)
                ):
                    ok[0] = False
            elif isinstance(o, S.Wait) and o.bar == op.bar and seen[0]:
                ok[0] = False
            if isinstance(o, (N.For, N.PFor)):
                walk(o.body, loops + [o.body])

    walk(b, [])
    return seen[0] and ok[0]


def _blocks(b: N.Block):
    yield b
    for o in b.ops:
        if isinstance(o, (N.For, N.PFor)):
            yield from _blocks(o.body)


def _fence_for_ptxas(m: N.Module, op) -> bool:
    """A wgmma fence whose edges an earlier fence of its role in the same block also
    covers, with an mbarrier wait between the two: the wait's loop is control flow, after
    which ptxas no longer counts the earlier fence for the next wgmma and inserts its own
    warpgroup.arrive (warning C7519) -- tests/backend/test_ptxas_fences.py shows both."""
    if not (isinstance(op, S.Fence) and op.kind == "wgmma"):
        return False
    home = next(blk for blk in _blocks(m.body) if any(o is op for o in blk.ops))
    before = home.ops[: [i for i, o in enumerate(home.ops) if o is op][0]]
    fences = [
        i
        for i, o in enumerate(before)
        if isinstance(o, S.Fence) and o.kind == "wgmma" and o.role == op.role
    ]
    return bool(fences) and any(isinstance(o, S.Wait) for o in before[fences[-1] :])


def _retires_for_last_release(m: N.Module, op) -> str | None:
    """Proof that a ``wait_group`` is redundant in one tile: every edge it realizes is one that
    a later arrive of its block realizes too, and that arrive is a last release
    (:func:`_last_release`, nothing in the block waits on it).  The group is retired only so
    that the stage can be released for a next tile, which a persistent block has and the
    per-tile IR does not show.  Returns the arrive's barrier."""
    if not isinstance(op, S.WaitGroup) or not op.edges:
        return None
    home = next(blk for blk in _blocks(m.body) if any(o is op for o in blk.ops))
    after = home.ops[[i for i, o in enumerate(home.ops) if o is op][0] + 1 :]
    last = [a for a in after if isinstance(a, S.Arrive) and _last_release(m.body, a)]
    covered = {(e.src, e.dst, e.tensor) for a in last for e in a.edges}
    if last and all((e.src, e.dst, e.tensor) in covered for e in op.edges):
        return last[0].bar
    return None


def _fence_between_wgmmas(m: N.Module, op) -> bool:
    """A wgmma fence all of whose edges run from a wgmma to a wgmma on one accumulator: the
    Tensor Core orders those itself (the interpreter agrees), but the accumulator is carried
    through C++ registers between them (across the loop's back edge or from an earlier loop),
    and without the fence ptxas inserts its own warpgroup.arrive (C7519;
    tests/backend/test_ptxas_fences.py)."""
    if not (isinstance(op, S.Fence) and op.kind == "wgmma" and op.edges):
        return False
    mma = {
        o.ev
        for blk in _blocks(m.body)
        for o in blk.ops
        if isinstance(o, N.Call) and leaf_of(o).collective is not None
    }
    return all(e.src in mma and e.dst in mma for e in op.edges)


def _ring_member_wait_implied(m: N.Module, op) -> str | None:
    """Proof that the wait of a stage ring's member copy before its loop (a peeled K[0] in the K
    ring, cypressc/passes/rings.py) is implied: its first fill in a tile passes at once (a
    member before the loop takes a position below the ring's depth), and every edge it carries
    runs from a reader that also reads a tensor copied once per tile whose next-tile empty wait
    the same role passes earlier in the tile (the Q panel: its readers release it after those
    reads).  Returns why, as the teeth table prints it."""
    if (
        not isinstance(op, S.Wait)
        or op.role != "producer"
        or not op.edges
        or any(e.via != "ring" for e in op.edges)
    ):
        return None
    prog = Program(m)
    if not any(lf.op.ev == e.dst for e in op.edges for lf in prog.rings().get(e.tensor, [])):
        return None
    ops = list(m.body.ops)
    if not any(o is op for o in ops):
        return None
    if not m.schedule.persistent:  # one tile per block: the stage's first fill, on a fresh barrier
        return "proven redundant: the block's first fill of the stage, whose wait passes at once"
    earlier = [
        w
        for w in ops[: [i for i, o in enumerate(ops) if o is op][0]]
        if isinstance(w, S.Wait)
        and w.role == op.role
        and all(e.via == "tile" for e in w.edges)
        and w.edges
    ]
    for w in earlier:
        if {e.src for e in op.edges} <= {e.src for e in w.edges}:
            return (
                f"proven redundant in this program: its readers also read the tile %{w.bar} "
                "releases to the next tile, which the producer waits for first"
            )
    return None


def _implied_wait(m: N.Module, op) -> str | None:
    """Proof that a wait on an empty barrier is implied by an earlier wait of the same role
    on another empty barrier, same stage and parity, whose consumers arrive right before
    they arrive on this one (adjacent arrivals, same stage, guard and count): observing the
    first phase means the readers this one waits for have been released.  Returns the
    other barrier's name."""
    if not isinstance(op, S.Wait):
        return None
    bars = {o.name: o for blk in _blocks(m.body) for o in blk.ops if isinstance(o, S.MBarrier)}
    home = next(blk for blk in _blocks(m.body) if any(o is op for o in blk.ops))
    before = home.ops[: [i for i, o in enumerate(home.ops) if o is op][0]]
    for w in before:
        if not (
            isinstance(w, S.Wait)
            and w.role == op.role
            and w.bar != op.bar
            and w.stage == op.stage
            and w.parity == op.parity
            and bars[w.bar].count == bars[op.bar].count
            and bars[w.bar].kind == bars[op.bar].kind == "empty"
        ):
            continue
        pairs = [
            (a, b)
            for blk in _blocks(m.body)
            for a, b in zip(blk.ops, blk.ops[1:])
            if isinstance(a, S.Arrive) and isinstance(b, S.Arrive)
        ]
        mine = [
            b
            for blk in _blocks(m.body)
            for b in blk.ops
            if isinstance(b, S.Arrive) and b.bar == op.bar
        ]
        if mine and all(
            any(
                a.bar == w.bar
                and y is b
                and a.stage == b.stage
                and a.when == b.when
                and a.dims == b.dims
                for a, y in pairs
            )
            for b in mine
        ):
            return w.bar
    return None


def test_sizes_wrap_every_pipeline_twice():
    m = _snaps("gemm", "tests/mappings/full/gemm/h100.yaml")["sync-insertion"]
    # K tile 64, 3 stages: 2 wraps = 6 iterations; one 128 x 256 block
    assert small_sizes(m) == {"M": 128, "N": 256, "K": 384}


# int parameters that select a shorter loop (the flag's 1): pinned so every pipeline wraps
FLAGS = {"flash_attention2": {"causal": 0}, "flash_attention3": {"causal": 0}}


def _sizes(program: str, m: N.Module) -> dict:
    return {**small_sizes(m), **FLAGS.get(Path(program).stem, {})}


@pytest.mark.parametrize(
    "program,mapping", PAIRS, ids=[f"{Path(p).stem}-{Path(m).stem}" for p, m in PAIRS]
)
def test_every_program_and_mapping_is_clean(program, mapping):
    twin = _twin(program, mapping)
    if twin is not None:
        pytest.skip(f"the synchronized IR of {twin} up to sizes; make test-full checks it too")
    snaps = _snaps(program, mapping)
    v = check_schedules(
        snaps["sync-insertion"],
        snaps["warp-specialization"],
        seed=11,
        sizes=_sizes(program, snaps["sync-insertion"]),
        schedules=SCHEDULES,
        value_every=SCHEDULES // VALUES,
    )
    assert v.finding is None, v.line(program)
    assert v.schedules == SCHEDULES
    if _persistent(program, mapping):  # the kernel runs tiles back to back on one block
        for sizes in _tile_sizes(program, snaps["sync-insertion"]):
            v = check_schedules(
                snaps["sync-insertion"],
                snaps["warp-specialization"],
                seed=11,
                sizes=sizes,
                schedules=TILE_SCHEDULES,
                value_every=TILE_SCHEDULES // VALUES,
                persistent=True,
            )
            assert v.finding is None, v.line(program + " (two tiles of one persistent block)")


def test_causal_attention_blocks_of_different_trip_counts_are_clean():
    """``causal = 1``: a query block's key loop stops at its diagonal, so block 0 of M = 256
    runs 2 steps of 64 keys and block 1 runs 4 (its pipeline wraps); both run, values checked."""
    snaps = _snaps("flash_attention2", "tests/mappings/full/flash_attention2/h100_d64_w64.yaml")
    m = snaps["sync-insertion"]
    sizes = {**small_sizes(m), "causal": 1, "M": 256, "N": 256}
    v = check_schedules(
        m, snaps["warp-specialization"], sizes=sizes, seed=3, schedules=10, value_every=5
    )
    assert v.finding is None, v.line("flash_attention2")
    assert v.schedules == 10


def _verdict(
    mutant: N.Module,
    ref: N.Module,
    sizes: dict | None = None,
    tiles: list[dict] = (),
    schedules: int = SCHEDULES,
    tile_schedules: int = TILE_SCHEDULES,
) -> str | None:
    """The first finding on one tile at ``sizes``, else on two tiles of one persistent block at
    each of ``tiles``."""
    v = check_schedules(mutant, ref, sizes=sizes, seed=0, schedules=schedules, value_every=0)
    for t in tiles:
        if v.finding is not None:
            break
        v = check_schedules(
            mutant, ref, sizes=t, seed=0, schedules=tile_schedules, value_every=0, persistent=True
        )
        if v.finding is not None:
            return f"{v.finding.kind} at {v.finding.event} (seed {v.seed}, two tiles)"
    return None if v.finding is None else f"{v.finding.kind} at {v.finding.event} (seed {v.seed})"


def _why_it_may_survive(m: N.Module, op) -> str | None:
    """Why removing ``op`` may go unseen by the concurrent interpreter: a blind spot of its
    model (:data:`MODEL_BLIND`), a proof that the op is redundant, or ptxas; else None."""
    reason = MODEL_BLIND.get(type(op))
    if _last_release(m.body, op):
        reason = (
            f"proven redundant: no wait on %{op.bar} follows this last release "
            "and no loop repeats it (the block ends)"
        )
    elif _fence_for_ptxas(m, op):
        reason = (
            "kept for ptxas: an earlier fence covers its edges, but an mbarrier wait's "
            "loop lies between; without it ptxas inserts a warpgroup.arrive (C7519)"
        )
    elif _fence_between_wgmmas(m, op):
        reason = (
            "kept for ptxas: its edges all run wgmma -> wgmma on one accumulator, which the "
            "Tensor Core orders; without it ptxas inserts a warpgroup.arrive (C7519)"
        )
    elif (bar := _retires_for_last_release(m, op)) is not None:
        reason = (
            f"proven redundant in one tile: it retires the group only for the last release "
            f"on %{bar}, which nothing in the block waits on (a persistent block's next tile does)"
        )
    elif (why := _ring_member_wait_implied(m, op)) is not None:
        reason = why
    elif (other := _implied_wait(m, op)) is not None:
        reason = (
            f"proven redundant: implied by the wait on %{other} (same stage and parity; "
            f"the consumers arrive on %{other} right before %{op.bar})"
        )
    return reason


@pytest.mark.parametrize(
    "program,mapping", PAIRS, ids=[f"{Path(p).stem}-{Path(m).stem}" for p, m in PAIRS]
)
def test_teeth_every_inserted_sync_op_is_needed(program, mapping, capsys):
    snaps = _snaps(program, mapping)
    m, ref = snaps["sync-insertion"], snaps["warp-specialization"]
    rows, bad = [], []
    ops = list(_sync_ops(m.body))
    assert len(ops) >= 6, "sync-insertion inserted suspiciously few sync ops"
    tiles = _tile_sizes(program, m) if _persistent(program, mapping) else []
    sizes = _sizes(program, m)
    for op in ops:
        mutant = replace(m, body=_drop(m.body, op))
        try:
            verify_sync(mutant)
            refused = "accepted"
        except VerifyError as e:
            refused = "refused: " + str(e).split(":", 2)[-1].strip()[:60]
        reason = _why_it_may_survive(m, op)
        # an op with a reason passes whether or not its removal is caught: a few schedules
        # only fill the table's column (issue #34: the full count where the verdict decides)
        few = reason is not None
        caught = _verdict(
            mutant,
            ref,
            sizes,
            tiles,
            schedules=PROVEN_SCHEDULES if few else SCHEDULES,
            tile_schedules=PROVEN_SCHEDULES if few else TILE_SCHEDULES,
        )
        if caught is None and reason is None:  # last chance: do the values still come out right?
            v = check_schedules(mutant, ref, seed=0, schedules=1, value_every=1)
            if v.finding is not None:
                caught = f"{v.finding.kind} at {v.finding.event} (seed {v.seed})"
        if caught is None:
            blind = reason is not None and reason == MODEL_BLIND.get(type(op))
            if reason is None or (blind and refused == "accepted"):  # blind spots need the verifier
                bad.append(_where(op))
            caught = f"SURVIVES the interpreter ({reason or 'no reason: a bug'})"
        rows.append(f"  {_where(op):<44} -> {caught} | verifier {refused}")
    with capsys.disabled():
        print(
            f"\nteeth, {program} under {mapping}: op removed -> what caught it\n" + "\n".join(rows)
        )
    assert not bad, f"sync ops whose removal nothing catches: {bad}"


def test_missing_accumulator_init_is_a_mismatch():
    """A wrong value with correct synchronization: only the comparison can catch it."""
    snaps = _snaps("gemm", "tests/mappings/full/gemm/h100.yaml")
    m = snaps["sync-insertion"]
    fill = next(o for o in m.body.ops if isinstance(o, N.Call) and o.fn == "fill")
    v = check_schedules(
        replace(m, body=_drop(m.body, fill)),
        snaps["warp-specialization"],
        schedules=1,
        value_every=1,
    )
    assert v.finding is not None and v.finding.kind == "mismatch", v.line("gemm")


def test_cli_check_schedule():
    args = [
        "explain",
        "programs/gemm.cyp",
        "-m",
        "tests/mappings/full/gemm/h100_nows.yaml",
        "--check-schedule",
        "--seed",
        "5",
        "--schedules",
        "3",
    ]
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "programs/gemm.cyp: clean (3 schedule(s), sizes M=128 N=256 K=384)"
    assert r.stderr.startswith("checking programs/gemm.cyp: 3 random schedule(s) (seeds 5..7)")


def _swap(b: N.Block, old, new) -> N.Block:
    ops = []
    for op in b.ops:
        if isinstance(op, (N.For, N.PFor)):
            op = replace(op, body=_swap(op.body, old, new))
        ops.append(new if op is old else op)
    return N.Block(tuple(ops), b.yields)


@pytest.mark.parametrize("program", ["gemm", "gemm_reduction"])
def test_flipped_parity_or_short_wait_group_is_caught(program):
    """Not only missing ops: a wait on the wrong phase, or a wait_group leaving one group too
    many in flight, is a deadlock or a race too."""
    snaps = _snaps(program, f"tests/mappings/full/{program}/h100.yaml")
    m, ref = snaps["sync-insertion"], snaps["warp-specialization"]
    mutants = []
    for op in _sync_ops(m.body):
        if isinstance(op, S.Wait):
            flipped = N.ibin("%", N.ibin("+", op.parity, N.IConst(1)), N.IConst(2))
            mutants.append((op, replace(op, parity=flipped)))
        elif isinstance(op, S.WaitGroup) and op.unit == "wgmma":
            mutants.append((op, replace(op, pending=op.pending + 1)))
    assert len(mutants) >= 3
    for old, new in mutants:
        v = check_schedules(
            replace(m, body=_swap(m.body, old, new)), ref, schedules=SCHEDULES, value_every=0
        )
        assert v.finding is not None and v.finding.kind in ("race", "deadlock"), _where(old)


@pytest.mark.parametrize(
    "program,mapping", PAIRS, ids=[f"{Path(p).stem}-{Path(m).stem}" for p, m in PAIRS]
)
def test_every_conflicting_pair_is_ordered_by_synchronization(program, mapping):
    """The independent verifier (:mod:`cypressc.ir.happens_before`, issue #33): every pair of
    conflicting accesses of the block, over every iteration, two tiles of a persistent block
    and both values of the int flags, has a chain of sync ops between them."""
    from cypressc.ir.happens_before import check_happens_before

    m = _snaps(program, mapping)["sync-insertion"]
    assert check_happens_before(m) is None
    assert check_happens_before(m, sizes=_sizes(program, m)) is None
