"""A GLOBAL->SHARED copy before the main loop (issue #10 item 5): tests/programs/gemm_resident_a.cyp
copies each block's 64 x 128 A panel into shared memory once, before its K loop, and every step
multiplies a 32-column slice of it with a streamed B tile.  sync-insertion gives the copy its
own full barrier (one stage, phase 0: no empty barrier, nothing overwrites the panel); the CUDA
issues the load once per tile before the main loop and waits on it once; the concurrent
interpreter is clean on it (tests/ir/test_concurrent.py, PAIRS); nvcc compiles it; a persistent
block, whose tiles would share the barrier and overwrite the panel, is refused (E050)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cypressc.cli import main
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.analysis import Symbols
from cypressc.ir.shapes import static
from cypressc.ir.subst import walk_ops
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]
PROG = ROOT / "tests" / "programs" / "gemm_resident_a.cyp"
MAP = ROOT / "tests" / "mappings" / "gemm_resident_a.yaml"
PANEL = "tm_A_64x64, &full_A_smem[0]"  # the panel's TMA load (2 boxes of 64 columns)


def _build(tmp_path: Path, mapping: Path = MAP) -> str:
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["build", str(PROG), "-m", str(mapping), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return (out / "gemm_resident_a.cu").read_text()


def test_the_copy_before_the_loop_gets_a_one_stage_full_barrier_and_one_wait():
    tree = instantiate(check_program(parse_file(PROG)), load_mapping(MAP))
    m = dict(compile_module(tree, until="sync-insertion"))["sync-insertion"]
    sym = Symbols(m)
    top = list(m.body.ops)
    (loop,) = [i for i, o in enumerate(top) if isinstance(o, N.For)]
    (copy,) = [i for i, o in enumerate(top) if isinstance(o, N.Copy)]
    cp = top[copy]
    assert copy < loop and (sym.mem(cp.src), sym.mem(cp.dst)) == ("GLOBAL", "SHARED")
    assert sym.root(cp.dst) == "A_smem" and sym.allocs["A_smem"].shape == (
        N.IConst(64),
        N.IConst(128),
    )
    assert cp.bar == S.BarIdx("full_A_smem", N.IConst(0))
    bars = {o.name: o for o in walk_ops(m.body) if isinstance(o, S.MBarrier)}
    full = bars["full_A_smem"]
    assert (full.kind, full.stages, full.count) == ("full", 1, 1)
    assert (full.arrive_role, full.wait_role) == (("producer",), ("consumer",))
    # one tile per block: nothing writes the panel after the copy (no empty barrier, no
    # release; a persistent block's next tile would: tests/backend/test_persistent_attention.py)
    assert sorted(n for n, b in bars.items() if b.kind == "empty") == ["empty_B_smem"]
    assert not [o for o in walk_ops(m.body) if isinstance(o, S.Arrive) and o.bar == "full_A_smem"]
    atx = top[copy - 1]
    assert isinstance(atx, S.ArriveExpectTx) and atx.bar == "full_A_smem" and atx.role == "producer"
    assert atx.bytes == 64 * 128 * 2 and static(atx.stage) == 0
    waits = [o for o in walk_ops(m.body) if isinstance(o, S.Wait) and o.bar == "full_A_smem"]
    assert len(waits) == 1 and waits[0] is top[loop - 1]  # once, right before the loop
    w = waits[0]
    assert w.role == "consumer" and static(w.stage) == 0 and static(w.parity) == 0
    assert [(e.src, e.hazard, e.tensor, e.via) for e in w.edges] == [
        (cp.ev, "raw", "A_smem", "entry")
    ]


def test_explain_prints_the_panel_synchronization_before_the_loop():
    r = CliRunner().invoke(
        main, ["explain", str(PROG), "-m", str(MAP), "--after", "sync-insertion"]
    )
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    at = lambda pat: next(i for i, ln in enumerate(lines) if re.search(pat, ln))
    mbar = at(r"%full_A_smem = mbarrier\[1\] full arrivals\(1\)")
    atx = at(r"arrive_expect_tx %full_A_smem\[0\] 16384 bytes")
    copy = at(r"= copy %Ap\[block_id.x, 0\] -> %A_smem \{\} on %full_A_smem\[0\]")
    wait = at(r"wait %full_A_smem\[0\] parity 0 ")
    loop = at(r"= for %k in \[0, 4\) pipeline\(2\)")
    assert mbar < atx < copy < wait < loop
    assert "from %e1 -> %e5 (raw %A_smem, into the loop)" in lines[wait]


def test_cuda_loads_the_panel_once_before_the_main_loop_and_waits_once(tmp_path):
    src = _build(tmp_path)
    prod, cons = src.split("// ---- consumer warpgroups")
    prod = prod.split("// ---- producer warpgroup")[1]
    assert src.count(PANEL) == 1 and src.count("cypress::wait(&full_A_smem[0], 0);") == 1
    assert src.count("cypress::arrive_expect_tx(&full_A_smem[0], 16384);") == 1
    # producer: in the tile loop (which runs once: not persistent), before the main loop
    assert "t += num_tiles)" in prod and "kbase" not in src
    tile, atx, load = (
        prod.index(s)
        for s in ("for (int t = blockIdx.x", "arrive_expect_tx(&full_A_smem[0]", PANEL)
    )
    assert tile < atx < load < prod.index("for (int kb = 0; kb < num_k; ++kb)")
    assert (
        "tma_load_2d(s_A_smem + j * A_smem_CHUNK, &tm_A_64x64, &full_A_smem[0], "
        "0 + 64 * j, (b0 * 64));"
    ) in prod
    # consumers: one wait for phase 0 before the main loop, none inside it
    wait = cons.index("cypress::wait(&full_A_smem[0], 0);")
    loop = cons.index("for (int kb = 0; kb < num_k; ++kb)")
    assert cons.index("for (int t = blockIdx.x") < wait < loop
    assert "full_A_smem" not in cons[loop:]
    assert "constexpr int A_smem_STAGE = 16384, A_smem_CHUNK = 8192;" in src  # one stage, 2 chunks
    assert "make_tma_map(&tm_A_64x64, A, false, K, M, 1, 64, 64, 2))" in src  # 128-byte swizzle
    # step kb reads columns [32 kb, 32 kb + 32) of the panel: k16 steps 2 kb and 2 kb + 1
    da = re.findall(r"desc_k_sw128\([^;]*;", src)
    assert da == [
        "desc_k_sw128(s_A_smem + ((kk + ((kb * 32)) / 16) / 4) * A_smem_CHUNK + (0) * 128 "
        "+ ((kk + ((kb * 32)) / 16) % 4) * 32);"
    ]
    assert "const int num_k = 4;" in src


def test_without_a_producer_the_issuer_thread_loads_the_panel(tmp_path, mapping_variant):
    src = _build(tmp_path, mapping_variant(MAP, "warpspecialize: true", "warpspecialize: false"))
    body = src.split("const bool issuer = threadIdx.x == 0;")[1]
    atx = body.index("if (issuer) cypress::arrive_expect_tx(&full_A_smem[0], 16384);")
    guard = body.index(
        "if (issuer) {\n        #pragma unroll\n        for (int j = 0; j < 2; ++j) {\n"
        "          cypress::tma_load_2d(s_A_smem"
    )
    wait = body.index("cypress::wait(&full_A_smem[0], 0);")
    assert atx < guard < wait < body.index("for (int kb = 0; kb < num_k; ++kb)")
    assert src.count(PANEL) == 1


def test_without_a_producer_the_schedule_is_clean(tmp_path, mapping_variant):
    m = mapping_variant(MAP, "warpspecialize: true", "warpspecialize: false")
    r = CliRunner().invoke(
        main, ["explain", str(PROG), "-m", str(m), "--check-schedule", "--schedules", "20"]
    )
    assert r.exit_code == 0, r.output
    assert r.output.strip().endswith("clean (20 schedule(s), sizes M=64 N=64 K=128)")


def test_a_persistent_block_with_a_static_trip_count_is_refused(tmp_path, mapping_variant):
    """The panel itself is fine in a persistent block (its readers release it to the next
    tile); this program's K loop has a static trip count, whose folded positions are not."""
    m = mapping_variant(MAP, "pipeline: 2}", "pipeline: 2, persistent: true}")
    r = CliRunner().invoke(main, ["check", str(PROG), "-m", str(m)])
    assert r.exit_code == 1, r.output
    first = r.stderr.splitlines()[0]
    line = next(
        i for i, ln in enumerate(m.read_text().splitlines(), 1) if "{instance: block," in ln
    )
    assert first.startswith(
        f"{m}:{line}:16: error[E050]: the CUDA backend cannot lower this program yet: "
        "a persistent block whose main loop has a static trip count"
    ), r.stderr
    assert "before the main loop" not in first
    assert "instance: block, variant: gemm_block" in r.stderr  # the source line under the caret


def test_a_k_slice_past_the_panel_is_refused(tmp_path, mapping_variant):
    """W = 48: cdiv(128, 48) = 3 steps, and the third slice [96, 144) ends past the panel."""
    r = CliRunner().invoke(
        main, ["check", str(PROG), "-m", str(mapping_variant(MAP, "{W: 32}", "{W: 48}"))]
    )
    assert r.exit_code == 1, r.output
    assert (
        "error[E050]" in r.stderr
        and "a K-major wgmma operand at column 96 (loop step 2) of the 128-column "
        "%A_smem: a 48-column K slice must start on a multiple of 16 inside the tile"
        in r.stderr
    ), r.stderr


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_it_compiles_for_sm90a(tmp_path):
    _build(tmp_path)
    stderr = compiled.ptxas_report(tmp_path / "out" / "gemm_resident_a.cu", tmp_path / "lib.so")
    spills = [ln for ln in stderr.splitlines() if "spill stores" in ln]
    assert spills and all(" 0 bytes spill stores" in ln for ln in spills), spills
    assert "C7508" not in stderr, "setmaxnreg was ignored"
