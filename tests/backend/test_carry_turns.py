"""Ping-pong turns in a persistent block (``cypressc.backend.sync_lower.carry_turns``): the IR
passes each tile's first turn at the start of the tile (a ``turn pass`` from ``start``,
guarded ``cw >= WGS-1``) and the last warpgroup passes nothing after the tile's last run
(that pass is guarded ``WGS-2 >= cw``).  A persistent block runs the start pass once, before
its first tile (``plan.entry``), and for each next tile right after the last warpgroup's last
run of the tile before (guard ``cw >= WGS-1 && more``, ``more``: the block has another tile),
so that warpgroup 0 starts the next tile's GEMMs while the last warpgroup does its epilogue.

The transformation is made in the backend (``carry_turns(plan, ops)``, called by
``cuda_lowering`` for persistent blocks after ``defer_store_waits``), like
``defer_store_waits``.  The concurrent interpreter
(``cypressc.ir.schedule_check.check_schedules(..., persistent=True)``, which runs two tiles
of one block back to back, tests/backend/test_persistent_attention.py) and the sync verifier
run the synchronized IR (``N.Module.body``), never the ``KernelPlan``: the interpreter makes
the same move itself on the IR (the two ops of ``S.carried_turns``), so nothing it runs can
fail when the backend's move is missing or wrong.  Here instead: the kernel carries the very
ops ``S.carried_turns`` names, and the consumer code's turn ops are read back from the
generated CUDA (guards, the main loop, the tile loop) and run, per warpgroup, over a
block's tiles on a small model of named barriers (a take is ``bar.sync id, 256`` by one
warpgroup, a pass ``bar.arrive id, 256`` by another; a phase completes at 256 threads).
A block of the paired tile walk may get no tile at all (200 tiles on 132 blocks: blocks
100-131); its first pass is guarded by ``more`` too, and the model runs such a block.
"""

from __future__ import annotations

import copy
import functools
import random
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from cypressc.backend import plan as P
from cypressc.backend.cexpr import KVar, cexpr
from cypressc.backend.emit import emit_cuda
from cypressc.backend.sync_lower import MORE, carry_turns
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.printer import event_names
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module

ROOT = Path(__file__).resolve().parents[2]
FA2, FA3 = "flash_attention2", "flash_attention3"
PP_PERSISTENT = ROOT / "tests/mappings/full" / FA3 / "h100_d64_pp_staged_persistent.yaml"
PP_PLAIN = (
    ROOT / "tests/mappings/full" / FA3 / "h100_d64_pp_staged.yaml"
)  # the same mapping, one tile per block
WG3_PP = (
    ROOT / "tests/mappings/full" / FA3 / "h100_d128_wg3_pp.yaml"
)  # three consumer warpgroups, not persistent
# every mapping with `pingpong: true` and `persistent: true` (flash_attention2/h100.yaml is a link
# to h100_d128_pp_staged_persistent.yaml)
PP_MAPPINGS = [
    (FA3, "h100_d64_pp_staged_persistent"),
    (FA3, "h100_d128_pp_staged_persistent"),
    (FA3, "h100_d128_pp_persistent"),
    (FA2, "h100"),
    (FA2, "h100_d64_pp_staged_persistent"),
    (FA2, "h100_d128_pp_staged_persistent"),
]
TURN_THREADS = 256
CONSUMER = "// ---- consumer warpgroups"


@functools.lru_cache(maxsize=None)
def _lowered(program: str, mapping: str) -> N.Module:
    """The module after cuda-lowering: the synchronized IR (``body``) and its plan (``kernel``)."""
    tree = instantiate(
        check_program(parse_file(ROOT / "programs" / f"{program}.cyp")), load_mapping(Path(mapping))
    )
    return dict(compile_module(tree, until="cuda-lowering"))["cuda-lowering"]


def _plan(program: str, mapping: str) -> P.KernelPlan:
    return _lowered(program, mapping).kernel


@functools.lru_cache(maxsize=None)
def _cu(program: str, mapping: str) -> str:
    return emit_cuda(_plan(program, mapping))


def _mapping(program: str, name: str) -> str:
    return str(ROOT / "tests/mappings/full" / program / f"{name}.yaml")


@pytest.fixture(scope="module")
def wg3_persistent(tmp_path_factory) -> str:
    """h100_d128_wg3_pp.yaml (three consumer warpgroups) with ``persistent: true`` on the
    BLOCK instance that has ``pingpong: true``."""
    text = WG3_PP.read_text()
    assert text.count("pingpong: true}") == 1 and "persistent" not in text
    path = tmp_path_factory.mktemp("wg3") / "h100_d128_wg3_pp_persistent.yaml"
    path.write_text(text.replace("pingpong: true}", "pingpong: true, persistent: true}"))
    return str(path)


# ----------------------------------------------------------------------------- the consumer code's turns, read back
_TURN = re.compile(
    r"cypress::(named_sync|named_arrive)\((.+), (\d+)\);  // (.*Tensor Core turn.*)$"
)


@dataclass
class Turn:
    kind: str  # "take" (named_sync) or "pass" (named_arrive)
    bar: str  # the barrier id, a C expression over cw
    threads: int
    note: str  # the line's comment; the IR op's edges after _named (the plan's, not the CUDA's)


@dataclass
class Block:
    header: str  # the line that opens it, without the "{"
    body: list  # Turn | Block


def _consumer_tree(cu: str) -> list:
    """The consumer warpgroups' code as nested blocks holding only the turn ops (and the
    blocks around them): from the consumer banner to the brace closing its branch."""
    lines = cu[cu.index(CONSUMER) :].splitlines()[1:]
    root: list = []
    stack = [root]
    for raw in lines:
        code = raw.split("//", 1)[0].strip()
        opens, closes = code.count("{"), code.count("}")
        if code.startswith("}") and code.endswith("{"):  # } else {
            stack.pop()
            blk = Block(code.strip("{} "), [])
            stack[-1].append(blk)
            stack.append(blk.body)
        elif opens == closes + 1 and code.endswith("{"):
            blk = Block(code[:-1].strip(), [])
            stack[-1].append(blk)
            stack.append(blk.body)
        elif closes == opens + 1 and code == "}":
            stack.pop()
            if not stack:
                return root
        else:
            assert opens == closes, raw
            m = _TURN.search(raw.strip())
            if m:
                call, bar, threads, note = m.groups()
                stack[-1].append(
                    Turn("take" if call == "named_sync" else "pass", bar, int(threads), note)
                )
    raise AssertionError("the consumer branch does not close")


def _turn_nodes(nodes: list) -> list[Turn]:
    """The turn ops of ``nodes`` in text order."""
    return [x for n in nodes for x in ([n] if isinstance(n, Turn) else _turn_nodes(n.body))]


def _named(cu: str, m: N.Module) -> list:
    """:func:`_consumer_tree` of ``cu``, the kernel of ``m``, each turn op's note the edges of
    its IR op (``src -> dst`` by the event names ``cypressc explain`` prints, ``start`` for
    none): the plan's turn statements, in the order the emitter prints them (before the
    tile loop, before each tile's main loops, in and after each, after the tile loop), are
    the turn lines of the consumers' code, one each."""
    tree, names, plan = _consumer_tree(cu), event_names(m), m.kernel
    order = [*plan.entry, *plan.consumer.all(), *plan.issue_ahead, *plan.exit]
    ops = [st.op for st in order if isinstance(st, P.Sync) and isinstance(st.op, S.Turn)]
    lines = _turn_nodes(tree)
    assert len(ops) == len(lines), (len(ops), len(lines))
    for line, op in zip(lines, ops):
        assert line.kind == op.kind and line.threads == op.threads, (line, op)
        line.note = "; ".join(
            sorted(f"{names.get(e.src) or 'start'} -> {names.get(e.dst, e.dst)}" for e in op.edges)
        )
    return tree


def _has_turns(nodes: list) -> bool:
    return any(isinstance(n, Turn) or _has_turns(n.body) for n in nodes)


def _is_tile_loop(n) -> bool:
    return isinstance(n, Block) and n.header.startswith("for (") and "t < num_tiles" in n.header


def _split(tree: list) -> tuple[list, Block, list]:
    """(the code before the tile loop, the tile loop, the code after it)."""
    (i,) = [i for i, n in enumerate(tree) if _is_tile_loop(n)]
    return tree[:i], tree[i], tree[i + 1 :]


def _py(cond: str) -> str:
    assert "||" not in cond and "!" not in cond.replace("!=", ""), cond
    return cond.replace("&&", " and ")


def _run(nodes: list, env: dict, out: list, tile: int) -> None:
    """Append the turn ops one warpgroup runs in ``nodes`` under ``env`` (cw, more, num_k)
    as (kind, barrier id, tile)."""
    for n in nodes:
        if isinstance(n, Turn):
            assert n.threads == TURN_THREADS, n
            out.append((n.kind, eval(n.bar, {}, env), tile))
        elif not _has_turns(n.body):
            continue
        elif m := re.fullmatch(r"for \(int kb = 0; kb < (\w+); \+\+kb\)", n.header):
            for kb in range(env[m.group(1)]):
                _run(n.body, {**env, "kb": kb}, out, tile)
        elif m := re.fullmatch(r"if \((.*)\)", n.header):
            if eval(_py(m.group(1)), {}, env):
                _run(n.body, env, out, tile)
        else:
            raise AssertionError(f"turn ops under {n.header!r}")


def _events(cu: str, cw: int, trips: list[int]) -> list:
    """The turn ops warpgroup ``cw`` runs in a block whose tiles have main loops of ``trips``
    steps: (kind, barrier, tile) with tile -1 before the first tile, and ("end", None, i)
    after tile i's code."""
    entry, loop, exit_code = _split(_consumer_tree(cu))
    out: list = []
    _run(entry, {"cw": cw, "more": len(trips) > 0}, out, -1)
    for i, nk in enumerate(trips):
        _run(loop.body, {"cw": cw, "more": i + 1 < len(trips), "num_k": nk}, out, i)
        out.append(("end", None, i))
    _run(exit_code, {"cw": cw}, out, len(trips))
    return out


def _simulate(per_wg: list[list], base: int, pick) -> tuple[list, str | None]:
    """Run the warpgroups' turn ops on named barriers: ``pick(runnable)`` chooses the next
    warpgroup to step.  A phase must complete with one take by the barrier's warpgroup
    (``base + cw``) and one pass by the warpgroup before it in the ring.  Returns the log
    (("took", cw, tile) when a take's phase completes, ("end", cw, tile)) and the first
    failure (deadlock, a phase completed otherwise, an arrival left at the end), or None."""
    wgs = len(per_wg)
    pc, waiting, bars, log = [0] * wgs, [False] * wgs, {}, []
    while True:
        runnable = [w for w in range(wgs) if pc[w] < len(per_wg[w]) and not waiting[w]]
        if not runnable:
            if any(pc[w] < len(per_wg[w]) for w in range(wgs)):
                return log, f"deadlock: {[(w, per_wg[w][pc[w]]) for w in range(wgs) if waiting[w]]}"
            left = {b: a for b, a in bars.items() if a}
            return log, (f"arrivals left at the end: {left}" if left else None)
        w = pick(runnable)
        kind, bar, tile = per_wg[w][pc[w]]
        pc[w] += 1
        if kind == "end":
            log.append(("end", w, tile))
            continue
        arrived = bars.setdefault(bar, [])
        arrived.append((w, kind, tile))
        waiting[w] = kind == "take"
        if len(arrived) * 128 == TURN_THREADS:
            owner = bar - base
            if sorted((a[0], a[1]) for a in arrived) != sorted(
                [(owner, "take"), ((owner - 1) % wgs, "pass")]
            ):
                return log, f"a phase of barrier {bar} completed by {arrived}"
            for v, k, t in arrived:
                if k == "take":
                    waiting[v] = False
                    log.append(("took", v, t))
            arrived.clear()


def _start_base(plan: P.KernelPlan) -> int:
    (start,) = plan.entry
    return start.stage.value


# ----------------------------------------------------------------------------- 1. the persistent ping-pong kernel
def test_the_start_pass_runs_once_before_the_tile_loop_and_again_after_each_tiles_last_run():
    plan = _plan(FA3, str(PP_PERSISTENT))
    cu = _cu(FA3, str(PP_PERSISTENT))
    assert plan.persistent and plan.consumers == 2
    # the plan: the IR's start pass (its edges from "start") in entry, none left at the tile's start
    (start,) = plan.entry
    assert (
        isinstance(start.op, S.Turn)
        and start.op.kind == "pass"
        and all(not e.src for e in start.op.edges)
    )
    assert (
        cexpr(start.when, top=True) == "cw >= 1 && more" and ("consumer", "more") in plan.counters
    )
    assert not [
        st
        for st in plan.consumer.before
        if isinstance(st, P.Sync)
        and isinstance(st.op, S.Turn)
        and st.op.kind == "pass"
        and all(not e.src for e in st.op.edges)
    ]
    base = start.stage.value
    start_line = f"cypress::named_arrive({base}, 256);"
    # no other turn op of the plan passes on that barrier: its lines are the start pass's
    assert [
        st.op
        for st in [*plan.entry, *plan.consumer.all(), *plan.exit]
        if isinstance(st, P.Sync) and isinstance(st.op, S.Turn) and st.stage == start.stage
    ] == [start.op, start.op]
    take_line = f"cypress::named_sync(({base} + cw), 256);"
    assert take_line in cu  # the same barriers as the takes: warpgroup 0's is `base`

    # the kernel text: the producer's tile loop, then the consumers'
    loops = [m.start() for m in re.finditer(r"for \(int k = 0, t = ", cu)]
    assert len(loops) == 2 and cu.index(CONSUMER) < loops[1]
    consumer = cu[cu.index(CONSUMER) :]
    loop = consumer.index("for (int k = 0, t = ")
    head, tile = consumer[:loop], consumer[loop:]
    assert head.count(start_line) == 1 and tile.count(start_line) == 1 and cu.count(start_line) == 2
    assert re.search(r"if \(cw >= 1 && more\) \{\n\s*" + re.escape(start_line), head)
    # `more` before the tile loop: the block has a tile (a block of the paired walk may have none)
    assert (
        head.count("bool more = (blockIdx.x << P) < num_tiles;") == 1
        and cu.count("bool more = ") == 1
    )
    # the tile's top: the more flag, then no pass before the tile's first take
    first_take = tile.index(take_line)
    assert "named_arrive(" not in tile[:first_take]
    assert (
        len(re.findall(r"\n\s*more = ", tile[:first_take])) == 1
        and len(re.findall(r"\n\s*more = ", cu)) == 1
    )
    assert "more" not in cu[: cu.index(CONSUMER)]  # the producer has no use for it
    # exactly one carried pass, right after the tile's last (guarded) pass, after the key loop
    assert cu.count("if (cw >= 1 && more) {") == 2 and tile.count("if (cw >= 1 && more) {") == 1
    last = re.compile(
        r"\n(\s*)if \(0 >= cw\) \{\n\s*cypress::named_arrive\(\("
        + str(base)
        + r" \+ \(\(cw \+ 1\) % 2\)\), 256\);  // pass the Tensor Core turn\n\1\}\n"
    )
    lasts = list(last.finditer(tile))
    assert len(lasts) == 1
    after = tile[lasts[0].end() :]
    assert re.match(r"\s*if \(cw >= 1 && more\) \{\n\s*" + re.escape(start_line), after)
    assert tile.index("for (int kb = 0; kb < num_k; ++kb)") < lasts[0].start()
    assert "named_sync((" + str(base) not in after  # no take after it in the tile


def test_each_warpgroup_takes_as_many_turns_per_tile_as_it_is_passed():
    """FlashAttention-3 (d = 64, two consumer warpgroups): a tile runs num_k + 2 runs of wgmma
    (S = Q·K[0]ᵀ, num_k loop steps, the last O += P·V), each warpgroup taking its own barrier
    (base + cw) before each and passing the other's after each; the last warpgroup's last
    pass of tile i is the next tile's start pass (none after the last tile), its first one
    the entry's.  Over tiles of 3, 0 and 2 key steps:"""
    cu = _cu(FA3, str(PP_PERSISTENT))
    base = _start_base(_plan(FA3, str(PP_PERSISTENT)))
    trips = [3, 0, 2]
    per_wg = [_events(cu, cw, trips) for cw in (0, 1)]

    def count(cw, kind, bar, tile):
        return sum(1 for k, b, t in per_wg[cw] if (k, b, t) == (kind, bar, tile))

    for i, nk in enumerate(trips):
        for cw in (0, 1):  # each warpgroup takes its own turn before each run
            assert count(cw, "take", base + cw, i) == nk + 2
            assert count(cw, "take", base + 1 - cw, i) == 0
        assert count(0, "pass", base + 1, i) == nk + 2  # warpgroup 0 passes after each of its runs
        # the last warpgroup: not after the tile's last run, but the next tile's first turn
        assert count(1, "pass", base, i) == nk + 1 + (i + 1 < len(trips))
        assert count(0, "pass", base, i) == count(1, "pass", base + 1, i) == 0
    assert [e for e in per_wg[1] if e[2] == -1] == [
        ("pass", base, -1)
    ]  # the first tile's, before it
    assert [e for e in per_wg[0] if e[2] == -1] == []
    # over the block, every barrier is taken as often as it is passed
    for bar in (base, base + 1):
        takes = sum(1 for w in per_wg for k, b, _ in w if (k, b) == ("take", bar))
        passes = sum(1 for w in per_wg for k, b, _ in w if (k, b) == ("pass", bar))
        assert takes == passes == sum(nk + 2 for nk in trips)


@pytest.mark.parametrize("program,mapping", PP_MAPPINGS + [(FA3, "wg3")], ids=lambda x: x)
def test_the_ring_runs_a_blocks_tiles_and_warpgroup_0_starts_the_next_tile_early(
    program, mapping, request
):
    """Every ping-pong persistent kernel (and three warpgroups, a temporary mapping): the turn
    ops read back from the kernel run on a named-barrier model for blocks of 1 to 4 tiles
    (main loops of 0 to 3 steps) under random schedules: no deadlock, every phase completed
    by one take and the pass of the warpgroup before it, no arrival left when the block
    ends.  And with warpgroup 0 always stepped first, it takes its first turn of the second
    tile before the last warpgroup has finished the first tile (the early pass); without the
    carry it would have to wait for the last warpgroup's next tile to start."""
    path = (
        request.getfixturevalue("wg3_persistent")
        if mapping == "wg3"
        else _mapping(program, mapping)
    )
    plan, cu = _plan(program, path), _cu(program, path)
    wgs, base = plan.consumers, _start_base(plan)
    assert plan.persistent and wgs == (3 if mapping == "wg3" else 2)
    assert (
        cu.count(f"if (cw >= {wgs - 1} && more) {{") == 2 and f"if (cw >= {wgs - 1}) {{" not in cu
    )
    assert f"if ({wgs - 2} >= cw) {{" in cu
    rng = random.Random(7)
    for trips in ([0], [2], [1, 1], [0, 3], [3, 0, 2], [1, 2, 0, 1]):
        per_wg = [_events(cu, cw, trips) for cw in range(wgs)]
        for s in range(30):
            _, bad = _simulate(per_wg, base, lambda ws: rng.choice(ws))
            assert bad is None, (trips, s, bad)
        log, bad = _simulate(per_wg, base, min)  # warpgroup 0 first, then 1, ...
        assert bad is None, (trips, bad)
        if len(trips) > 1:
            took = log.index(("took", 0, 1))
            assert took < log.index(("end", wgs - 1, 0)), (trips, log)


def test_a_block_without_a_tile_passes_nothing():
    """Grid ``min(tiles, SMs)`` with tiles dealt in pairs leaves some blocks without a tile;
    their last warpgroup must not pass the first turn (an arrival nobody takes).  The
    entry's pass without ``more`` would."""
    cu = _cu(FA3, str(PP_PERSISTENT))
    base = _start_base(_plan(FA3, str(PP_PERSISTENT)))
    per_wg = [_events(cu, cw, []) for cw in (0, 1)]
    assert all(k not in ("take", "pass") for w in per_wg for k, _, _ in w), per_wg
    assert _simulate(per_wg, base, min)[1] is None
    head = cu[cu.index(CONSUMER) :]
    head = head[: head.index("for (int k = 0, t = ")]
    unguarded = cu.replace(head, head.replace("if (cw >= 1 && more) {", "if (cw >= 1) {"))
    assert unguarded != cu
    _, bad = _simulate([_events(unguarded, cw, []) for cw in (0, 1)], base, min)
    assert bad is not None and bad.startswith("arrivals left at the end"), bad


def test_the_model_finds_a_pass_left_at_the_end_or_run_a_tile_ahead():
    """The checks above can fail: the carried pass without ``more`` leaves an arrival on
    warpgroup 0's barrier after the last tile; warpgroup 0 passing itself the first turn
    (the one-tile protocol test_persistent_attention.py's ping-pong test mutates the IR to)
    breaks the ring's pairing, which the model holds every phase to."""
    cu = _cu(FA3, str(PP_PERSISTENT))
    base = _start_base(_plan(FA3, str(PP_PERSISTENT)))
    trips = [1, 2]
    no_more = cu.replace("if (cw >= 1 && more) {", "if (cw >= 1) {")
    _, bad = _simulate([_events(no_more, cw, trips) for cw in (0, 1)], base, min)
    assert bad is not None and bad.startswith("arrivals left at the end") and f"{base}:" in bad
    to_self = cu.replace("if (cw >= 1) {", "if (0 >= cw) {").replace(
        "if (cw >= 1 && more) {", "if (0 >= cw && more) {"
    )
    found = [
        _simulate([_events(to_self, cw, trips) for cw in (0, 1)], base, pick)[1]
        for pick in (min, max, random.Random(3).choice)
    ]
    assert all(
        f is not None and f.startswith(f"a phase of barrier {base} completed by") for f in found
    ), found


def test_more_says_whether_the_consumers_tile_loop_runs_again():
    """``more`` is read by the last warpgroup before its tile's epilogue: it must be true
    exactly when the tile loop goes on.  The kernel's own loop header and ``more`` lines, run
    for the blocks of a few grids with the instance the launcher picks (``P = 1``: tiles in
    long + short pairs while the blocks are fewer than the tiles, some blocks getting none or
    an odd number; ``P = 0``: one tile per block)."""
    cu = _cu(FA3, str(PP_PERSISTENT))
    assert "constexpr int P = kPairs;" in cu
    assert re.search(
        r"if \(tiles > grid\) flash_attention3_kernel<true><<<.*\n\s*else flash_attention3_kernel<false><<<",
        cu,
    )
    consumer = cu[cu.index(CONSUMER) :]
    head = re.search(r"for \(int k = 0, t = (.+?); t < num_tiles; \+\+k, t = (.+?)\) \{", consumer)
    more = re.search(r"\n\s*more = (.+?) < num_tiles;", consumer)
    first = re.search(r"bool more = (.+?) < num_tiles;", consumer)
    assert head and more and first and first.end() < head.start() < head.end() < more.start()

    def py(e):
        return e.replace("blockIdx.x", "bx").replace("gridDim.x", "gx")

    init, step, nxt, has = (
        py(head.group(1)),
        py(head.group(2)),
        py(more.group(1)),
        py(first.group(1)),
    )
    for num_tiles, grid in (
        (7, 7),
        (5, 3),
        (264, 132),
        (301, 132),
        (1, 1),
        (2, 1),
        (100, 100),
        (132, 132),
    ):
        seen = []
        for bx in range(grid):
            env = {"bx": bx, "gx": grid, "k": 0, "P": int(num_tiles > grid)}
            t = eval(init, {}, env)
            assert (eval(has, {}, env) < num_tiles) == (t < num_tiles), (num_tiles, grid, bx)
            tiles, flags = [], []
            while t < num_tiles:
                tiles.append(t)
                flags.append(eval(nxt, {}, {**env, "t": t}) < num_tiles)
                env["k"] += 1
                t = eval(step, {}, env)
            assert flags == [True] * (len(tiles) - 1) + [False] * bool(tiles), (
                num_tiles,
                grid,
                bx,
                flags,
            )
            if (
                num_tiles <= grid
            ):  # a block for every tile: one each (pairs would idle half the grid)
                assert tiles == ([bx] if bx < num_tiles else []), (num_tiles, grid, bx, tiles)
            seen += tiles
        assert sorted(seen) == list(range(num_tiles))


# ----------------------------------------------------------------------------- 2. one tile per block: unchanged
def test_a_one_tile_block_passes_the_first_turn_at_the_start_of_its_tile():
    plan, cu = _plan(FA3, str(PP_PLAIN)), _cu(FA3, str(PP_PLAIN))
    assert not plan.persistent and plan.entry == [] and ("consumer", "more") not in plan.counters
    assert "more" not in re.sub(r"//[^\n]*", "", cu) and "&& more" not in cu
    consumer = cu[cu.index(CONSUMER) :]
    loop = consumer.index("for (int t = blockIdx.x; t < num_tiles; t += num_tiles)")
    tile = consumer[loop:]
    assert "named_arrive(" not in consumer[:loop]
    # the IR's start pass (edges from "start" only): one statement, before the tile's takes
    (start_op,) = [
        st
        for st in plan.consumer.all()
        if isinstance(st, P.Sync)
        and isinstance(st.op, S.Turn)
        and st.op.kind == "pass"
        and all(not e.src for e in st.op.edges)
    ]
    assert start_op in plan.consumer.before
    base = start_op.stage.value
    start = f"cypress::named_arrive({base}, 256);  // pass the Tensor Core turn\n"
    assert re.search(r"if \(cw >= 1\) \{\n\s*" + re.escape(start), tile)
    assert tile.index(start) < tile.index(f"cypress::named_sync(({base} + cw), 256);")
    assert tile.count(f"cypress::named_arrive({base}, 256);") == 1
    starts = [
        t for t in _turn_nodes(_named(cu, _lowered(FA3, str(PP_PLAIN)))) if t.bar == str(base)
    ]
    assert len(starts) == 1 and starts[0].note.startswith("start ->")


def test_the_persistent_kernel_moves_only_the_start_pass():
    """The turn ops of the two kernels, in order (guard, call, barrier): the same, but for the
    start pass, which the persistent kernel runs before its tile loop and after the tile's
    last pass instead of at the top of the tile."""

    def turns(mapping):
        before, loop, after = _split(_named(_cu(FA3, mapping), _lowered(FA3, mapping)))

        def flat(nodes, guard=""):
            out = []
            for n in nodes:
                if isinstance(n, Turn):
                    out.append((guard, n.kind, n.bar, n.note))
                elif _has_turns(n.body):
                    out += (
                        [("loop",)] + flat(n.body, guard) + [("/loop",)]
                        if n.header.startswith("for")
                        else flat(n.body, n.header)
                    )
            return out

        return flat(before), flat(loop.body), flat(after)

    plain, pers = turns(str(PP_PLAIN)), turns(str(PP_PERSISTENT))
    assert plain[0] == [] and plain[2] == [] and pers[2] == []
    start = plain[1][0]
    assert start[0] == "if (cw >= 1)" and start[1] == "pass" and start[3].startswith("start ->")
    (entry,) = pers[0]
    assert entry == ("if (cw >= 1 && more)", *start[1:])
    last = max(i for i, x in enumerate(plain[1]) if x[0] == "if (0 >= cw)")
    assert last == len(plain[1]) - 1  # the tile's last turn op
    assert pers[1] == plain[1][1:] + [("if (cw >= 1 && more)", *start[1:])]


# ----------------------------------------------------------------------------- 3. persistent without ping-pong
@pytest.mark.parametrize("mapping", ["h100", "h100_d64_wg3_staged_persistent"])
def test_a_persistent_block_without_ping_pong_has_no_turns_to_carry(mapping):
    plan, cu = _plan(FA3, _mapping(FA3, mapping)), _cu(FA3, _mapping(FA3, mapping))
    assert plan.persistent and plan.entry == [] and ("consumer", "more") not in plan.counters
    assert "bool more" not in cu and "&& more" not in cu and "named_arrive(" not in cu
    assert not [
        st for st in plan.consumer.all() if isinstance(st, P.Sync) and isinstance(st.op, S.Turn)
    ]


# ----------------------------------------------------------------------------- the same two ops as the interpreter
@pytest.mark.parametrize("program,mapping", PP_MAPPINGS, ids=lambda x: x)
def test_the_kernel_carries_the_turns_the_interpreter_carries(program, mapping):
    """``S.carried_turns`` of the synchronized IR names the two ops the concurrent interpreter
    carries from tile to tile (``persistent=True``); the kernel carries the same two: the
    first pass is the entry's statement and the one after the tile's last pass."""
    m = _lowered(program, _mapping(program, mapping))
    first, last = S.carried_turns(m.body.ops)
    plan = m.kernel
    (entry,) = plan.entry
    assert entry.op is first
    (sec,) = [
        sec for sec in plan.consumer.afters if any(getattr(st, "op", None) is last for st in sec)
    ]
    i = next(i for i, st in enumerate(sec) if getattr(st, "op", None) is last)
    carried = sec[i + 1]
    assert carried.op is first and carried.when == entry.when == N.IBin(
        "&&", S.Guard(CW, N.IConst(plan.consumers - 1)), MORE
    )
    assert [st for st in plan.consumer.all() if getattr(st, "op", None) is first] == [carried]


# ----------------------------------------------------------------------------- 4. carry_turns on hand-written plans
WG = N.IProc("WARPGROUP")
CW = KVar("cw")  # the kernel's consumer warpgroup index
BASE = 3
OWN = N.IBin("+", N.IConst(BASE), CW)
NEXT = N.IBin("+", N.IConst(BASE), N.IBin("%", N.IBin("+", CW, N.IConst(1)), N.IConst(2)))
WAIT = P.Sync(S.WaitGroup("wgmma", 0, "consumer"), "an epilogue statement")


def _turn(kind: str, bar: N.IExpr, src: str, when: S.Guard | None = None) -> P.Sync:
    """A turn op as ``lower_sync`` writes it: the IR op (its guard over the warpgroup index),
    the barrier id in ``stage``, the guard over ``cw`` in ``when``."""
    irw = (
        None
        if when is None
        else S.Guard(WG if when.a == CW else when.a, WG if when.b == CW else when.b)
    )
    op = S.Turn(kind, bar, TURN_THREADS, "consumer", irw, (S.Edge(src, "%e7", "turn"),))
    return P.Sync(op, f"{src or 'start'} -> %e7 (turn)", stage=bar, when=when)


def _start() -> P.Sync:  # the tile's first turn: the last warpgroup passes it, from the start
    return _turn("pass", N.IConst(BASE), "", S.Guard(CW, N.IConst(1)))


def _take(src="%e7"):
    return _turn("take", OWN, src)


def _pass(src="%e7", when=None):
    return _turn("pass", NEXT, src, when)


def _last():  # the pass after the tile's last run: not by the last warpgroup
    return _pass("%e34", S.Guard(N.IConst(0), CW))


def _hand(before, loop, after, ops=None) -> tuple[P.KernelPlan, list]:
    """A persistent plan with one main loop, and the IR's top-level ops (by default those of
    the statements outside the loop, as the lowering has them)."""
    plan = P.KernelPlan("k", [], [], [], 0, True, 2, 2, [], [], [], [], [])
    plan.consumer = P.RoleCode(list(before), [list(loop)], [list(after)])
    return plan, [st.op for st in [*before, *after]] if ops is None else ops


def test_carry_turns_moves_the_start_pass_to_entry_and_after_the_last_pass():
    start, take0, pass0, take1, pass1, take2, last = (
        _start(),
        _take(),
        _pass(),
        _take("%e22"),
        _pass("%e22"),
        _take("%e34"),
        _last(),
    )
    plan, ops = _hand([start, take0, pass0], [take1, pass1], [take2, last, WAIT])
    carry_turns(plan, ops)
    (entry,) = plan.entry
    assert (
        entry.op is start.op
        and entry.when == N.IBin("&&", start.when, MORE)
        and entry.stage == start.stage
    )
    assert entry.note.startswith(start.note) and "first tile" in entry.note
    assert plan.consumer.before == [take0, pass0] and plan.consumer.loops == [[take1, pass1]]
    t2, l2, carried, w2 = plan.consumer.afters[0]
    assert (t2, l2, w2) == (take2, last, WAIT)
    assert carried.op is start.op and carried.stage == start.stage and carried.who is None
    assert (
        carried.when == N.IBin("&&", start.when, MORE)
        and cexpr(carried.when, top=True) == "cw >= 1 && more"
    )
    assert plan.counters == {("consumer", "more")}


@pytest.mark.parametrize(
    "where", ["before the main loop", "between two main loops", "after the second loop"]
)
def test_carry_turns_puts_the_copy_right_after_the_last_pass_wherever_it_is(where):
    start, last = _start(), _last()
    tail = [_take("%e34"), last, WAIT]
    before = [start, _take(), _pass()] + (tail if where == "before the main loop" else [])
    plan, _ = _hand(before, [WAIT], tail if where == "between two main loops" else [WAIT])
    plan.consumer.loops.append([WAIT])
    plan.consumer.afters.append(tail if where == "after the second loop" else [WAIT])
    carry_turns(plan, [start.op, last.op])
    (sec,) = [sec for sec in plan.consumer.sections() if any(st is last for st in sec)]
    i = sec.index(last)
    assert sec[i + 1].op is start.op and sec[i + 1].when == N.IBin("&&", start.when, MORE)
    assert sec[i + 2] is WAIT and start not in plan.consumer.before and plan.entry[0].op is start.op
    assert sum(1 for st in plan.consumer.all() if st.op is start.op) == 1


IR_SHAPES = ["no last pass", "two last passes", "first pass unguarded", "two first passes"]
PLAN_SHAPES = [
    "last pass missing from the plan",
    "last pass twice in the plan",
    "last pass only in the loop",
    "first pass missing from the plan",
    "first pass after the loop",
]


@pytest.mark.parametrize("case", IR_SHAPES + PLAN_SHAPES)
def test_carry_turns_refuses_turns_of_another_shape(case):
    """The IR's turns (``S.carried_turns``: one guarded first pass from the start, one guarded
    pass after the tile's last run), then their statements in the plan (once each outside
    the main loops, the first one before them)."""
    start, last = _start(), _last()
    before, loop, after = (
        [start, _take(), _pass()],
        [_take("%e22"), _pass("%e22")],
        [_take("%e34"), last, WAIT],
    )
    ops = None
    if case == "no last pass":
        after = [
            _take("%e34"),
            _pass("%e34"),
            WAIT,
        ]  # the last warpgroup passes too: nothing withheld
    elif case == "two last passes":
        before = [start, _take(), _pass("%e7", S.Guard(N.IConst(0), CW))]
    elif case == "first pass unguarded":
        before = [_turn("pass", N.IConst(BASE), ""), _take(), _pass()]
    elif case == "two first passes":
        before = [start, _start(), _take(), _pass()]
    elif case == "last pass missing from the plan":
        ops, after = [start.op, last.op], [_take("%e34"), WAIT]
    elif case == "last pass twice in the plan":
        ops, after = [start.op, last.op], [_take("%e34"), last, last, WAIT]
    elif case == "last pass only in the loop":
        ops, loop, after = (
            [start.op, last.op],
            [_take("%e22"), _pass("%e22"), last],
            [_take("%e34"), WAIT],
        )
    elif case == "first pass missing from the plan":
        ops, before = [start.op, last.op], [_take(), _pass()]
    else:
        ops, before, after = (
            [start.op, last.op],
            [_take(), _pass()],
            [_take("%e34"), last, start, WAIT],
        )
    plan, ops = _hand(before, loop, after, ops)
    was = copy.deepcopy(plan)
    with pytest.raises(ValueError, match="ping-pong"):
        carry_turns(plan, ops)
    assert plan == was  # refused before any edit (the lowering turns it into E050)


def test_carry_turns_leaves_a_block_without_a_first_pass_alone():
    cases = {
        "no turns": _hand([WAIT], [], [WAIT]),
        # takes and passes, none from the start (a guarded pass that would be the last)
        "no first pass": _hand(
            [_take(), _pass()], [_take("%e22"), _pass("%e22")], [_take("%e34"), _last()]
        ),
        # the plan's first pass is not among the IR's top-level ops
        "first pass only in the plan": _hand([_start(), _take()], [], [_last()], ops=[]),
    }
    for what, (plan, ops) in cases.items():
        was = copy.deepcopy(plan)
        carry_turns(plan, ops)
        assert plan == was and plan.entry == [] and not plan.counters, what
