"""The CUDA is printed from the synchronized IR (issue #10 items 2 and 4): removing any one
sync op that ``sync-insertion`` placed changes the generated kernel, or the lowering
refuses the module; and the old experiment -- deleting every event edge (preconditions,
yields, roles) after warp specialization -- no longer leaves the CUDA unchanged."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cypressc.backend.emit import emit_cuda
from cypressc.backend.lower import cuda_lowering
from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module
from cypressc.passes.sync_insertion import sync_insertion

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [
    (p.stem, f"tests/mappings/full/{p.stem}/h100.yaml")
    for p in sorted((ROOT / "programs").glob("*.cyp"))
] + [
    ("gemm", "tests/mappings/full/gemm/h100_nows.yaml"),
    ("gemm", "tests/mappings/full/gemm/h100_alias.yaml"),
    ("tests/programs/chain_gemm.cyp", "tests/mappings/chain_gemm.yaml"),
    ("tests/programs/gemm_two_loops.cyp", "tests/mappings/gemm_two_loops.yaml"),
]


def _compiled(program: str, mapping: str):
    path = ROOT / program if program.endswith(".cyp") else ROOT / "programs" / f"{program}.cyp"
    tree = instantiate(check_program(parse_file(path)), load_mapping(ROOT / mapping))
    return dict(compile_module(tree, until="sync-insertion"))


def _cuda(m: N.Module) -> str | None:
    """The kernel's CUDA, or None when the lowering refuses the module."""
    try:
        return emit_cuda(cuda_lowering(m).kernel)
    except CypressError:
        return None


def _sync_ops(b: N.Block):
    for op in b.ops:
        if isinstance(op, S.SYNC_OPS):
            yield op
        if isinstance(op, (N.For, N.PFor)):
            yield from _sync_ops(op.body)


def _drop(b: N.Block, victim) -> N.Block:
    ops = [
        replace(o, body=_drop(o.body, victim)) if isinstance(o, (N.For, N.PFor)) else o
        for o in b.ops
        if o is not victim
    ]
    return N.Block(tuple(ops), b.yields)


@pytest.mark.parametrize(
    "program,mapping", PAIRS, ids=[f"{Path(p).stem}-{Path(m).stem}" for p, m in PAIRS]
)
def test_every_sync_op_reaches_the_cuda(program, mapping):
    snaps = _compiled(program, mapping)
    m = snaps["sync-insertion"]
    base = _cuda(m)
    assert base is not None
    ops = list(_sync_ops(m.body))
    assert len(ops) >= 8
    same = []
    for op in ops:
        out = _cuda(replace(m, body=_drop(m.body, op)))
        if out == base:
            same.append(f"{type(op).__name__} {getattr(op, 'bar', getattr(op, 'unit', ''))}")
    assert not same, f"removing these sync ops leaves the CUDA unchanged: {same}"


@pytest.mark.parametrize("program", ["gemm", "dual_gemm", "gemm_reduction", "batched_gemm"])
def test_deleting_every_edge_changes_the_cuda(program):
    """Preconditions, yields and roles gone after warp specialization: sync-insertion finds
    no edge to realize, and the kernel it leads to differs (or is refused)."""
    snaps = _compiled(program, f"tests/mappings/full/{program}/h100.yaml")
    ws = snaps["warp-specialization"]

    def strip(b: N.Block) -> N.Block:
        ops = []
        for o in b.ops:
            if isinstance(o, (N.For, N.PFor)):
                o = (
                    replace(o, body=strip(o.body), pre=())
                    if hasattr(o, "pre")
                    else replace(o, body=strip(o.body))
                )
            elif hasattr(o, "pre"):
                o = replace(o, pre=())
            ops.append(o)
        return N.Block(tuple(ops), ())

    bare = replace(ws, body=strip(ws.body), roles=(), schedule=replace(ws.schedule, channels={}))
    try:
        out = _cuda(sync_insertion(bare))
    except CypressError:
        out = None
    assert out != _cuda(snaps["sync-insertion"])


@pytest.mark.parametrize("name", ["pipe", "num_k", "kb"])
def test_a_size_named_like_a_pipeline_variable_keeps_its_own_value(tmp_path, name):
    """The kernel's running pipeline state, trip count and step would shadow a size of the same
    name inside the tile loop (a silently wrong kernel): the size is spelled apart from them
    (``<name>_1``) wherever the kernel reads it, and keeps its name in the kernel's ABI."""
    import json
    import re

    from click.testing import CliRunner

    from cypressc.cli import main

    lines = (ROOT / "programs/gemm.cyp").read_text().split("\n")
    host = [i for i, ln in enumerate(lines) if "def gemm_host" in ln][0]
    end = next(i for i in range(host + 1, len(lines)) if lines[i].startswith("@task"))
    for i in range(host, end):
        lines[i] = re.sub(r"\bK\b", name, lines[i])
    prog = tmp_path / "gemm.cyp"
    prog.write_text("\n".join(lines))
    out = tmp_path / "out"
    r = CliRunner().invoke(
        main,
        [
            "build",
            str(prog),
            "-m",
            str(ROOT / "tests/mappings/full/gemm/h100.yaml"),
            "-o",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    cu = (out / "gemm.cu").read_text()
    assert f"const int num_k = cdiv({name}_1, 64);" in cu  # the size K, under its new spelling
    assert f"int N, int {name}_1) {{" in cu and f"int64_t N, int64_t {name}_1, " in cu
    assert "cypress::PipelineState<STAGES> pipe;" in cu and "pipe.advance();" in cu
    assert "for (int kb = 0; kb < num_k; ++kb)" in cu
    assert json.loads((out / "gemm.json").read_text())["sizes"] == ["M", "N", name]
    assert f"int64_t N, int64_t {name}, cudaStream_t stream);" in (out / "gemm.h").read_text()
