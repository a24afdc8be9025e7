"""The printed event IR reads back (cypressc/ir/reader.py, issue #36 item 2): for every
snapshot of every bundled program up to sync-insertion, ``print(parse(print(m))) ==
print(m)``, the module read back verifies, and the next pass run on it prints what the
pipeline's own next snapshot prints.  Default mappings (f16) here; every committed mapping
under ``make test-full``.  Then the reader's located errors (E063)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cypressc.diagnostics import CypressError, render
from cypressc.ir.printer import event_names, print_module
from cypressc.ir.reader import parse_module
from cypressc.ir.verify import verify
from cypressc.passes.manager import get_pass
from tests import compiled
from tests.budget import FULL

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = sorted(p.stem for p in (ROOT / "programs").glob("*.cyp"))
CASES = [
    (prog, mp.name)
    for prog in PROGRAMS
    for mp in sorted((ROOT / "tests/mappings/full" / prog).glob("*.yaml"))
    if FULL or mp.name == "h100.yaml"
]


@pytest.mark.parametrize("program, mapping", CASES)
def test_every_snapshot_reads_back_and_the_next_pass_agrees(program, mapping):
    try:
        snaps = compiled.snapshots(
            program, ROOT / "tests/mappings/full" / program / mapping, until="sync-insertion"
        )
    except CypressError as e:  # a mapping a pass refuses: its earlier snapshots are not kept
        pytest.skip(f"{mapping} is refused: {e.code}")
    assert [n for n, _ in snaps][-1] == "sync-insertion"
    for k, (name, m) in enumerate(snaps):
        text = print_module(m)
        back = parse_module(text, f"{program}-{name}.ir", include_dirs=(ROOT / "programs",))
        assert print_module(back) == text, f"{program} {mapping} after {name}"
        verify(back)
        if k + 1 < len(snaps):
            nxt, want = snaps[k + 1]
            got = get_pass(nxt).for_module(back).apply(back)
            assert print_module(got) == print_module(want), f"{nxt} on {program} {mapping}"


def test_what_the_passes_read_survives():
    """The fields no printed text showed before: target knobs and locations, schedule,
    resources, sync edges (mbarriers' too) and their BLOCK dimensions, a user leaf."""
    snaps = dict(
        compiled.snapshots("gemm_epilogue", ROOT / "tests/mappings/full/gemm_epilogue/h100.yaml")
    )
    m = snaps["sync-insertion"]
    back = parse_module(print_module(m), "g.ir", include_dirs=(ROOT / "programs",))
    # the instance's name is for messages the mapping's lines give; a hand-written module has none
    assert back.target.block == replace(m.target.block, instance="")
    assert back.target.machine == m.target.machine
    assert (back.target.loc.file, back.target.loc.line) == ("g.ir", 1)
    assert back.schedule == replace(m.schedule, channels={})  # channels: the mbarriers say it
    assert back.resources == m.resources
    names = event_names(m)
    assert back.synchronized and dict(back.roles) == {names[k][1:]: v for k, v in m.roles}
    from cypressc.ir import sync as S
    from cypressc.ir.subst import walk_ops

    def syncs(mod):
        return [o for o in walk_ops(mod.body) if isinstance(o, S.SYNC_OPS)]

    assert [(type(o), o.dims) for o in syncs(back)] == [(type(o), o.dims) for o in syncs(m)]
    assert [len(getattr(o, "edges", ())) for o in syncs(back)] == [
        len(getattr(o, "edges", ())) for o in syncs(m)
    ]
    calls = [o for o in walk_ops(back.body) if getattr(o, "ext", None) is not None]
    assert (
        calls
        and calls[0].fn == "bias_gelu"
        and calls[0].ext.external.cpp == "cypress_ops::bias_gelu"
    )


def _error(text: str, **kw) -> CypressError:
    with pytest.raises(CypressError) as e:
        parse_module(text, "t.ir", **kw)
    assert e.value.code == "E063", render(e.value)
    return e.value


HEAD = "module @t(%A: [64] f32 @GLOBAL) sizes() {\n"


@pytest.mark.parametrize(
    "body, line, col, words",
    [
        ("  %x = tensor [64 f32 @SHARED\n", 2, 19, "expected ',', found 'f32'"),
        ("  %e1: () = copy %A -> %x {}\n", 2, 24, "tensor %x is not defined"),
        ("  %e1: () = call fil(%A, 0) {}\n", 2, 18, "unknown leaf function 'fil'"),
        ("  %e1: () = call fill(%A, 0) {%e9}\n", 2, 31, "event %e9 is not defined"),
        ("  %P = partition_by_slab %A (2)\n", 2, 8, "unknown partition"),
        ("  %P = partition_by_slices %A (1)\n", 2, 8, "the sliced dimension (0..0)"),
        ("  %x = tensor [64] f32 @SHARED\n      %y = 1\n", 3, 7, "unexpected indentation"),
        (
            "  wait %b[0] parity 0  @producer  from %e1 -> %e2 (rw %A)\n",
            2,
            52,
            "'rw' is not a hazard",
        ),
        ("  %x = (%A + )\n", 2, 14, "expected an expression"),
        ("  %x = 1 ? 2\n", 2, 10, "unexpected '?'"),
    ],
)
def test_a_malformed_line_is_located(body, line, col, words):
    e = _error(HEAD + body + "}\n")
    assert (e.loc.line, e.loc.col) == (line, col), render(e)
    assert words in e.message, render(e)
    shown = render(e)
    assert shown.startswith(f"t.ir:{line}:{col}: error[E063]") and "^" in shown


@pytest.mark.parametrize(
    "body, line, col, message, tags",
    [
        (
            "  %x = tensor [64] f32 @SHARDE\n",
            2,
            24,
            "'@SHARDE' is not a memory",
            "@GLOBAL, @SHARED, @REGISTER, @NONE",
        ),
        (
            "  %e1: [(4, WARPGRUP)] = call fill(%A, 0) {}\n",
            2,
            13,
            "'WARPGRUP' is not a processor level",
            "HOST, BLOCK, WARPGROUP, WARP, THREAD",
        ),
        (
            "  %e1: [(2, WARP)] = pfor %i in [0, 2) WARPS {} do\n    %y = 1\n",
            2,
            40,
            "'WARPS' is not a processor level",
            "WARPGROUP, WARP, THREAD",
        ),
        (
            "  %x = tensor [64, 64] f32 @REGISTER\n  %P = partition_by_mma %x (WGMMA_64x64x16, WRP, C)\n",
            3,
            45,
            "'WRP' is not a processor level",
            "WARP, THREAD",
        ),
        (
            "  %x = (warp_id() + lanes_id())\n",
            2,
            21,
            "'lanes_id()' is not a processor index",
            "warp_id(), lane_id()",
        ),
        (
            "  %e1: () = call fill(%A, 0) {}  @consumr\n",
            2,
            34,
            "'@consumr' is not a role",
            "@producer, @consumer",
        ),
        (
            "  %b = mbarrier[1] ful arrivals(1) arrive @producer wait @consumer  channel of %e1\n",
            2,
            20,
            "'ful' is not an mbarrier kind",
            "full, empty",
        ),
        (
            "  %b = mbarrier[1] full arrivals(1) arrive @consumer,producr wait @consumer  channel of %e1\n",
            2,
            54,
            "'producr' is not a role",
            "producer, consumer",
        ),
        (
            "  commit_group wgmm  @consumer  closes the group of %e1\n",
            2,
            16,
            "'wgmm' is not a group unit",
            "wgmma, bulk",
        ),
        ("  wait_group bulks 0  @consumer\n", 2, 14, "'bulks' is not a group unit", "wgmma, bulk"),
        ("  turn tak 1, 256  @consumer\n", 2, 8, "'tak' is not a turn kind", "take, pass"),
        ("  fence proxy  @consumer\n", 2, 9, "'proxy' is not a fence kind", "wgmma, proxy_async"),
        (
            "  syncwarp  @consumer  from %e1 -> %e2 (raw+rar %A)\n",
            2,
            45,
            "'rar' is not a hazard",
            "raw, war, waw, end, turn",
        ),
    ],
)
def test_an_unknown_tag_is_located_and_the_tags_are_listed(body, line, col, message, tags):
    """Memories, processor levels, roles, hazards and the sync ops' kinds are read into their
    enums (cypressc/lang/kinds.py, cypressc/ir/kinds.py); any other word is an E063 at it."""
    e = _error(HEAD + body + "}\n")
    assert (e.loc.line, e.loc.col) == (line, col), render(e)
    assert e.message == message and tags in e.hint, render(e)


def test_headers_are_checked():
    e = _error("target h100 {pipline: 2}\n" + HEAD + "}\n")
    assert "'pipline' is not a BLOCK knob" in e.message and "pipeline" in e.hint
    e = _error("target h100 {pipeline: true}\n" + HEAD + "}\n")
    assert "pipeline is an int" in e.message
    ext = 'external f(x: tensor[1, f32]) reads(x) writes(x) = "ns::f" in "nowhere.cuh"\n'
    e = _error(ext + HEAD + "}\n")
    assert 'cannot find the header "nowhere.cuh"' in e.message and "-I DIR" in e.hint
    e = _error("module @t() sizes() {\n")
    assert e.loc.line == 1 and "expected `}` closing the module" in e.message
    e = _error(HEAD + "}\nschedul {}\n")
    assert "unexpected 'schedul'" in e.message


def test_a_hand_written_module_gets_the_default_target_located_at_its_header():
    m = parse_module(HEAD + "  %x = tensor [64] f32 @SHARED\n}\n", "t.ir")
    assert m.target.machine.name == "h100" and (m.target.loc.file, m.target.loc.line) == ("t.ir", 1)
    assert print_module(m).startswith("target h100\nmodule @t(")
