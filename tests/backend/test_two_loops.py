"""Two main loops in one block (issue #10 item 5): tests/programs/gemm_two_loops.cyp computes
C = A @ B + D @ E with one pipelined loop per product into one accumulator.
warp-specialization stages both loops' shared tiles (it used to stage only the first: staging
one loop rebuilt the blocks, and the second loop was no longer found by identity);
sync-insertion gives each loop its own channels; the CUDA runs the two loops one after the
other in every tile, each with its own trip count and its own pipeline counters (carried
across the tiles of a persistent block, since each loop's mbarriers count only its own
steps).  The concurrent interpreter runs the program (tests/ir/test_concurrent.py, PAIRS),
the sequential one checks its values (tests/ir/test_passes_interp.py), nvcc compiles it here
and the GPU check runs it (bench/gpu_check.py, ``gemm_two_loops``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.subst import walk_ops
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]
PROG = ROOT / "tests" / "programs" / "gemm_two_loops.cyp"
MAP = ROOT / "tests" / "mappings" / "gemm_two_loops.yaml"


def _build(tmp_path: Path, mapping: Path = MAP):
    out = tmp_path / "out"
    return CliRunner().invoke(main, ["build", str(PROG), "-m", str(mapping), "-o", str(out)]), out


def test_both_loops_are_pipelined_with_their_own_channels():
    tree = instantiate(check_program(parse_file(PROG)), load_mapping(MAP))
    m = dict(compile_module(tree, until="sync-insertion"))["sync-insertion"]
    loops = [o for o in m.body.ops if isinstance(o, N.For)]
    assert len(loops) == 2
    staged = {o.name: o for o in walk_ops(m.body) if isinstance(o, N.Alloc) and o.mem == "SHARED"}
    for lp in loops:
        # every shared tile a loop reads is a 3-stage buffer hoisted out of it
        reads = {o.dst.partition.split("#")[0] for o in lp.body.ops if isinstance(o, N.Copy)}
        assert len(reads) == 2 and all(staged[r].shape[0] == N.IConst(3) for r in reads), reads
        assert not any(isinstance(o, N.Alloc) for o in lp.body.ops)
    bars = [[o.bar for o in lp.body.ops if isinstance(o, S.Wait)] for lp in loops]
    assert all(len(b) == 2 for b in bars) and not set(bars[0]) & set(bars[1])


def test_the_kernel_runs_the_loops_in_turn_with_their_own_counters(tmp_path):
    r, out = _build(tmp_path)
    assert r.exit_code == 0, r.output
    cu = (out / "gemm_two_loops.cu").read_text()
    assert "const int num_k = cdiv(K, 64);" in cu and "const int num_k_1 = cdiv(J, 64);" in cu
    cons = cu[cu.index("consumer warpgroups") :]
    first, second = (
        cons.index("for (int kb = 0; kb < num_k; ++kb)"),
        cons.index("for (int kb = 0; kb < num_k_1; ++kb)"),
    )
    assert first < second
    # loop 0 waits and advances on pipeline state pipe, loop 1 on pipe_1, both declared
    # before the persistent tile loop so they carry over to the block's next tile
    assert "cypress::PipelineState<STAGES> pipe;" in cons[: cons.index("for (int t = ")]
    assert "cypress::PipelineState<STAGES> pipe_1;" in cons[: cons.index("for (int t = ")]
    loop0, loop1 = cons[first:second], cons[second:]
    assert "[pipe.index], pipe.phase)" in loop0 and "pipe_1" not in loop0
    assert "[pipe_1.index], pipe_1.phase)" in loop1 and "pipe_1.advance();" in loop1
    prod = cu[cu.index("producer warpgroup") : cu.index("consumer warpgroups")]
    p0, p1 = prod.index("kb < num_k;"), prod.index("kb < num_k_1;")
    assert p0 < p1
    # A and B stream in the first loop, D and E in the second
    assert re.findall(r"tma_load_2d\([^;]*&(tm_\w+)", prod[p0:p1]) == ["tm_A_128x64", "tm_B_64x64"]
    assert re.findall(r"tma_load_2d\([^;]*&(tm_\w+)", prod[p1:]) == ["tm_D_128x64", "tm_E_64x64"]


def test_two_loops_without_warp_specialization_are_refused(tmp_path, mapping_variant):
    r, _ = _build(tmp_path, mapping_variant(MAP, "warpspecialize: true", "warpspecialize: false"))
    assert r.exit_code != 0
    assert (
        "error[E050]" in r.output
        and "more than one main loop without warp specialization" in r.output
    )


def test_a_size_named_like_a_second_loops_variables_is_spelled_apart(tmp_path):
    """The second loop's trip count is the kernel's num_k_1 and its pipeline state pipe_1; sizes
    of those names stay the program's own, spelled pipe_1_1 and num_k_1_1 in the kernel."""
    prog = tmp_path / "p.cyp"
    prog.write_text(re.sub(r"\bK\b", "pipe_1", re.sub(r"\bJ\b", "num_k_1", PROG.read_text())))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["build", str(prog), "-m", str(MAP), "-o", str(out)])
    assert r.exit_code == 0, r.output
    cu = (out / "p.cu").read_text()
    assert "const int num_k = cdiv(pipe_1_1, 64);" in cu
    assert "const int num_k_1 = cdiv(num_k_1_1, 64);" in cu
    assert "cypress::PipelineState<STAGES> pipe_1;" in cu and "pipe_1.advance();" in cu
    assert "int pipe_1_1, int num_k_1_1" in cu and "int64_t num_k_1) {" not in cu
    assert json.loads((out / "p.json").read_text())["sizes"][-2:] == ["pipe_1", "num_k_1"]


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_the_two_loop_kernel_compiles_for_sm90a(tmp_path):
    r, out = _build(tmp_path)
    assert r.exit_code == 0, r.output
    stderr = compiled.ptxas_report(out / "gemm_two_loops.cu", tmp_path / "lib.so")
    assert "C7519" not in stderr and "C7517" not in stderr, "ptxas inserted a wgmma fence or wait"
    spills = [ln for ln in stderr.splitlines() if "spill stores" in ln]
    assert spills and all(" 0 bytes spill stores" in ln for ln in spills), spills


def test_a_persistent_block_with_a_static_trip_count_is_refused(tmp_path, mapping_variant):
    """Its after-loop pipeline positions are folded to constants, right only for a block's
    first tile; `persistent: false` builds."""
    prog = tmp_path / "p.cyp"
    prog.write_text(PROG.read_text().replace("for k in srange(cdiv(J, W)):", "for k in srange(4):"))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["build", str(prog), "-m", str(MAP), "-o", str(out)])
    assert r.exit_code != 0 and "error[E050]" in r.output and "static trip count" in r.output, (
        r.output
    )
    m = mapping_variant(MAP, "persistent: true", "persistent: false")
    r = CliRunner().invoke(main, ["build", str(prog), "-m", str(m), "-o", str(tmp_path / "out2")])
    assert r.exit_code == 0, r.output
