"""The IR's string tags as enums (issue #36 item 3): a member stands in for its old string
everywhere (equality, hashing, printing, JSON, pickling, sorting), the machine model and a
mapping load into members while their YAML and error messages stay as they were, the
intrinsics registry is written in members, and the IR the passes build -- and the IR read
back from its printed text (cypressc opt) -- holds members in every tag field."""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest
from pydantic import ValidationError

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.kinds import BarrierKind, Hazard, Need, Role, Via
from cypressc.ir.printer import print_module
from cypressc.ir.reader import parse_module
from cypressc.lang.intrinsics import LEAF_FUNCTIONS
from cypressc.lang.kinds import Mem, OperandKind, PartKind, Proc, Tag
from cypressc.mapping.machine import load_machine
from cypressc.mapping.schema import Instance
from tests.compiled import PROGRAMS, snapshots


def test_a_member_is_its_string():
    for m in (Proc.WARPGROUP, Mem.SHARED, PartKind.BLOCKS, Role.CONSUMER, Need.FENCE_WGMMA):
        s = m.value
        assert m == s and s == m and hash(m) == hash(s)
        assert str(m) == f"{m}" == "%s" % m == s
        assert repr(m) == repr(s) and repr((m,)) == repr((s,))
        assert {s: 1}[m] == 1 and {m: 1}[s] == 1 and s in {m} and m in (s,)
        assert json.dumps({m: [m]}) == json.dumps({s: [s]})
        assert pickle.loads(pickle.dumps(m)) is m
    assert sorted([Proc.WARP, "BLOCK", Proc.THREAD]) == ["BLOCK", "THREAD", "WARP"]


def test_members_of_different_kinds_with_one_string_are_equal_as_strings():
    # Via.END and Hazard.END are both "end": a tag says what its string said, no more
    assert Via.END == Hazard.END and BarrierKind.FULL == Need.FULL


def test_the_machine_model_loads_into_members():
    m = load_machine("h100")
    assert m.processor_names == tuple(Proc)
    assert all(isinstance(p.name, Proc) for p in m.processors)
    assert all(isinstance(x, Mem) for p in m.processors for x in p.memories)
    assert set(m.memory_bytes) == set(Mem) and m.memory_bytes[Mem.SHARED] == 232448
    assert m.visible(Proc.THREAD, Mem.REGISTER) and not m.visible(Proc.BLOCK, Mem.REGISTER)


def test_a_mapping_instance_validates_into_members_with_the_old_errors():
    i = Instance(instance="a", variant="v", proc="BLOCK", mems=["SHARED", "NONE"])
    assert type(i.proc) is Proc and [type(x) for x in i.mems] == [Mem, Mem]
    assert i.model_dump(mode="json")["mems"] == ["SHARED", "NONE"]
    with pytest.raises(ValidationError) as e:
        Instance(instance="a", variant="v", proc="BLOK", mems=[3])
    errs = {err["loc"]: err for err in e.value.errors()}
    assert errs[("proc",)]["type"] == "literal_error"
    assert errs[("proc",)]["ctx"]["expected"] == "'HOST', 'BLOCK', 'WARPGROUP', 'WARP' or 'THREAD'"
    assert errs[("mems", 0)]["ctx"]["expected"] == "'GLOBAL', 'SHARED', 'REGISTER' or 'NONE'"


# the fields that carry a tag; an mma partition's processor is params[1]
_TAGGED = {
    N.IProc: ("proc",),
    N.Dim: ("proc",),
    N.Alloc: ("mem",),
    N.Partition: ("kind",),
    N.PFor: ("proc",),
    S.Edge: ("hazard", "via"),
    S.MBarrier: ("kind", "arrive_role", "wait_role"),
    S.ArriveExpectTx: ("role",),
    S.Wait: ("role",),
    S.Arrive: ("role",),
    S.CommitGroup: ("unit", "role"),
    S.WaitGroup: ("unit", "role"),
    S.SyncWarp: ("role",),
    S.BarSync: ("role",),
    S.Turn: ("kind", "role"),
    S.Fence: ("kind", "role"),
}
_SKIP = {"ext", "sites", "schedule", "resources", "kernel", "target", "origin"}


def _plain_tags(x, seen: set[int], out: list[str]) -> None:
    if id(x) in seen:
        return
    seen.add(id(x))
    if isinstance(x, (tuple, list)):
        for y in x:
            _plain_tags(y, seen, out)
        return
    if not dataclasses.is_dataclass(x) or isinstance(x, type):
        return
    vals = [(f, getattr(x, f)) for f in _TAGGED.get(type(x), ())]
    if isinstance(x, N.Partition) and x.kind == PartKind.MMA:
        vals.append(("params[1]", x.params[1]))
    if isinstance(x, N.Module):
        vals += [("roles", r) for _, r in x.roles]
    vals = [(f, w) for f, v in vals for w in (v if isinstance(v, tuple) else (v,))]
    out += [f"{type(x).__name__}.{f} = {v!r}" for f, v in vals if not isinstance(v, Tag)]
    for f in dataclasses.fields(x):
        if f.name not in _SKIP:
            _plain_tags(getattr(x, f.name), seen, out)


_PAIRS = [
    ("gemm", "tests/mappings/full/gemm/h100.yaml"),
    # ping-pong turns, a persistent block's tile edges, a staged output tile
    (
        "flash_attention3",
        "tests/mappings/full/flash_attention3/h100_d128_pp_staged_persistent.yaml",
    ),
]


@pytest.mark.parametrize("program, mapping", _PAIRS)
def test_every_tag_in_the_passes_ir_is_a_member(program, mapping):
    snaps = snapshots(program, mapping)
    assert any(m.synchronized for _, m in snaps)
    for name, m in snaps:
        plain: list[str] = []
        _plain_tags(m, set(), plain)
        assert plain == [], (name, plain[:5])


@pytest.mark.parametrize("program, mapping", _PAIRS)
def test_every_tag_of_the_ir_read_back_is_a_member(program, mapping):
    """The reader's round trip (tests/ir/test_reader.py) on each snapshot up to
    sync-insertion: the module read back holds members where the pipeline's does."""
    snaps = snapshots(program, mapping, until="sync-insertion")
    for name, m in snaps:
        back = parse_module(print_module(m), f"{name}.ir", include_dirs=(PROGRAMS,))
        plain: list[str] = []
        _plain_tags(back, set(), plain)
        assert plain == [], (name, plain[:5])
        # every kind of node the pipeline's module has was read (and checked) here too
        assert {type(x) for x in _walk(back)} == {type(x) for x in _walk(m)}


def test_a_multi_role_mbarrier_reads_back_into_members():
    """No bundled program has one (readers of a stage in both roles); the text of one reads
    into a tuple of roles and prints as written."""
    m = dict(snapshots("gemm", "tests/mappings/full/gemm/h100.yaml", until="sync-insertion"))
    text = print_module(m["sync-insertion"])
    assert text.count(" arrive @consumer wait @producer") == 1
    text = text.replace(
        " arrive @consumer wait @producer", " arrive @consumer,producer wait @producer"
    )
    back = parse_module(text, "two.ir", include_dirs=(PROGRAMS,))
    (bar,) = [o for o in _walk(back) if isinstance(o, S.MBarrier) and o.kind == BarrierKind.EMPTY]
    assert bar.arrive_role == (Role.CONSUMER, Role.PRODUCER) and bar.wait_role == (Role.PRODUCER,)
    assert all(type(r) is Role for r in bar.arrive_role + bar.wait_role)
    assert print_module(back) == text


def _walk(x):
    if isinstance(x, (tuple, list)):
        for y in x:
            yield from _walk(y)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        yield x
        for f in dataclasses.fields(x):
            if f.name not in _SKIP:
                yield from _walk(getattr(x, f.name))


def test_the_intrinsics_are_written_in_members():
    for f in LEAF_FUNCTIONS.values():
        assert type(f.proc) is Proc and (f.collective is None or type(f.collective) is Proc)
        for r in f.operands:
            assert type(r.kind) is OperandKind and all(type(x) is Mem for x in r.mems), (f, r)
    mma = LEAF_FUNCTIONS["warpgroup_mma"]
    assert [r.kind for r in mma.operands][0] == OperandKind.ATOM == "atom"
    assert mma.collective == Proc.WARPGROUP == "WARPGROUP" and mma.over_rows is False
