"""Task-tree instantiation (DESIGN §3): the gemm tree instance by instance, the other
bundled programs' shapes, and the mapping/program cross-checks M010–M023, W001."""

from __future__ import annotations

from pathlib import Path

import pytest

from cypressc.diagnostics import CypressErrors
from cypressc.lang import syntax as S
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file, parse_source
from cypressc.mapping.loader import load_mapping, load_mapping_source
from cypressc.mapping.render import task_tree_text
from cypressc.mapping.tasktree import TaskTree, instantiate

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["gemm", "batched_gemm", "dual_gemm", "gemm_reduction"]


def tree_of(name: str) -> TaskTree:
    prog = check_program(parse_file(ROOT / "programs" / f"{name}.cyp"))
    return instantiate(prog, load_mapping(ROOT / "tests/mappings/full" / name / "h100.yaml"))


@pytest.fixture(scope="module")
def gemm() -> TaskTree:
    return tree_of("gemm")


def test_gemm_instances_in_preorder(gemm):
    nodes = list(gemm.root.walk())
    assert [n.instance.instance for n in nodes] == [
        "gemm_host",
        "gemm_block",
        "clear_block",
        "clear_warpgroup",
        "clear_warp",
        "clear_thread",
        "mma_block",
        "mma_warpgroup",
        "mma_warp",
        "mma_thread",
        "copy_block",
        "copy_warpgroup",
        "copy_warp",
        "copy_thread",
    ]
    assert [n.proc for n in nodes[:6]] == ["HOST", "BLOCK", "BLOCK", "WARPGROUP", "WARP", "THREAD"]
    assert (
        nodes[6].variant.name == "mma_tile"
        and nodes[7].variant.name == nodes[8].variant.name == "mma_inner"
    )
    assert gemm.machine.name == "h100" and gemm.warnings == []
    assert gemm.block_node() is nodes[1]


def test_gemm_mems_and_tunables(gemm):
    by = {n.instance.instance: n for n in gemm.root.walk()}
    assert by["gemm_host"].mems == {"C": "GLOBAL", "A": "GLOBAL", "B": "GLOBAL"}
    assert by["gemm_host"].tunables == {"U": 128, "V": 256}
    assert by["gemm_block"].tunables == {"W": 64}
    spec = load_mapping(ROOT / "tests/mappings/full" / "gemm" / "h100.yaml").spec
    assert by["gemm_block"].instance == next(
        i for i in spec.instances if i.instance == "gemm_block"
    )
    assert (
        by["gemm_block"].instance.warpspecialize
        and by["gemm_block"].instance.smem_limit == 227 * 1024
    )
    assert by["mma_block"].mems == {"C": "NONE", "A": "SHARED", "B": "SHARED"}
    assert by["mma_block"].tunables == {"WGS": 2}
    assert by["mma_warpgroup"].tunables == {"PIECES": 4, "PROC": "WARP", "MMA": "WGMMA_64x256x16"}
    assert by["mma_warp"].tunables == {"PIECES": 32, "PROC": "THREAD", "MMA": "WGMMA_64x256x16"}
    assert by["mma_thread"].mems == {"C": "REGISTER", "A": "SHARED", "B": "SHARED"}
    assert by["copy_thread"].mems["C"] == "REGISTER"
    assert by["clear_thread"].tunables == {}


def test_children_are_keyed_by_launch_statement(gemm):
    block = gemm.block_node()
    launches = [s for s in S.walk(block.variant.body) if isinstance(s, S.Launch)]
    assert [lc.task for lc in launches] == ["clear", "mma", "copy"]
    assert [block.child(lc).instance.instance for lc in launches] == [
        "clear_block",
        "mma_block",
        "copy_block",
    ]
    with pytest.raises(KeyError):
        block.child(S.Launch("clear", ()))  # equal, but not the same statement


def test_batched_gemm_has_two_host_levels():
    t = tree_of("batched_gemm")
    root = t.root
    assert (
        root.instance.instance == "batched_gemm_host"
        and root.proc == "HOST"
        and root.tunables == {}
    )
    ((_, gemm_host),) = root.children
    assert gemm_host.proc == "HOST" and gemm_host.variant.name == "gemm_host"
    assert t.block_node().instance.instance == "gemm_block"
    assert len(list(root.walk())) == 15


def test_dual_gemm_launches_mma_twice():
    t = tree_of("dual_gemm")
    kids = [c.instance.instance for _, c in t.block_node().children]
    assert kids == [
        "clear_block",
        "clear_block",
        "mma_block",
        "mma_block",
        "add_block",
        "copy_block",
    ]
    add_thread = next(n for n in t.root.walk() if n.instance.instance == "add_thread")
    assert add_thread.mems == {"C": "REGISTER", "X": "REGISTER"}
    assert all(n.tunables.get("MMA", "WGMMA_64x128x16") == "WGMMA_64x128x16" for n in t.root.walk())


def test_gemm_reduction_rowsum_tree():
    t = tree_of("gemm_reduction")
    block = t.block_node()
    assert block.tunables == {"W": 64} and t.root.tunables == {"U": 128, "V": 256}
    kids = [c.instance.instance for _, c in block.children]
    assert kids == [
        "clear_block",
        "clear_vec_block",
        "mma_block",
        "rowsum_block",
        "copy_block",
        "copy_vec_block",
    ]
    by = {n.instance.instance: n for n in t.root.walk()}
    assert [by[n].proc for n in ("rowsum_block", "rowsum_warpgroup", "rowsum_thread")] == [
        "BLOCK",
        "WARPGROUP",
        "THREAD",
    ]
    assert by["rowsum_thread"].mems == {"y": "REGISTER", "A": "SHARED"}
    assert by["mma_thread"].mems["A"] == "SHARED"
    assert by["copy_vec_thread"].mems == {"y": "REGISTER", "z": "GLOBAL"}


@pytest.mark.parametrize("name", NAMES)
def test_tree_text(name):
    from rich.console import Console

    t = tree_of(name)
    con = Console(width=1000, no_color=True, record=True)
    con.print(task_tree_text(t), highlight=False)
    text = con.export_text()
    assert text.splitlines()[0].startswith(f"{t.root.instance.instance}: variant ")
    b = t.block_node().instance
    knobs = [
        f"{k}={getattr(b, k)}"
        for k in ("warpspecialize", "pipeline", "smem_limit")
        if getattr(b, k) is not None
    ]
    assert ", ".join(knobs) in text.splitlines()[2 if name == "batched_gemm" else 1]
    assert len(text.splitlines()) == len(list(t.root.walk()))


# ----------------------------------------------------------------------------- errors
PROG = """
@task("clear", Inner, writes=["C"])
def clear_host(C: tensor[2, f32]):
    U = tunable(int)
    Cp = partition_by_blocks(C, (U, U))
    for i, j in prange(cdiv(C.shape[0], U), cdiv(C.shape[1], U)):
        launch("clear", Cp[i, j])

@task("clear", Inner, writes=["C"])
def clear_inner(C: tensor[2, f32]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("clear", Cp[i])

@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
"""

MAP = """\
machine: h100
entrypoint: host
instances:
  - instance: host
    variant: clear_host
    proc: HOST
    mems: [GLOBAL]
    tunables: {U: 64}
    calls: [wg]
  - instance: wg
    variant: clear_inner
    proc: WARPGROUP
    mems: [NONE]
    tunables: {PIECES: 128, PROC: THREAD, MMA: WGMMA_64x64x16}
    calls: [thread]
  - instance: thread
    variant: clear_thread
    proc: THREAD
    mems: [REGISTER]
"""


def inst(text: str):
    prog = check_program(parse_source(PROG, "p.cyp"))
    return instantiate(prog, load_mapping_source(text, "m.yaml"))


def test_small_mapping_skips_levels():
    t = inst(MAP)
    assert [n.proc for n in t.root.walk()] == ["HOST", "WARPGROUP", "THREAD"]
    assert t.block_node() is None


@pytest.mark.parametrize(
    "old,new,code,line,frag",
    [
        ("machine: h100", "machine: b200", "M010", 1, "unknown machine 'b200'"),
        ("entrypoint: host", "entrypoint: main", "M011", 2, "entrypoint 'main' is not an instance"),
        ("entrypoint: host", "entrypoint: wg", "M011", 12, "the entrypoint must run on HOST"),
        ("  - instance: thread", "  - instance: wg", "M012", 16, "instance 'wg' is defined twice"),
        (
            "variant: clear_thread",
            "variant: clear_leaf",
            "M013",
            17,
            "no variant 'clear_leaf' in p.cyp",
        ),
        (
            "mems: [REGISTER]",
            "mems: [REGISTER, REGISTER]",
            "M014",
            19,
            "has 1 tensor parameter(s) (C), mems lists 2",
        ),
        (
            "    mems: [NONE]\n",
            "    mems: [REGISTER]\n",
            "M015",
            13,
            "REGISTER is not visible from WARPGROUP",
        ),
        (
            "    mems: [GLOBAL]\n",
            "    mems: [SHARED]\n",
            "M015",
            7,
            "SHARED is not visible from HOST",
        ),
        (
            "tunables: {U: 64}",
            "tunables: {}",
            "M016",
            8,
            "tunable 'U' of 'clear_host' (int) is not bound",
        ),
        (
            "    tunables: {U: 64}\n",
            "",
            "M016",
            4,
            "tunable 'U' of 'clear_host' (int) is not bound",
        ),
        (
            "tunables: {U: 64}",
            "tunables: {U: 64, V: 64}",
            "M016",
            8,
            "'clear_host' declares no tunable 'V'",
        ),
        ("tunables: {U: 64}", "tunables: {U: -64}", "M016", 8, "tunable 'U' is an int; got -64"),
        (
            "tunables: {U: 64}",
            "tunables: {U: sixty}",
            "M016",
            8,
            "tunable 'U' is an int; got 'sixty'",
        ),
        ("PROC: THREAD", "PROC: LANE", "M016", 14, "tunable 'PROC' is a processor; got 'LANE'"),
        (
            "PROC: THREAD",
            "PROC: HOST",
            "M016",
            14,
            "processor tunable 'PROC' = HOST must be below WARPGROUP",
        ),
        (
            "MMA: WGMMA_64x64x16",
            "MMA: WGMMA_64x65x16",
            "M016",
            14,
            "is an instruction atom; got 'WGMMA_64x65x16'",
        ),
        (
            "calls: [thread]",
            "calls: []",
            "M017",
            15,
            "launch of 'clear' in 'clear_inner' resolves to no instance",
        ),
        (
            "calls: [thread]",
            "calls: [thread, wg]",
            "M017",
            15,
            "resolves to 2 instances (thread, wg)",
        ),
        ("calls: [thread]", "calls: [thred]", "M018", 15, "calls names unknown instance 'thred'"),
        (
            "calls: [wg]",
            "calls: [host]",
            "M020",
            9,
            "instance 'host' launches itself through host -> host",
        ),
        (
            "    proc: THREAD\n    mems: [REGISTER]\n",
            "    proc: WARP\n    mems: [SHARED]\n",
            "M021",
            18,
            "leaf 'clear_thread' calls fill(), which runs on THREAD; the instance maps it to WARP",
        ),
        (
            "    calls: [thread]\n",
            "    calls: [thread]\n    pipeline: 2\n",
            "M022",
            16,
            "'pipeline' applies to BLOCK instances; 'wg' runs on WARPGROUP",
        ),
        (
            "    mems: [REGISTER]\n",
            "    mems: [NONE]\n",
            "M023",
            19,
            "leaf 'clear_thread' touches 'C', so it cannot be NONE here",
        ),
    ],
)
def test_mapping_errors(old, new, code, line, frag):
    assert old in MAP
    with pytest.raises(CypressErrors) as ei:
        inst(MAP.replace(old, new, 1))
    e = next((x for x in ei.value.errors if x.code == code), None)
    assert e is not None, "\n".join(map(str, ei.value.errors))
    assert (e.loc.file, e.loc.line) == ("m.yaml", line), str(e)
    assert frag in e.message, e.message


def test_processor_nesting_upward():
    text = (
        MAP.replace("calls: [wg]", "calls: [blk]")
        + """\
  - instance: blk
    variant: clear_host
    proc: BLOCK
    mems: [GLOBAL]
    tunables: {U: 32}
    calls: [host2]
  - instance: host2
    variant: clear_inner
    proc: HOST
    mems: [GLOBAL]
    tunables: {PIECES: 1, PROC: BLOCK, MMA: WGMMA_64x64x16}
    calls: [thread]
"""
    )
    with pytest.raises(CypressErrors) as ei:
        inst(text)
    (e,) = [x for x in ei.value.errors if x.code == "M019"]
    assert e.message == "'host2' runs on HOST, above its caller 'blk' on BLOCK"
    assert e.loc.line == 28


def test_recursion_through_two_instances():
    text = (
        MAP.replace("calls: [thread]", "calls: [wg2]")
        + """\
  - instance: wg2
    variant: clear_inner
    proc: WARPGROUP
    mems: [NONE]
    tunables: {PIECES: 128, PROC: THREAD, MMA: WGMMA_64x64x16}
    calls: [wg]
"""
    )
    with pytest.raises(CypressErrors) as ei:
        inst(text)
    assert [e.code for e in ei.value.errors] == ["M020"]
    assert "host -> wg -> wg2 -> wg" in ei.value.errors[0].message


def test_unreachable_instance_is_a_warning():
    t = inst(
        MAP
        + "  - instance: spare\n    variant: clear_thread\n    proc: THREAD\n    mems: [REGISTER]\n"
    )
    (w,) = t.warnings
    assert (
        w.code == "W001"
        and "'spare' is never reached from 'host'" in w.message
        and w.loc.line == 20
    )


def test_duplicate_instance_notes_the_first():
    with pytest.raises(CypressErrors) as ei:
        inst(MAP.replace("  - instance: thread", "  - instance: wg", 1))
    (e,) = [x for x in ei.value.errors if x.code == "M012"]
    ((note, loc),) = e.notes
    assert note == "first defined here" and loc.line == 10
