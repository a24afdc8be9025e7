"""FP8 GEMM (issue #39): programs/gemm_fp8.cyp (C = scale_a * scale_b * A @ Bᵀ, A and B e4m3 or
e5m2) compiles to k32 wgmmas on K-major 128-byte shared tiles loaded by 1-byte TMA maps, and the
compiler refuses, located, what an FP8 wgmma cannot do: an MN-major FP8 operand, a k16 atom on
FP8 operands, A and B of different types.  The GPU check is bench/gpu_check.py (``gemm_fp8``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cypressc.build import render_build
from cypressc.diagnostics import CypressError, CypressErrors
from cypressc.lang.checker import check_program
from cypressc.lang.parser import parse_source
from tests import compiled

ROOT = Path(__file__).resolve().parents[2]
MAP = "mappings/gemm_fp8/h100.yaml"


def _cuda(dtypes: dict[str, str] | None = None) -> str:
    files = render_build(
        compiled.tree("gemm_fp8", MAP, dtypes), compiled.snapshots("gemm_fp8", MAP, dtypes=dtypes)
    ).files
    return files["gemm_fp8.cu"]


@pytest.mark.parametrize(
    "dtypes, ctype, out",
    [
        (None, "__nv_fp8_e4m3", "__nv_bfloat16"),
        ({"F8": "f8e5m2", "T": "f16"}, "__nv_fp8_e5m2", "__half"),
    ],
)
def test_k32_wgmma_on_k_major_byte_tiles(dtypes, ctype, out):
    cu = _cuda(dtypes)
    # a 128-column FP8 K tile is one 128-byte swizzled row: four k32 steps of 32 bytes
    assert "A_smem_STAGE = 16384, A_smem_CHUNK = 16384;  // 128x128" in cu
    assert "// %e5: warpgroup_mma, 4 k32 step(s), B K-major" in cu
    assert "(kk / 4) * A_smem_CHUNK + ((cw * 64)) * 128 + (kk % 4) * 32" in cu
    assert (
        f"cypress::wgmma<256, {ctype}, cypress::Major::K, cypress::Major::K>(da, db, Cacc_reg[0])"
        in cu
    )
    # 1-byte TMA maps of 128 x 128 and 256 x 128 boxes; C stays 16-bit
    assert "make_tma_map(&tm_A_128x128, A, false, K, M, 1, 128, 128, 2, 128, 1)" in cu
    assert "make_tma_map(&tm_B_256x128, B, false, K, N, 1, 128, 256, 2, 128, 1)" in cu
    assert f"{out}* __restrict__ C" in cu and f"const {ctype}*" not in cu.split("extern")[0]
    # the per-tensor scales on the accumulator, before the epilogue converts it
    scale = cu.index("Cacc_reg[0][i] *= (scale_a * scale_b)")
    assert scale < cu.index("cypress::tma_store_2d")
    # the 16-byte row rule of a 1-byte tensor: K % 16
    assert "if (!(K % 16 == 0)) return cudaErrorInvalidValue;" in cu


MN_MAJOR = """
@task("mma", Leaf, reads=["A", "B", "C"], writes=["C"])
def mma_thread(C: tensor[2, f32], A: tensor[2, f8e4m3], B: tensor[2, f8e4m3]):
    warpgroup_mma(WGMMA_64x256x32(), C, A, B)
"""


def _errors(src: str) -> list[CypressError]:
    with pytest.raises(CypressErrors) as ei:
        check_program(parse_source(src, "c.cyp"))
    return ei.value.errors


def test_mn_major_fp8_operand_is_refused_with_the_reason():
    errs = _errors(MN_MAJOR)
    assert [(e.code, e.loc.line) for e in errs] == [("E032", 4), ("E032", 4)]
    assert errs[1].message == "'B' of warpgroup_mma() must be f16 or bf16, got f8e4m3"
    assert "K-major" in errs[1].hint and "warpgroup_mma_bt" in errs[1].hint


def test_operands_of_one_type():
    src = MN_MAJOR.replace("warpgroup_mma(", "warpgroup_mma_bt(").replace(
        "B: tensor[2, f8e4m3]", "B: tensor[2, f8e5m2]"
    )
    (e,) = _errors(src)
    assert e.code == "E032" and e.loc.line == 4
    assert (
        e.message
        == "'Bt' of warpgroup_mma_bt() is f8e5m2 but 'A' is f8e4m3: a wgmma's operands have one element type"
    )
    (e,) = _errors(
        MN_MAJOR.replace("warpgroup_mma(", "warpgroup_mma_bt(").replace(
            "A: tensor[2, f8e4m3]", "A: tensor[2, f16]"
        )
    )
    assert "is f8e4m3 but 'A' is f16" in e.message


def test_k16_atom_on_fp8_operands_is_refused_at_the_mapping(tmp_path):
    """The full mapping binds the atoms; a k16 one on FP8 operands is an E040 at its YAML value."""
    text = (ROOT / "tests/mappings/full/gemm_fp8/h100.yaml").read_text()
    bad = tmp_path / "k16.yaml"
    bad.write_text(text.replace("WGMMA_64x256x32", "WGMMA_64x256x16"))
    with pytest.raises(CypressError) as ei:
        compiled.snapshots(
            ROOT / "tests/programs/full/gemm_fp8.cyp", bad, until="dependence-analysis"
        )
    e = ei.value
    assert e.code == "E040" and e.loc.file.endswith("k16.yaml")
    assert "WGMMA_64x256x16" in bad.read_text().splitlines()[e.loc.line - 1]
    assert e.message.startswith(
        "atom WGMMA_64x256x16 is a k16 wgmma, but warpgroup_mma_bt()'s operands are f8e4m3"
    )
    assert e.hint == "use `WGMMA_64x256x32`"


def test_unbound_atom_derives_k32_from_the_operands():
    """The sugared mapping leaves MMA unbound: dependence analysis derives the k32 atom for
    the mma tree (FP8 operands) and the k16 one for the trees that touch the accumulator only."""
    from cypressc.ir.printer import print_module

    text = print_module(
        compiled.modules("gemm_fp8", MAP, until="dependence-analysis")["dependence-analysis"]
    )
    assert "warpgroup_mma_bt(WGMMA_64x256x32" in text
    assert "x16" not in text.split("warpgroup_mma_bt")[1].split("\n")[0]


def test_per_row_vectors_of_an_external():
    """A rank-1 operand named like the first operand's rows is read per row, any other per
    column (programs/gemm_fp8_rowwise.cyp's scale_rows_cols: scale_a by r, scale_b by c)."""
    from cypressc.lang.parser import parse_file

    prog = parse_file(ROOT / "programs/gemm_fp8_rowwise.cyp")
    ext = next(e for e in prog.externals if e.name == "scale_rows_cols")
    assert [ext.per_row(n) for n in ("c", "sa", "sb")] == [False, True, False]
    cu = render_build(
        compiled.tree("gemm_fp8_rowwise", "mappings/gemm_fp8_rowwise/h100.yaml"),
        compiled.snapshots("gemm_fp8_rowwise", "mappings/gemm_fp8_rowwise/h100.yaml"),
    ).files["gemm_fp8_rowwise.cu"]
    # a thread's two row scales loaded once, before the loop; a column pair's scales once for
    # the pair's two rows
    assert "v1[h] = (((b0 * 128) + (cw * 64))) + r < M ? scale_a[" in cu
    loop = cu[cu.index("for (int jc = 0; jc < 32; ++jc) {") :]
    assert loop.index("const float v2_1 =") < loop.index("for (int h = 0; h < 2; ++h) {")
    assert "cypress_ops::scale_rows_cols(Cacc_reg[0][2 * j + 1], v1[h], v2_1);" in loop
    assert cu.count("scale_a[") == 1 and cu.count("scale_b[") == 2


BLOCKWISE = "mappings/gemm_fp8_blockwise/h100.yaml"


def _blockwise_cuda(program: str | None = None, mapping: str = BLOCKWISE) -> str:
    """programs/gemm_fp8_blockwise.cyp's CUDA (``program``: that text instead)."""
    from cypressc.mapping.loader import load_mapping
    from cypressc.mapping.tasktree import instantiate
    from cypressc.pipeline import compile_module

    if program is None:
        tree = compiled.tree("gemm_fp8_blockwise", mapping)
        return render_build(tree, compiled.snapshots("gemm_fp8_blockwise", mapping)).files[
            "gemm_fp8_blockwise.cu"
        ]
    src = ROOT / "programs" / "gemm_fp8_blockwise.cyp"
    prog = check_program(parse_source(program, str(src)))
    tree = instantiate(prog, load_mapping(ROOT / mapping))
    return render_build(tree, dict(compile_module(tree))).files["gemm_fp8_blockwise.cu"]


def test_a_block_scale_is_one_element_read_once_per_step():
    """``sb: tensor[(1,), f32]`` is one element every element of the call reads: B's 128 x 128
    block scale SB[j][k] (DeepGEMM's NB x KB layout), loaded from global memory once per step
    with each coordinate guarded, the promotion one FMA per element; the launcher checks that
    SB has a row per column tile and a column per K block."""
    from cypressc.lang.parser import parse_file

    prog = parse_file(ROOT / "programs/gemm_fp8_blockwise.cyp")
    ext = next(e for e in prog.externals if e.name == "promote")
    assert [ext.broadcast(n) for n in ("c", "t", "sa", "sb")] == [False, False, False, True]
    assert not ext.per_row("sb") and ext.per_row("sa")
    cu = _blockwise_cuda()
    step = cu[cu.index("// %e8: promote()") :]
    load = "const float v3 = (b1) < NB && (kb) < KB ? SB[((b1 * KB) + kb)] : float{};"
    assert step.index(load) < step.index("for (int j = 0; j < 32; ++j) {")
    assert (
        "cypress_ops::promote(Cacc_reg[0][2 * j + 1], Tmp_reg[0][2 * j + 1], v2[j % 2], v3);"
        in step
    )
    assert cu.count("SB[") == 1
    assert (
        "if (!(cdiv(N, 128) <= NB)) return cudaErrorInvalidValue;  // SB is sliced by the grid's blocks"
        in cu
    )
    assert "if (!(cdiv(K, 128) <= KB)) return cudaErrorInvalidValue;" in cu


def test_a_one_element_operand_must_be_one_global_element(tmp_path):
    """The backend refuses (E050, at the kernel's instance) a ``tensor[(1,), …]`` operand bound
    to a longer piece, and one mapped to shared memory (before any shared buffer is laid out
    for it); the interpreter refuses the longer piece too (ValueError: its semantics would read
    one element of many)."""
    import numpy as np

    from cypressc.lang.externals import leaf_fn
    from cypressc.lang.intrinsics import Operand

    text = (ROOT / "programs/gemm_fp8_blockwise.cyp").read_text()
    whole_row = text.replace(
        'launch("promote", Cacc, Tmp, SAs[k], SBs[k])',
        'launch("promote", Cacc, Tmp, SAs[k], SBr[0])',
    ).replace(
        "    SBs = partition_by_slices(SB, 1)  # SBs[k]: this tile's scale of K block k (one element)\n",
        "    SBs = partition_by_slices(SB, 1)  # SBs[k]: this tile's scale of K block k (one element)\n"
        "    SBr = partition_by_slices(SB, 0)\n",
        1,
    )
    assert whole_row != text
    with pytest.raises(CypressError) as ei:
        _blockwise_cuda(whole_row)
    assert ei.value.code == "E050"
    assert "%SBr[0] has a run-time number of element(s) for a tensor[(1,), ...]" in ei.value.message
    shared = (
        (ROOT / BLOCKWISE)
        .read_text()
        .replace(
            "{tree: promote, mems: [NONE, NONE, SHARED, GLOBAL]}",
            "{tree: promote, mems: [NONE, NONE, SHARED, SHARED]}",
        )
    )
    (tmp_path / "m.yaml").write_text(shared)
    with pytest.raises(CypressError) as ei:
        _blockwise_cuda(mapping=str(tmp_path / "m.yaml"))
    assert ei.value.code == "E050"
    assert "in SHARED as its one-element operand 'sb'" in ei.value.message
    assert "is read from global memory (map it GLOBAL)" in ei.value.message
    from cypressc.lang.parser import parse_file

    prog = parse_file(ROOT / "programs/gemm_fp8_blockwise.cyp")
    run = leaf_fn(next(x for x in prog.externals if x.name == "promote")).semantics
    ids = (np.arange(2), np.arange(3))
    c, t = Operand(np.ones((2, 3)), ids), Operand(np.full((2, 3), 2.0), ids)
    sa = Operand(np.array([1.0, 10.0]), (np.arange(2),))
    got = run(c, t, sa, Operand(np.array([0.5]), (np.arange(1),)))[0]
    assert np.array_equal(got, [[2.0, 2.0, 2.0], [11.0, 11.0, 11.0]])
    with pytest.raises(ValueError, match="declared tensor\\[\\(1,\\), ...\\]"):
        run(c, t, sa, Operand(np.array([0.5, 0.25]), (np.arange(2),)))


def test_block_scaled_promotion_overlaps_the_next_wgmma():
    """programs/gemm_fp8_blockwise.cyp's software-pipelined variant: sync-insertion finds that
    the promotion of block k - 1 touches nothing block k's wgmma writes, so it runs between the
    commit and the wait (the inference that overlaps FlashAttention-3's softmax); the plain
    variant waits first.  Both are GPU-checked in bench/gpu_check.py."""
    mp = "tests/mappings/gemm_fp8_blockwise_overlap.yaml"
    cu = render_build(
        compiled.tree("gemm_fp8_blockwise", mp), compiled.snapshots("gemm_fp8_blockwise", mp)
    ).files["gemm_fp8_blockwise.cu"]
    loop = cu[cu.index("float Tmp_reg[1][64];") :]
    order = [
        loop.index(s)
        for s in (
            "cypress::commit();",
            "cypress_ops::promote(Cacc_reg[0][2 * j + 0], Prev_reg[0][2 * j + 0]",
            "cypress::wait<0>();  // %Tmp_reg ready (raw)",
            "Prev_reg[0][i] = Tmp_reg[0][i];",
        )
    ]
    assert order == sorted(order)
    # SAs[max(k - 1, 0)] is bounded by the counter: the launcher checks the K blocks' scales
    assert "if (!(cdiv(K, 128) <= KB)) return cudaErrorInvalidValue;" in cu
    plain = (ROOT / "tests/golden/cu/gemm_fp8_blockwise.cu").read_text()
    assert plain.index("cypress::wait<0>();") < plain.index("cypress_ops::promote(")


def test_a_vector_named_like_both_dimensions_is_refused():
    """``c: tensor[(R, R), f32]`` with ``s: tensor[(R,), f32]``: per row or per column is
    ambiguous, so the declaration is refused (E014 at the vector's type) instead of guessed."""
    src = (
        'include("ops/scales.cuh")\n\n'
        '@external("cypress_ops::scale_rows_cols", writes=["c"])\n'
        "def f(c: tensor[(R, R), f32], sa: tensor[(R,), f32], sb: tensor[(R,), f32]):\n"
        '    """x"""\n'
    )
    with pytest.raises(CypressErrors) as ei:
        parse_source(src, "amb.cyp")
    (e,) = ei.value.errors
    assert e.code == "E014" and (e.loc.line, e.loc.col) == (4, 35)
    assert "both the rows and the columns of 'c'" in e.message
