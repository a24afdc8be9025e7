"""Tensors that share shared-memory bytes (resource allocation's ``war`` pairs) when the later
one is written by thread code: the hazard analysis orders every access of the earlier tensor
before those writes even where no event edge leads from one to the other
(``hazards.Program._alias_writes``), and the concurrent interpreter models a group of tensors
sharing bytes pair by pair (``concurrent_state.alias_groups``: a tensor in two pairs touches
both pairs' regions).

The case is FlashAttention-3's d64 persistent ping-pong block: the O tile each warpgroup stages
for its TMA store, placed over the peeled K tile that S = Q·K[0]ᵀ of *both* warpgroups reads
at the start of the tile.  Only the warpgroup's own data orders its O writes after its own
S = Q·K[0]ᵀ; nothing orders them after the other warpgroup's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.concurrent_state import alias_groups
from cypressc.ir.hazards import Program
from cypressc.ir.schedule_check import check_schedules, small_sizes, two_tile_sizes
from cypressc.ir.sync_verify import verify_sync
from cypressc.ir.verify import VerifyError
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from tests.compiled import ring_joins_off
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module

ROOT = Path(__file__).resolve().parents[2]
# these tests are about a peeled step's tiles in buffers of their own (what they share, the
# barriers they need); with ring joins FlashAttention-3's take stage-ring positions instead
# (tests/backend/test_ring_joins.py)
pytestmark = pytest.mark.usefixtures("no_ring_joins")
FA3 = ROOT / "programs" / "flash_attention3.cyp"
PP = ROOT / "tests/mappings/full" / "flash_attention3" / "h100_d64_pp_staged_persistent.yaml"
EARLY, LATE = "K_smem", "O_smem"


def _snaps(mapping: Path) -> dict[str, N.Module]:
    tree = instantiate(check_program(parse_file(FA3)), load_mapping(mapping))
    return dict(compile_module(tree, until="sync-insertion"))  # sync-insertion verifies its output


def _forced(monkeypatch) -> dict[str, N.Module]:
    """The O tile over the peeled K tile, and no other sharing (as a tighter ``smem_limit``
    could choose; resource allocation's own choice is forced to isolate the pair)."""
    import cypressc.passes.resource_allocation as ra

    real = ra.resource_allocation

    def forced(m):
        m = real(m)
        return replace(m, resources=replace(m.resources, war=((EARLY, LATE),)))

    monkeypatch.setattr(ra, "resource_allocation", forced)
    return _snaps(PP)


def _findings(snaps, m: N.Module) -> list:
    """The interpreter on one tile (two sizes) and two tiles of a persistent block, non-causal."""
    ref = snaps["warp-specialization"]
    out = []
    for wraps in (2, 0):
        sizes = {**small_sizes(m, wraps=wraps), "causal": 0}
        out.append(check_schedules(m, ref, sizes=sizes, seed=0, schedules=8, value_every=0).finding)
        out.append(
            check_schedules(
                m,
                ref,
                sizes=two_tile_sizes(m, sizes),
                seed=11,
                schedules=8,
                value_every=0,
                persistent=True,
            ).finding
        )
    return out


def _drop(m: N.Module, op) -> N.Module:
    return replace(m, body=N.Block(tuple(o for o in m.body.ops if o is not op), m.body.yields))


def _alias_deps(m: N.Module) -> list:
    prog = Program(m)
    readers = {
        lf.op.ev
        for lf in prog.leaves.values()
        if lf.kind == "wgmma" and not lf.loops and prog._reads(lf, EARLY)
    }
    writers = {
        lf.op.ev for lf in prog.leaves.values() if lf.kind == "thread" and prog._writes(lf, LATE)
    }
    assert readers and writers
    return [
        d
        for d in prog.deps()
        if d.src in readers and d.dst in writers and (d.tensor, d.other) == (EARLY, LATE)
    ]


def test_every_reader_of_the_earlier_tensor_is_ordered_before_the_later_ones_writes(monkeypatch):
    snaps = _forced(monkeypatch)
    m = snaps["sync-insertion"]
    (d,) = _alias_deps(m)
    assert (d.hazard, d.via) == ("war", "same") and "WARPGROUP" in d.scope
    # realized: the reading wgmma group retires and the two consumer warpgroups meet before any
    # warpgroup writes O into the bytes
    carriers = [
        o for o in m.body.ops if isinstance(o, (S.BarSync, S.WaitGroup)) and d.edge() in o.edges
    ]
    assert {type(o) for o in carriers} == {S.BarSync, S.WaitGroup}
    (bar,) = [o for o in carriers if isinstance(o, S.BarSync)]
    assert bar.threads == 256
    assert _findings(snaps, m) == [None] * 4


def test_dropping_the_barrier_before_the_writes_is_refused_and_raced(monkeypatch):
    snaps = _forced(monkeypatch)
    m = snaps["sync-insertion"]
    (d,) = _alias_deps(m)
    (bar,) = [o for o in m.body.ops if isinstance(o, S.BarSync) and d.edge() in o.edges]
    mutant = _drop(m, bar)
    with pytest.raises(VerifyError):
        verify_sync(mutant)
    found = [f for f in _findings(snaps, mutant) if f is not None]
    assert found and all(f.kind == "race" for f in found), found
    assert any(_pair(EARLY, LATE) in f.message for f in found), found


@pytest.fixture(scope="module")
def three_way(tmp_path_factory) -> dict[str, N.Module]:
    """``smem_limit`` low enough that the peeled K tile, the last V tile and the O tile share one
    byte range (three pairs)."""
    d = yaml.safe_load(PP.read_text())
    block = next(i for i in d["instances"] if i.get("persistent"))
    block["smem_limit"] = 115743
    path = tmp_path_factory.mktemp("three") / "limit.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    with pytest.MonkeyPatch.context() as mp:  # a module fixture: no_ring_joins is not active yet
        ring_joins_off(mp)
        return _snaps(path)


def _pair(a: str, b: str) -> str:
    """The name of the alias group of two tensors sharing bytes (their names, sorted)."""
    return "|".join(sorted((a, b)))


V = "V_smem_1"  # the last V tile, copied after the key loop


def test_three_tensors_in_one_byte_range_meet_pair_by_pair_in_the_interpreter(three_way):
    m = three_way["sync-insertion"]
    group = {V, EARLY, LATE}
    assert {frozenset(p) for p in m.resources.war} == {
        frozenset(p) for p in ((EARLY, "V_smem_1"), ("V_smem_1", LATE), (EARLY, LATE))
    }
    groups = alias_groups(
        m
    )  # each pair its own region; O is per warpgroup: two slices of each of its pairs
    assert {t: {name for name, _ in groups[t]} for t in group} == {
        EARLY: {_pair(V, EARLY), _pair(EARLY, LATE)},
        V: {_pair(V, EARLY), _pair(V, LATE)},
        LATE: {_pair(V, LATE), _pair(EARLY, LATE)},
    }
    assert dict(groups[LATE]) == {_pair(V, LATE): 2, _pair(EARLY, LATE): 2}
    assert _findings(three_way, m) == [None] * 4
    # the O writes wait for every warpgroup's last O += P·V to retire (their reads of the V tile
    # in the same bytes): without that barrier the interpreter sees a race on the group's bytes
    (bar,) = [
        o
        for o in m.body.ops
        if isinstance(o, S.BarSync)
        and o.threads == 256
        and any(e.tensor == "V_smem_1" for e in o.edges)
    ]
    found = [f for f in _findings(three_way, _drop(m, bar)) if f is not None]
    # O's bytes are V's and K's too: the race shows on whichever of O's groups the
    # interpreter checks first (by name), both hold the bytes the V reader still reads
    assert any(
        f.kind == "race" and f.message.startswith("overwrites %") and LATE in f.message
        for f in found
    ), found
