"""A wgmma with its A operand in registers, fed by a SIMT conversion between two wgmmas of
one main-loop step (issue #10 item 5; FlashAttention's P·V): tests/programs/chain_gemm.cyp
computes O = T(Q[:, :64] @ K[:, :64]ᵀ) @ V.

What is checked here: ``partition_by_mma(..., "A")`` splits a tile like the accumulator
(the PTX A fragment of m64nNk16), so copy elimination leaves P as the converting threads'
own registers; sync-insertion orders the conversion after S's wgmma retired
(``wait_group 0``) and before P's wgmma (``fence wgmma``), with the K and V stages on
separate channels; the CUDA converts in registers and issues ``wgmma_rs``; a zero fill
that only the next wgmma reads becomes that wgmma's scale-d (ptxas then injects no
``warpgroup.wait``, C7517).  The concurrent interpreter and its teeth run on the program
in tests/ir/test_concurrent.py, the value check of every pass in
tests/ir/test_passes_interp.py, and the GPU check in bench/gpu_check.py (``chain_gemm``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cypressc.backend import plan as P
from cypressc.backend.emit import emit_cuda
from cypressc.backend.peephole import fold_zero_fills
from cypressc.diagnostics import Loc
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.shapes import layout_key, mma_coords, mma_piece_shape
from cypressc.ir.subst import walk_ops
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_file
from cypressc.mapping.loader import load_mapping
from cypressc.mapping.tasktree import instantiate
from cypressc.pipeline import compile_module
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]
PROG = ROOT / "tests" / "programs" / "chain_gemm.cyp"
MAP = ROOT / "tests" / "mappings" / "chain_gemm.yaml"


def _snaps() -> dict[str, N.Module]:
    tree = instantiate(check_program(parse_file(PROG)), load_mapping(MAP))
    return dict(compile_module(tree))


def test_the_a_fragment_is_the_accumulator_layout():
    shape = (N.IConst(64), N.IConst(32))
    for proc in ("WARP", "THREAD"):
        sub = (64, 32) if proc == "WARP" else (16, 32)
        a = mma_piece_shape(
            shape if proc == "WARP" else (N.IConst(16), N.IConst(32)),
            "WGMMA_64x128x16",
            proc,
            "A",
            Loc("t", 1, 1),
        )
        c = mma_piece_shape(
            shape if proc == "WARP" else (N.IConst(16), N.IConst(32)),
            "WGMMA_64x32x16",
            proc,
            "C",
            Loc("t", 1, 1),
        )
        assert a == c
        for i in range(4 if proc == "WARP" else 32):
            for x, y in zip(mma_coords(sub, proc, "A", i), mma_coords(sub, proc, "C", i)):
                assert (x == y).all()
    # thread 5 of a warp holds rows 1 and 9, columns 2, 3, 10, 11 of a k16 step (PTX ISA figure
    # "wgmma .m64nNk16 register fragment A")
    r, c = mma_coords((16, 16), "THREAD", "A", 5)
    assert list(r) == [1, 9] and list(c) == [2, 3, 10, 11]
    assert layout_key("mma", ("WGMMA_64x64x16", "THREAD", "A")) == layout_key(
        "mma", ("WGMMA_64x8x16", "THREAD", "C")
    )
    assert layout_key("mma", ("WGMMA_64x64x16", "THREAD", "B")) != layout_key(
        "mma", ("WGMMA_64x64x16", "THREAD", "C")
    )


def test_p_stays_in_the_converting_threads_registers_and_is_synchronized_from_edges():
    m = _snaps()["sync-insertion"]
    (lp,) = [o for o in m.body.ops if isinstance(o, N.For)]
    body = list(lp.body.ops)
    mmas = [
        o for o in body if isinstance(o, N.Call) and o.fn in ("warpgroup_mma_bt", "warpgroup_mma")
    ]
    assert [o.fn for o in mmas] == [
        "warpgroup_mma_bt",
        "warpgroup_mma",
    ]  # S = Q·Kᵀ (K row-major), O += P·V
    (conv,) = [o for o in body if isinstance(o, N.Call) and o.fn == "copy"]
    assert len(mmas) == 2
    first, second = mmas
    # the second wgmma reads the very register tensor the conversion wrote (no copy between)
    assert second.args[2] == conv.args[1]
    allocs = {o.name: o for o in walk_ops(m.body) if isinstance(o, N.Alloc)}
    p = allocs[conv.args[1].name]
    assert p.mem == "REGISTER" and p.dtype == "f16" and [d.proc for d in p.dims][-1] == "THREAD"
    i1, ic, i2 = body.index(first), body.index(conv), body.index(second)
    between = body[i1:ic]
    (wg,) = [o for o in between if isinstance(o, S.WaitGroup)]
    assert wg.unit == "wgmma" and wg.pending == 0
    assert any(e.src == first.ev and e.dst == conv.ev for e in wg.edges)
    fences = [o for o in body[ic:i2] if isinstance(o, S.Fence) and o.kind == "wgmma"]
    assert fences and any(
        e.src == conv.ev and e.dst == second.ev and e.tensor == p.name for e in fences[0].edges
    )
    # K and V stream on separate channels, each released by its own empty barrier; K's stage
    # is free as soon as the wait_group the conversion needs retired S's wgmma (this step, not
    # mma_in_flight steps later), V's only after a later wait_group retired P·V
    # (the Q panel's one-stage empty barrier, released to the next tile, is not a stage ring)
    loads = {o.ev for o in body if isinstance(o, N.Copy)}
    empties = {
        o.name: o
        for o in walk_ops(m.body)
        if isinstance(o, S.MBarrier) and o.kind == "empty" and set(o.channel) <= loads
    }
    assert len(empties) == 2
    arrives = {o.bar: o for o in body if isinstance(o, S.Arrive) and o.bar in empties}
    kt = next(b for b, a in arrives.items() if any(e.src == first.ev for e in a.edges))
    assert body.index(wg) < body.index(arrives[kt]) < ic and arrives[kt].when is None
    assert arrives[kt].stage == N.ibin("%", N.IVar(lp.var), N.IConst(2))
    v = next(b for b in empties if b != kt)
    assert body.index(arrives[v]) > i2 and arrives[v].when is not None  # lags one step, guarded


def test_the_cuda_converts_in_registers_and_issues_wgmma_rs():
    cu = emit_cuda(_snaps()["cuda-lowering"].kernel)
    loop = cu[cu.index("for (int kb = 0; kb < num_k; ++kb)", cu.index("consumer warpgroups")) :]
    conv = loop.index("cypress::acc_to_a<__half>(")
    assert loop.index("cypress::wait<0>();") < conv < loop.index("cypress::wgmma_rs<64, __half>(")
    assert "uint32_t P_reg[1][16];" in cu  # 64 x 64 f16 per warpgroup: 16 packed pairs a thread
    # S's fill became the first k16 step's scale-d, and is no longer a loop statement
    assert "S_reg[0], kk == 0);" in loop and "S_reg[0][i] = 0" not in cu
    assert "fill %e4 folded in" in loop


def test_a_zero_fill_folds_only_into_the_next_wgmma_that_touches_it():
    zero, one = N.IConst(0), N.IConst(1)
    mma = P.Mma("%e3", "C", "A", zero, "B", 0, 64, 64, "f16")
    sync = P.Sync(S.Fence("wgmma", "consumer"), "")
    fill = P.Fill("%e1", "C", zero)
    out = fold_zero_fills([fill, sync, mma])
    assert out == [sync, P.Mma("%e3", "C", "A", zero, "B", 0, 64, 64, "f16", zero_fill="%e1")]
    # a read of the zeros in between (a conversion) keeps the fill; so does a non-zero fill
    conv = P.Convert("%e2", "C", "D", "f16")
    assert fold_zero_fills([fill, conv, mma]) == [fill, conv, mma]
    assert fold_zero_fills([P.Fill("%e1", "C", one), mma]) == [P.Fill("%e1", "C", one), mma]
    # a wgmma into another accumulator does not take it
    other = P.Mma("%e3", "X", "A", zero, "B", 0, 64, 64, "f16")
    assert fold_zero_fills([fill, other]) == [fill, other]


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_ptxas_injects_no_wait_and_spills_nothing(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(emit_cuda(_snaps()["cuda-lowering"].kernel))
    stderr = compiled.ptxas_report(cu, tmp_path / "k.o")
    assert "C7517" not in stderr and "C7519" not in stderr, stderr[-2000:]
    assert "0 bytes spill stores" in stderr
