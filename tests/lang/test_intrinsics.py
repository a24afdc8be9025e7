"""The intrinsics registry: atom names, leaf-function operand rules, NumPy semantics."""

from __future__ import annotations

import numpy as np
import pytest

from cypressc.lang.atoms import MmaAtom, atom, is_atom_name
from cypressc.lang.intrinsics import (
    LEAF_FUNCTIONS,
    NUMPY_DTYPES,
    Operand,
    round_to,
)


def whole(a: np.ndarray) -> Operand:
    """An operand that was never mma-partitioned: identity coordinates."""
    return Operand(a, tuple(np.arange(n) for n in a.shape))


@pytest.mark.parametrize("n", range(8, 257, 8))
def test_every_wgmma_n_is_an_atom(n):
    name = f"WGMMA_64x{n}x16"
    assert is_atom_name(name)
    a = atom(name)
    assert a == MmaAtom(name, 64, n, 16) and a.threads == 128
    fp8 = f"WGMMA_64x{n}x32"  # m64nNk32: FP8 operands, 32 bytes of a row per instruction
    assert is_atom_name(fp8) and atom(fp8) == MmaAtom(fp8, 64, n, 32)


@pytest.mark.parametrize(
    "name",
    [
        "WGMMA_64x0x16",
        "WGMMA_64x12x16",
        "WGMMA_64x264x16",
        "WGMMA_64x256x8",
        "WGMMA_64x256x64",
        "WGMMA_128x256x16",
        "wgmma_64x256x16",
        "WGMMA_64x256x16 ",
        "HMMA_16x8x16",
        "",
    ],
)
def test_non_atoms(name):
    assert not is_atom_name(name)
    with pytest.raises(KeyError):
        atom(name)


def test_registry_entries():
    assert set(LEAF_FUNCTIONS) == {
        "warpgroup_mma",
        "warpgroup_mma_bt",
        "warpgroup_mma_at",
        "fill",
        "copy",
        "add",
        "mul",
        "scale",
        "row_sum",
        "warpgroup_row_max",
        "warpgroup_row_sum",
        "exp2_diff",
        "scale_rows",
        "div_rows",
        "mask_columns",
        "mask_causal",
        "mask_causal_t",
        "row_log_sum_exp",
    }
    for name, fn in LEAF_FUNCTIONS.items():
        assert fn.name == name and fn.cpp == f"cypress::{name}" and fn.proc == "THREAD" and fn.doc
        assert callable(fn.semantics)
    mma = LEAF_FUNCTIONS["warpgroup_mma"]
    assert mma.collective == "WARPGROUP"
    assert [(r.name, r.kind, r.writes) for r in mma.operands] == [
        ("atom", "atom", False),
        ("C", "tensor", True),
        ("A", "tensor", False),
        ("B", "tensor", False),
    ]
    assert mma.operands[1].mems == ("REGISTER",) and mma.operands[1].dtypes == ("f32",)
    assert mma.operands[3].mems == ("SHARED",)
    assert all(LEAF_FUNCTIONS[f].collective is None for f in ("fill", "copy", "add", "row_sum"))
    fill = LEAF_FUNCTIONS["fill"]
    assert (
        fill.operands[0].writes and not fill.operands[0].reads and fill.operands[1].kind == "scalar"
    )
    assert (
        LEAF_FUNCTIONS["row_sum"].operands[0].rank == 1
        and LEAF_FUNCTIONS["row_sum"].operands[1].rank == 2
    )


def test_fill():
    c = np.ones((4, 8), np.float32)
    out = LEAF_FUNCTIONS["fill"].semantics(whole(c), 0)
    assert set(out) == {0} and out[0].dtype == np.float32 and not out[0].any()
    assert c.all(), "semantics are pure: the input is untouched"


def test_copy_reshapes_into_the_destination():
    src = np.arange(8, dtype=np.float32)
    dst = np.zeros((2, 4), np.float16)
    out = LEAF_FUNCTIONS["copy"].semantics(whole(src), whole(dst))
    assert set(out) == {1} and out[1].shape == (2, 4)
    np.testing.assert_array_equal(out[1], src.reshape(2, 4))


def test_add():
    c = np.full((2, 3), 1.5, np.float32)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = LEAF_FUNCTIONS["add"].semantics(whole(c), whole(x))
    assert set(out) == {0} and out[0].dtype == np.float32
    np.testing.assert_array_equal(out[0], c + x)


def test_row_sum_accumulates():
    y = np.array([10, 20], np.float32)
    a = np.arange(8, dtype=np.float16).reshape(2, 4)
    out = LEAF_FUNCTIONS["row_sum"].semantics(whole(y), whole(a))
    np.testing.assert_array_equal(out[0], [10 + 0 + 1 + 2 + 3, 20 + 4 + 5 + 6 + 7])
    assert out[0].dtype == np.float32


def test_warpgroup_mma_whole_tile():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 16)).astype(np.float16)
    b = rng.standard_normal((16, 32)).astype(np.float16)
    c = rng.standard_normal((64, 32)).astype(np.float32)
    out = LEAF_FUNCTIONS["warpgroup_mma"].semantics("WGMMA_64x32x16", whole(c), whole(a), whole(b))
    assert set(out) == {1}
    ref = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out[1], ref, rtol=1e-5, atol=1e-5)


def test_warpgroup_mma_fragment_uses_c_coordinates():
    """A thread's C fragment holds scattered elements; its coordinates select the product."""
    a = np.arange(4 * 2, dtype=np.float16).reshape(4, 2)
    b = np.arange(2 * 6, dtype=np.float16).reshape(2, 6)
    rows, cols = np.array([1, 3]), np.array([0, 5])
    frag = Operand(np.zeros((2, 2), np.float32), (rows, cols))
    out = LEAF_FUNCTIONS["warpgroup_mma"].semantics("WGMMA_64x8x16", frag, whole(a), whole(b))
    full = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(out[1], full[np.ix_(rows, cols)])


def test_numpy_dtypes_and_rounding():
    assert NUMPY_DTYPES == {
        "f16": np.float16,
        "bf16": np.float32,
        "f32": np.float32,
        "i32": np.int32,
        "f8e4m3": np.float32,
        "f8e5m2": np.float32,
    }
    assert round_to(np.array([1.0005]), "f16").dtype == np.float16
    # bf16 keeps 8 mantissa bits: 1 + 2**-8 is a tie and rounds to even (1.0); 1 + 3*2**-8 rounds up
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -2.5, 3.0e38], np.float32)
    r = round_to(x, "bf16")
    assert r.dtype == np.float32
    np.testing.assert_array_equal(r[:4], [1.0, 1.0, 1 + 2**-6, -2.5])
    assert (r.view(np.uint32) & 0xFFFF == 0).all()
    assert round_to(np.array([1.7]), "i32")[0] == 1


def test_fp8_rounding_matches_the_formats():
    """e4m3 keeps 3 mantissa bits, normals from 2**-6 and saturates at 448 (CUDA's satfinite
    conversion); e5m2 keeps 2, normals from 2**-14; ties go to even; subnormals are evenly
    spaced; NaN stays NaN.  Each value below is worked out by hand from the format."""
    x = np.array(
        [1 + 2**-4, 1 + 3 * 2**-4, 2**-9, 3 * 2**-10, 500.0, -1000.0, 0.0, np.nan], np.float32
    )
    e4 = round_to(x, "f8e4m3")
    assert e4.dtype == np.float32
    # 1 + 2**-4 is a tie between 1 and 1.125 -> 1; 1 + 3 * 2**-4 a tie -> 1.25 (even);
    # 2**-9 is e4m3's smallest subnormal; 3 * 2**-10 a tie between 2**-9 and 2**-8 -> 2**-8
    np.testing.assert_array_equal(e4[:7], [1.0, 1.25, 2**-9, 2**-8, 448.0, -448.0, 0.0])
    assert np.isnan(e4[7])
    e5 = round_to(np.array([1 + 2**-3, 1 + 3 * 2**-3, 2**-16, 60000.0], np.float32), "f8e5m2")
    np.testing.assert_array_equal(e5, [1.0, 1.5, 2**-16, 57344.0])
    # infinities saturate too (satfinite), in both formats
    inf = np.array([np.inf, -np.inf], np.float32)
    np.testing.assert_array_equal(round_to(inf, "f8e4m3"), [448.0, -448.0])
    np.testing.assert_array_equal(round_to(inf, "f8e5m2"), [57344.0, -57344.0])


def test_warpgroup_mma_bt_reads_b_as_the_n_by_k_tile_it_is_stored_as():
    """C += A @ Btᵀ: the same instruction as warpgroup_mma with B given N x K (K-major); a
    thread's accumulator piece is placed by its coordinates, as for warpgroup_mma."""
    from cypressc.lang.intrinsics import Operand

    bt = LEAF_FUNCTIONS["warpgroup_mma_bt"]
    assert bt.collective == "WARPGROUP" and [r.name for r in bt.operands] == [
        "atom",
        "C",
        "A",
        "Bt",
    ]
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 32)), rng.standard_normal((16, 32))  # A: M x K, Bt: N x K
    rows, cols = np.array([1, 9]), np.array([2, 3, 10, 11])
    c = Operand(np.ones((2, 4), np.float32), (rows, cols))
    out = bt.semantics(
        "WGMMA_64x16x16",
        c,
        Operand(a, (np.arange(64), np.arange(32))),
        Operand(b, (np.arange(16), np.arange(32))),
    )[1]
    assert np.allclose(out, 1 + (a @ b.T)[np.ix_(rows, cols)], atol=1e-5)
    plain = LEAF_FUNCTIONS["warpgroup_mma"].semantics(
        "WGMMA_64x16x16",
        c,
        Operand(a, (np.arange(64), np.arange(32))),
        Operand(b.T.copy(), (np.arange(32), np.arange(16))),
    )[1]
    assert np.array_equal(out, plain)


def test_warpgroup_mma_at_reads_a_as_the_k_by_m_tile_it_is_stored_as():
    """C += Atᵀ @ B: the same instruction as warpgroup_mma with A given K x M (MN-major, shared
    memory only); a thread's accumulator piece is placed by its coordinates."""
    from cypressc.lang.intrinsics import Operand

    at = LEAF_FUNCTIONS["warpgroup_mma_at"]
    assert at.collective == "WARPGROUP" and at.a_mnmajor and not at.b_kmajor
    assert [r.name for r in at.operands] == ["atom", "C", "At", "B"]
    assert at.operands[2].mems == ("SHARED",)  # wgmma reads a register A K-major only
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 64)), rng.standard_normal((32, 16))  # At: K x M, B: K x N
    rows, cols = np.array([1, 9]), np.array([2, 3, 10, 11])
    c = Operand(np.ones((2, 4), np.float32), (rows, cols))
    out = at.semantics(
        "WGMMA_64x16x16",
        c,
        Operand(a, (np.arange(32), np.arange(64))),
        Operand(b, (np.arange(32), np.arange(16))),
    )[1]
    assert np.allclose(out, 1 + (a.T @ b)[np.ix_(rows, cols)], atol=1e-5)
    plain = LEAF_FUNCTIONS["warpgroup_mma"].semantics(
        "WGMMA_64x16x16",
        c,
        Operand(a.T.copy(), (np.arange(64), np.arange(32))),
        Operand(b, (np.arange(32), np.arange(16))),
    )[1]
    assert np.array_equal(out, plain)


def test_mask_causal_t_is_mask_causal_on_the_transposed_tile():
    """Key-major Sᵀ (rows keys, columns queries): a key after its query is -inf, the same
    entries mask_causal masks on the query-major S with the opposite diagonal offset."""
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    keys, queries = np.array([0, 3, 8, 9]), np.array([1, 2, 3, 8, 10])
    for d in (-12, -3, 0, 2, 7):
        got = LEAF_FUNCTIONS["mask_causal_t"].semantics(Operand(x, (keys, queries)), d)[0]
        # key r + d after query c: masked; a key at or before its query keeps its score
        assert np.array_equal(np.isneginf(got), keys[:, None] + d > queries[None, :])
        assert np.array_equal(got[~np.isneginf(got)], x[~np.isneginf(got)])
        s = LEAF_FUNCTIONS["mask_causal"].semantics(Operand(x.T.copy(), (queries, keys)), -d)[0]
        assert np.array_equal(np.isneginf(got), np.isneginf(s).T)
