"""``deterministic: true`` (issue #38, pass ``reduction-order``): the blocks along the grid's
innermost dimension add into each tile in their order, so a reduction's sum is the same bits
on every run.  The pass marks the block's reduce-add ``copy.add.ordered`` after two Z3 proofs
(the blocks sharing a tile differ only along that dimension; each block's tiles increase from
one step to the next) and refuses the knob (E064, at the knob) when either fails or the add is
not one per block; the CUDA lowering walks the blocks of that dimension from the last one down,
makes each wait for the one started before it, publishes its progress, and allocates the
progress words.  The split-K GEMM of tests/programs/reduce_rows.cyp (one add
per block, after the main loop) and the attention backward (one add per step) are the cases;
the GPU runs are tests/gpu/test_flash_attention_op_gpu.py (bit-identical gradients)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from cypressc.build import render_build
from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir.intsets import IndexSpace, always_increases, blocks_may_share, stays_inside
from cypressc.ir.printer import print_module
from cypressc.ir.reader import parse_module
from cypressc.ir.subst import walk_ops
from cypressc.lang.kinds import Proc
from cypressc.pipeline import compile_program
from tests.compiled import spill_lines, tree

ROOT = Path(__file__).resolve().parents[2]
RR = ROOT / "tests" / "programs" / "reduce_rows.cyp"
RR_SMEM = (ROOT / "tests" / "mappings" / "reduce_rows_smem.yaml").read_text()
FAB = ROOT / "tests" / "programs" / "flash_attention_bwd.cyp"
MAPS = ROOT / "tests" / "mappings" / "flash_attention_bwd"


def _deterministic(text: str) -> str:
    """A mapping's text with `deterministic: true` on its main BLOCK instance."""
    out = text.replace("pipeline: 3}", "pipeline: 3, deterministic: true}", 1)
    assert out != text
    return out


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _ordered(m: N.Module) -> list[N.Copy]:
    return [o for o in walk_ops(m.body) if isinstance(o, N.Copy) and o.ordered]


def _refusal(program: Path, mapping: Path) -> CypressError:
    with pytest.raises(CypressError) as e:
        compile_program(tree(program, mapping))
    return e.value


def test_split_k_adds_in_the_order_of_the_k_slices(tmp_path):
    """The split-K grid (row tile, column tile, K slice): the K slice is the innermost
    dimension and the blocks sharing a tile differ only in it, so the one add per block is
    ordered; the CUDA waits for the slice before, adds, marks the block done, and the launcher
    brings a zeroed word per tile; without the knob nothing of it is there."""
    mapping = _write(tmp_path, "det.yaml", _deterministic(RR_SMEM))
    _, m = compile_program(tree(RR, mapping), until="reduction-order")[0][-1]
    (red,) = _ordered(m)
    assert red.reduce == "add"
    assert "copy.add.ordered" in print_module(m)
    cu = render_build(tree(RR, mapping)).files["reduce_rows.cu"]
    word = "order + ((b0 * tiles1 + b1) * tiles2 + b2)"
    pred = f"b2 + 1 < tiles2 ? {word} + 1 : nullptr"  # the slices add from the last one down
    enter = cu.index(f"cypress::order_enter({word}, {pred}, key)")
    add = cu.index("cypress::tma_reduce_add_2d(", enter)
    finish = cu.index(f"cypress::order_finish({word}, {pred})")
    assert enter < add < cu.index("cypress::tma_store_commit();", add) < finish
    # ... and the tile walk starts them so: the slice waited for is always running or done
    assert "b2 = tiles2 - 1 - v / rows;" in cu
    assert "const long long key = ((long long)((b0 * 128)) * N + ((b1 * 128)));" in cu
    assert "cypress::order_workspace(&order, tiles, stream)" in cu
    assert "long long* __restrict__ order)" in cu  # the kernel's last parameter
    plain = render_build(tree(RR, _write(tmp_path, "plain.yaml", RR_SMEM))).files["reduce_rows.cu"]
    assert "order" not in plain.replace("border", "")


def test_ordered_ir_prints_and_reads_back(tmp_path):
    mapping = _write(tmp_path, "det.yaml", _deterministic(RR_SMEM))
    _, m = compile_program(tree(RR, mapping), until="reduction-order")[0][-1]
    text = print_module(m)
    assert print_module(parse_module(text, "det.ir")) == text
    with pytest.raises(CypressError, match="copy.add.ordered"):
        parse_module(text.replace("copy.add.ordered", "copy.add.sorted"), "bad.ir")


@functools.cache
def _bwd(mapping: str) -> tuple[N.Module, str]:
    t = tree(FAB, MAPS / mapping)
    main = compile_program(t, until="reduction-order")[1][-1][1]
    return main, render_build(t).files["flash_attention_bwd.cu"]


def test_the_attention_backward_adds_each_dq_tile_in_the_order_of_the_key_blocks():
    """One reduce-add per step: its key is the dQacc tile's offset (the head and query block
    of the step), a block with no step still marks itself done, and the step that adds last
    marks it done after committing its group; the prep and post kernels are untouched."""
    main, cu = _bwd("h100_d128_det.yaml")
    (red,) = _ordered(main)
    assert red.dims[-1] == N.Dim(N.IBin("cdiv", N.IVar("N"), N.IConst(128)), Proc.BLOCK)
    kernel = cu[cu.index("flash_attention_bwd_dkdv_block_kernel(") :]
    kernel = kernel[: kernel.index("static cudaError_t check(")]
    guard = kernel.index("if (leader && cw == 0 && num_k <= 0) cypress::order_finish(")
    loop = kernel.index("for (int kb = 0; kb < num_k; ++kb)", guard)
    enter = kernel.index("cypress::order_enter(", loop)
    assert kernel.index("cypress::tma_reduce_add_3d(", enter) > enter
    last = kernel.index("if (kb == num_k - 1)", enter)
    assert kernel.index("cypress::order_finish(", last) < kernel.index("pipe.advance();", last)
    assert kernel.count("cypress::order_finish(") == 2
    _, plain = _bwd("h100_d128_tma.yaml")
    assert "order_enter" not in plain and "order_workspace" not in plain
    assert cu.count("cypress::order_workspace(") == 1  # the main kernel's launch only


def test_the_deterministic_backward_compiles_without_spills(tmp_path):
    """The waits and the progress words cost the consumers no spill: the block is marked done
    by its last step, so no word's address stays live across the main loop (one did, and
    spilled 24 bytes, before)."""
    _, cu = _bwd("h100_d128_det.yaml")
    r = render_build(tree(FAB, MAPS / "h100_d128_det.yaml"))
    assert r.files["flash_attention_bwd.cu"] == cu
    spills = spill_lines(r.files, tmp_path, "flash_attention_bwd.cu")
    assert len(spills) == 3 and all(" 0 bytes spill stores" in ln for ln in spills), spills


@pytest.mark.parametrize(
    "edit, message",
    [
        # the K slice outermost: blocks of different (outer) slices add into one tile
        (
            lambda p: p.replace(
                "for i, j, s in prange(cdiv(M, U), cdiv(N, V), cdiv(K, S)):",
                "for s, i, j in prange(cdiv(K, S), cdiv(M, U), cdiv(N, V)):",
            ),
            "blocks that differ in a grid dimension other than the innermost may add into "
            "the same tile of C",
        ),
    ],
    ids=["sharing-along-an-outer-dimension"],
)
def test_an_order_the_compiler_cannot_prove_is_refused_at_the_knob(tmp_path, edit, message):
    program = _write(tmp_path, "reduce_rows.cyp", edit(RR.read_text()))
    mapping = _write(tmp_path, "det.yaml", _deterministic(RR_SMEM))
    e = _refusal(program, mapping)
    assert e.code == "E064" and message in e.message, e.message
    assert (Path(e.loc.file).name, e.loc.line) == ("det.yaml", 12)


def test_a_block_that_adds_per_warpgroup_or_adds_nothing_is_refused(tmp_path):
    regs = (ROOT / "tests" / "mappings" / "reduce_rows.yaml").read_text()
    e = _refusal(RR, _write(tmp_path, "regs.yaml", _deterministic(regs)))
    assert e.code == "E064" and "runs per WARPGROUP" in e.message, e.message
    gemm = (ROOT / "mappings" / "gemm" / "h100.yaml").read_text()
    det = gemm.replace(
        "    warpspecialize: true\n", "    warpspecialize: true\n    deterministic: true\n", 1
    )
    assert det != gemm
    e = _refusal(ROOT / "programs" / "gemm.cyp", _write(tmp_path, "gemm.yaml", det))
    assert e.code == "E064" and "adds into no tensor" in e.message, e.message


def test_a_persistent_ordered_kernel_is_refused(tmp_path):
    text = _deterministic(RR_SMEM).replace(
        "deterministic: true}", "deterministic: true, persistent: true}"
    )
    with pytest.raises(CypressError) as e:
        render_build(tree(RR, _write(tmp_path, "p.yaml", text)))
    assert e.value.code == "E050" and "persistent" in e.value.message


# ---- the two proofs on hand-written index spaces
_T = N.IVar("t")
_N = N.IVar("n")
_SPACE = IndexSpace({"t": (N.IConst(0), _N)}, {}, frozenset({"n"}))


@pytest.mark.parametrize(
    "index, increases",
    [
        ((_T,), True),
        ((N.IBin("-", N.IBin("-", _N, N.IConst(1)), _T),), False),  # n - 1 - t: backwards
        ((N.IBin("//", _T, N.IConst(2)),), False),  # every tile twice
        ((N.IBin("//", _T, N.IConst(2)), N.IBin("%", _T, N.IConst(2))), True),
        ((N.IBin("%", _T, N.IConst(2)), N.IBin("//", _T, N.IConst(2))), False),
    ],
    ids=["t", "n-1-t", "t//2", "(t//2, t%2)", "(t%2, t//2)"],
)
def test_always_increases_is_a_proof(index, increases):
    assert always_increases(index, "t", _SPACE) is increases


def test_blocks_may_share_only_along_the_free_dimension():
    x, y = N.IProc(Proc.BLOCK, 0), N.IProc(Proc.BLOCK, 1)
    grid = (N.IVar("n"), N.IVar("n"))
    assert not blocks_may_share((x,), _SPACE, grid, free=1)  # the tile names block x
    assert blocks_may_share((y,), _SPACE, grid, free=1)  # blocks of any x share y's tile
    assert not blocks_may_share((y,), _SPACE, grid, free=0)
    # x * 4 + t % 4 (t < 4 here): block x's own four tiles
    space = IndexSpace({"t": (N.IConst(0), N.IConst(4))}, {}, frozenset({"n"}))
    own = N.IBin("+", N.IBin("*", x, N.IConst(4)), N.IBin("%", _T, N.IConst(4)))
    assert not blocks_may_share((own,), space, grid, free=1)
    wide = N.IBin("+", N.IBin("*", x, N.IConst(4)), _T)  # t < n: into the next blocks' tiles
    assert blocks_may_share((wide,), _SPACE, grid, free=1)


def test_stays_inside_keeps_the_row_major_order_honest():
    """(t // (n + 1), (t % (n + 1)) * 64) increases lexicographically, but its second
    coordinate runs past an extent of n * 64, where the row-major offset of the next tile is no
    larger: the order proof alone would accept it."""
    n = N.IVar("n")
    index = (
        N.IBin("//", _T, N.IBin("+", n, N.IConst(1))),
        N.IBin("*", N.IBin("%", _T, N.IBin("+", n, N.IConst(1))), N.IConst(64)),
    )
    extents = (n, N.IBin("*", n, N.IConst(64)))
    space = IndexSpace({"t": (N.IConst(0), N.IBin("*", n, n))}, {}, frozenset({"n"}))
    assert always_increases(index, "t", space)
    assert not stays_inside(index, extents, space, ())
    inside = (N.IBin("//", _T, n), N.IBin("*", N.IBin("%", _T, n), N.IConst(64)))
    assert stays_inside(inside, extents, space, ())
