"""The intrinsics registry: leaf functions (Cypress paper §3.2, §3.4).

A **leaf function** is what a ``Leaf`` variant body may call.  Each entry gives its
C++ entry point in ``cypress.cuh``, one :class:`OperandRule` per argument (kind,
which arguments it writes, allowed memories and dtypes), the processor level it runs
at, and its NumPy semantics for the interpreter.

An **atom** names one Tensor Core instruction shape: ``WGMMA_64xNx16`` (N = 8…256 in
steps of 8; f16/bf16 in, f32 accumulate); :mod:`cypressc.lang.atoms` names and looks them
up.  ``partition_by_mma`` uses its operand layouts (paper Fig. 4) to split a tile among
warps and threads.

Semantics are pure: ``semantics(*operands) -> {arg_index: new_value}`` where tensor
operands are :class:`Operand` (the value and its coordinates inside the mma-partitioned
tile it came from) and scalar operands are Python numbers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from cypressc.abi.dtypes import DTYPES
from cypressc.lang.kinds import Mem, OperandKind, Proc

__all__ = [
    "IntrinsicKind",
    "Operand",
    "OperandRule",
    "LeafFn",
    "LEAF_FUNCTIONS",
    "NUMPY_DTYPES",
    "leaf_of",
]

NUMPY_DTYPES = {
    "f16": np.float16,
    "bf16": np.float32,
    "f32": np.float32,
    "i32": np.int32,
    "f8e4m3": np.float32,
    "f8e5m2": np.float32,
}
"""NumPy storage per dtype.  bf16 and the FP8 types have no NumPy type: they are stored in f32
and rounded to their mantissa whenever a value is stored (:func:`round_to`)."""
DTYPE_BYTES = {name: d.itemsize for name, d in DTYPES.items()}
"""Bytes per element on the GPU (not NumPy's storage: bf16 is 2 bytes there, 4 here)."""

# FP8 formats (OCP 8-bit floating point, the PTX ISA's e4m3 and e5m2): mantissa bits, the
# exponent of the smallest normal, the largest finite value
_FP8 = {"f8e4m3": (3, -6, 448.0), "f8e5m2": (2, -14, 57344.0)}


def _round_fp8(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to nearest even in an FP8 format, saturating to its largest finite value
    as CUDA's ``__nv_fp8_e4m3(float)`` does (``__NV_SATFINITE``); NaN stays NaN."""
    man, emin, top = _FP8[dtype]
    f = np.asarray(x, dtype=np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        # the spacing of the representable values around |x|: subnormals share emin's
        e = np.maximum(np.floor(np.log2(np.abs(f))), emin)
        q = np.exp2(e - man).astype(np.float32)
        r = np.rint(f / q) * q  # np.rint rounds half to even
    r = np.where((f == 0) | np.isinf(f), f, r)  # ±inf saturates below, as zero stays zero
    return np.clip(r, -top, top).astype(np.float32)


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round ``x`` to ``dtype`` and return it in that dtype's NumPy storage type."""
    if dtype == "bf16":
        f = np.asarray(x, dtype=np.float32).copy()
        bits = f.view(np.uint32)
        bits += np.uint32(0x7FFF) + ((bits >> 16) & 1)  # round to nearest even
        bits &= np.uint32(0xFFFF0000)
        return f
    if dtype in _FP8:
        return _round_fp8(x, dtype)
    return np.asarray(x).astype(NUMPY_DTYPES[dtype])


@dataclass(frozen=True, slots=True)
class Operand:
    """A tensor handed to a leaf: ``value`` and, per dimension, its coordinates in the
    tile that ``partition_by_mma`` split (identity ranges when it was never split)."""

    value: np.ndarray
    coords: tuple[np.ndarray, ...]


@dataclass(frozen=True, slots=True)
class OperandRule:
    """One argument of a leaf function.

    ``kind`` (:class:`OperandKind`) is a tensor, a scalar or an atom; ``writes`` says the
    leaf writes it (its variant must hold the write privilege); ``mems``/``dtypes`` restrict
    placement (empty = any); ``rank`` 0 means any rank.  ``same_dtype`` names another operand
    that must have this one's element type (a wgmma's A and B); ``dtype_hint`` is what
    a refused dtype's error suggests.
    """

    name: str
    kind: OperandKind = OperandKind.TENSOR
    writes: bool = False
    reads: bool = True
    mems: tuple[Mem, ...] = ()
    dtypes: tuple[str, ...] = ()
    rank: int = 0
    same_dtype: str = ""
    dtype_hint: str = ""


class IntrinsicKind(enum.Enum):
    """What a leaf function computes, as far as the backend's lowering and its plan rewrites
    care (:mod:`cypressc.backend.peephole`): a rewrite matches a kind and the operand rules,
    never a leaf's name, so a new intrinsic declared with the same kind gets the same code
    and the same rewrites (issue #36)."""

    MMA = "mma"
    """``C += A @ B`` on the Tensor Core."""
    FILL = "fill"
    """Writes a scalar into every element of its first operand."""
    COPY = "copy"
    """Writes its first operand into its second (converting the dtype)."""
    ADD = "add"
    """Adds its second operand into its first, element by element."""
    MUL = "mul"
    """Multiplies its first operand by its second, element by element."""
    SCALE = "scale"
    """Multiplies every element of its first operand by a scalar."""
    ROW_SUM = "row_sum"
    """Adds each row's sum of its second operand into its first, a vector of one entry per
    row (over a warpgroup's accumulator rows: the 4 lanes of a quad summed by shuffles)."""
    ROW_MAX = "row_max"
    """Folds each row's maximum of its second operand into its first, a per-row vector."""
    ROW_SCALE = "row_scale"
    """Multiplies each row of its first operand by its row's entry of a per-row factor."""
    ROW_DIVIDE = "row_divide"
    """Divides each row of its first operand by its row's entry of a per-row divisor."""
    ROW_MAP = "row_map"
    """Replaces each element of its first operand by a function of it and its row's entry of
    a per-row vector (and scalars)."""
    MASK = "mask"
    """Writes -inf into the elements of its first operand at some columns of each row (a
    function of the element's position, not of its row alone)."""
    ROW_COMBINE = "row_combine"
    """Writes into a per-row vector a function of other per-row vectors' entries, row by
    row."""
    EXTERNAL = "external"
    """A user's C++ function (call-external): nothing is known of what it computes."""

    @property
    def quad_uniform(self) -> bool:
        """Whether what a leaf of this kind writes into a per-row vector is the same on the 4
        lanes of a quad (which share each accumulator row) when its per-row operands are: it
        depends on a row's values (a row reduction reduces across the quad), never on the
        columns a lane holds."""
        return self not in (IntrinsicKind.MMA, IntrinsicKind.MASK, IntrinsicKind.EXTERNAL)


@dataclass(frozen=True, slots=True)
class LeafFn:
    """A leaf function: C++ ``cpp`` entry point, operand rules, processor level, semantics.

    ``collective`` names the processor level whose threads execute the leaf together
    (``WARPGROUP`` for ``wgmma`` and the row statistics), or ``None`` for per-thread SIMT
    code: a collective leaf runs once every thread of its group issued it, on the read
    operands' whole tiles (gathered from every member's piece) and each member's written
    piece (a leaf's operands are its own fresh tensors: the 4 lanes of a quad that share an
    accumulator row each update their own copy of it, as each holds its own registers on
    the GPU, and copy back equal values).  ``asynchronous`` marks the Tensor Core
    leaves (``wgmma.mma_async``): they complete later, behind a ``wait_group``.  ``kind``
    says what it computes (:class:`IntrinsicKind`); ``b_kmajor`` marks a Tensor Core product
    whose B operand is stored N x K (K contiguous: a K-major wgmma B), ``a_mnmajor`` one whose
    A operand is stored K x M (M contiguous: an MN-major wgmma A, PTX ISA imm-trans-a = 1).
    """

    name: str
    cpp: str
    operands: tuple[OperandRule, ...]
    proc: Proc
    semantics: Callable[..., dict[int, np.ndarray]] = field(repr=False)
    collective: Proc | None = None
    doc: str = ""
    asynchronous: bool = False
    external: object = None  # the syntax.External of a user C++ function (call-external)
    kind: IntrinsicKind = IntrinsicKind.EXTERNAL
    b_kmajor: bool = False
    a_mnmajor: bool = False

    @property
    def over_rows(self) -> bool:
        """Whether the leaf works on a warpgroup's accumulator rows: its operands are per-row
        vectors and f32 accumulator fragments of a warpgroup, which it runs on together (a
        warpgroup collective other than the Tensor Core product)."""
        return self.collective == Proc.WARPGROUP and self.kind is not IntrinsicKind.MMA


# ----------------------------------------------------------------------------- semantics
def _mma(atom_name: str, c: Operand, a: Operand, b: Operand) -> dict[int, np.ndarray]:
    # C's coordinates locate this fragment inside the warpgroup tile that A's rows and
    # B's columns span, so the per-thread update is the matching block of A @ B.
    # Only the fragment's block is computed: each of a warpgroup's 128 members calls this on
    # the same whole tiles.
    rows, cols = c.coords
    prod = a.value[rows].astype(np.float64) @ b.value[:, cols].astype(np.float64)
    return {1: (c.value.astype(np.float64) + prod).astype(np.float32)}


def _mma_bt(atom_name: str, c: Operand, a: Operand, b: Operand) -> dict[int, np.ndarray]:
    # B arrives as the N x K tile it is stored as (K contiguous: a K-major wgmma B operand)
    return _mma(atom_name, c, a, Operand(b.value.T, tuple(reversed(b.coords))))


def _mma_at(atom_name: str, c: Operand, a: Operand, b: Operand) -> dict[int, np.ndarray]:
    # A arrives as the K x M tile it is stored as (M contiguous: an MN-major wgmma A operand)
    return _mma(atom_name, c, Operand(a.value.T, tuple(reversed(a.coords))), b)


def _fill(c: Operand, v: float) -> dict[int, np.ndarray]:
    return {0: np.full_like(c.value, v)}


def _copy(src: Operand, dst: Operand) -> dict[int, np.ndarray]:
    return {1: src.value.reshape(dst.value.shape)}


def _add(c: Operand, x: Operand) -> dict[int, np.ndarray]:
    return {0: (c.value.astype(np.float64) + x.value.astype(np.float64)).astype(c.value.dtype)}


def _mul(c: Operand, x: Operand) -> dict[int, np.ndarray]:
    return {0: (c.value.astype(np.float64) * x.value.astype(np.float64)).astype(c.value.dtype)}


def _scale(c: Operand, v: float) -> dict[int, np.ndarray]:
    return {0: (c.value.astype(np.float64) * np.float32(v)).astype(c.value.dtype)}


def _row_sum(y: Operand, a: Operand) -> dict[int, np.ndarray]:
    s = a.value.astype(np.float64).sum(axis=-1).reshape(y.value.shape)
    return {0: (y.value.astype(np.float64) + s).astype(y.value.dtype)}


def _rows_of(x: Operand, v: Operand) -> np.ndarray:
    """The values of the warpgroup's per-row vector ``v`` (gathered whole) for the rows of
    ``x``'s piece, shaped to broadcast over ``x``'s trailing dimension."""
    r = v.value.astype(np.float64)[x.coords[0]]
    return r.reshape(r.shape + (1,) * (x.value.ndim - 1))


def _row_max(m: Operand, x: Operand) -> dict[int, np.ndarray]:
    return {
        0: np.maximum(
            m.value.astype(np.float64), x.value.astype(np.float64)[m.coords[0]].max(axis=-1)
        )
    }


def _row_sum_frag(y: Operand, x: Operand) -> dict[int, np.ndarray]:
    return {0: y.value.astype(np.float64) + x.value.astype(np.float64)[y.coords[0]].sum(axis=-1)}


def _exp2_diff(x: Operand, m: Operand, scale: float) -> dict[int, np.ndarray]:
    mm = _rows_of(x, m)
    # a row with no finite value yet: exp2(-inf) = 0, not NaN
    mm = np.where(np.isneginf(mm), 0.0, mm)
    with np.errstate(invalid="ignore", over="ignore"):
        return {0: np.exp2((x.value.astype(np.float64) - mm) * scale)}


def _scale_rows(x: Operand, v: Operand) -> dict[int, np.ndarray]:
    return {0: x.value.astype(np.float64) * _rows_of(x, v)}


def _div_rows(x: Operand, v: Operand) -> dict[int, np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return {0: x.value.astype(np.float64) / _rows_of(x, v)}


def _mask_columns(x: Operand, n: int) -> dict[int, np.ndarray]:
    cols = x.coords[-1]
    return {0: np.where(cols < n, x.value.astype(np.float64), -np.inf)}


def _mask_causal(x: Operand, d: int) -> dict[int, np.ndarray]:
    rows, cols = x.coords
    return {0: np.where(cols[None, :] <= rows[:, None] + d, x.value.astype(np.float64), -np.inf)}


def _mask_causal_t(x: Operand, d: int) -> dict[int, np.ndarray]:
    rows, cols = x.coords
    return {0: np.where(cols[None, :] >= rows[:, None] + d, x.value.astype(np.float64), -np.inf)}


def _row_log_sum_exp(lse: Operand, m: Operand, l: Operand, scale: float) -> dict[int, np.ndarray]:
    mm, ll = m.value.astype(np.float64)[lse.coords[0]], l.value.astype(np.float64)[lse.coords[0]]
    with np.errstate(divide="ignore"):
        return {0: mm * scale + np.log(ll)}


_FLOAT = ("f16", "bf16", "f32")
_MMA_IN = ("f16", "bf16")
_FP8_IN = ("f8e4m3", "f8e5m2")
_FP8_K_MAJOR = (
    "an FP8 wgmma reads both operands K-major (PTX has no transposed FP8 operand): store B as "
    "the N x K tile and call warpgroup_mma_bt (C += A @ Bt^T)"
)


def _mma_operands(b: str, a: str = "A") -> tuple[OperandRule, ...]:
    """The operands of a wgmma leaf: the atom, the f32 accumulator C (registers), the A
    operand named ``a`` (shared or registers; an ``"At"`` stored K x M: shared only) and the
    B operand named ``b`` (shared).  FP8 operands (k32 atoms) only where both are K-major:
    ``A`` and ``Bt``; A and B of one element type."""
    a_mems = (Mem.SHARED,) if a == "At" else (Mem.SHARED, Mem.REGISTER)
    kmajor = a == "A" and b == "Bt"
    ins = _MMA_IN + _FP8_IN if kmajor else _MMA_IN
    why = "" if kmajor else _FP8_K_MAJOR
    return (
        OperandRule("atom", kind=OperandKind.ATOM),
        OperandRule("C", writes=True, mems=(Mem.REGISTER,), dtypes=("f32",), rank=2),
        OperandRule(a, mems=a_mems, dtypes=ins, rank=2, dtype_hint=why),
        OperandRule(b, mems=(Mem.SHARED,), dtypes=ins, rank=2, same_dtype=a, dtype_hint=why),
    )


def _row_operands(v: str) -> tuple[OperandRule, ...]:
    """A row reduction's operands: the per-row f32 vector it updates and the f32 tile."""
    return (
        OperandRule(v, writes=True, mems=(Mem.REGISTER,), dtypes=("f32",), rank=1),
        OperandRule("X", mems=(Mem.REGISTER,), dtypes=("f32",), rank=2),
    )


def _broadcast_operands(v: str) -> tuple[OperandRule, ...]:
    """A row-broadcast leaf's operands: the f32 register tensor it updates (a tile, or a
    per-row vector) and the per-row f32 vector ``v`` it reads."""
    return (
        OperandRule("X", writes=True, mems=(Mem.REGISTER,), dtypes=("f32",)),
        OperandRule(v, mems=(Mem.REGISTER,), dtypes=("f32",), rank=1),
    )


def _mask_operands(bound: str) -> tuple[OperandRule, ...]:
    """A mask's operands: the f32 accumulator tile it writes -inf into and its int bound."""
    return (
        OperandRule("X", writes=True, mems=(Mem.REGISTER,), dtypes=("f32",), rank=2),
        OperandRule(bound, kind=OperandKind.SCALAR),
    )


LEAF_FUNCTIONS: dict[str, LeafFn] = {
    f.name: f
    for f in (
        LeafFn(
            "warpgroup_mma",
            "cypress::warpgroup_mma",
            _mma_operands("B"),
            Proc.THREAD,
            _mma,
            collective=Proc.WARPGROUP,
            asynchronous=True,
            kind=IntrinsicKind.MMA,
            doc="C += A @ B on the Tensor Core (wgmma.mma_async); C is this thread's fragment "
            "of the f32 accumulator, A (shared, or registers: each thread its fragment, the "
            "accumulator layout) and B (shared) are read as the warpgroup's whole tiles.",
        ),
        LeafFn(
            "warpgroup_mma_bt",
            "cypress::warpgroup_mma_bt",
            _mma_operands("Bt"),
            Proc.THREAD,
            _mma_bt,
            collective=Proc.WARPGROUP,
            asynchronous=True,
            kind=IntrinsicKind.MMA,
            b_kmajor=True,
            doc="C += A @ Bt^T on the Tensor Core: as warpgroup_mma, with B given as the N x K tile "
            "it is stored as (K contiguous, a K-major wgmma B operand; attention's S = Q @ K^T "
            "with K stored row-major).",
        ),
        LeafFn(
            "warpgroup_mma_at",
            "cypress::warpgroup_mma_at",
            _mma_operands("B", "At"),
            Proc.THREAD,
            _mma_at,
            collective=Proc.WARPGROUP,
            asynchronous=True,
            kind=IntrinsicKind.MMA,
            a_mnmajor=True,
            doc="C += At^T @ B on the Tensor Core: as warpgroup_mma, with A given as the K x M tile "
            "it is stored as (M contiguous, an MN-major wgmma A operand read from shared memory; "
            "attention's backward dV += P^T @ dO with P stored as the scores are).",
        ),
        LeafFn(
            "fill",
            "cypress::fill",
            (
                OperandRule("C", writes=True, reads=False, dtypes=_FLOAT + ("i32",)),
                OperandRule("value", kind=OperandKind.SCALAR),
            ),
            Proc.THREAD,
            _fill,
            kind=IntrinsicKind.FILL,
            doc="C[...] = value.",
        ),
        LeafFn(
            "copy",
            "cypress::copy",
            (OperandRule("src"), OperandRule("dst", writes=True, reads=False)),
            Proc.THREAD,
            _copy,
            kind=IntrinsicKind.COPY,
            doc="dst[...] = src[...], converting dtype (f32 -> f16 rounds to nearest).",
        ),
        LeafFn(
            "add",
            "cypress::add",
            (OperandRule("C", writes=True, dtypes=_FLOAT), OperandRule("X", dtypes=_FLOAT)),
            Proc.THREAD,
            _add,
            kind=IntrinsicKind.ADD,
            doc="C[...] += X[...] elementwise (same shape).",
        ),
        LeafFn(
            "mul",
            "cypress::mul",
            (OperandRule("C", writes=True, dtypes=_FLOAT), OperandRule("X", dtypes=_FLOAT)),
            Proc.THREAD,
            _mul,
            kind=IntrinsicKind.MUL,
            doc="C[...] *= X[...] elementwise (same shape).",
        ),
        LeafFn(
            "scale",
            "cypress::scale",
            (
                OperandRule("C", writes=True, dtypes=_FLOAT),
                OperandRule("value", kind=OperandKind.SCALAR),
            ),
            Proc.THREAD,
            _scale,
            kind=IntrinsicKind.SCALE,
            doc="C[...] *= value (value rounded to f32, as the GPU's float parameter).",
        ),
        LeafFn(
            "row_sum",
            "cypress::row_sum",
            (
                OperandRule("y", writes=True, dtypes=("f32",), rank=1),
                OperandRule("A", dtypes=_FLOAT, rank=2),
            ),
            Proc.THREAD,
            _row_sum,
            kind=IntrinsicKind.ROW_SUM,
            doc="y[i] += sum_k A[i, k] on the CUDA cores (SIMT).",
        ),
        LeafFn(
            "warpgroup_row_max",
            "cypress::warpgroup_row_max",
            _row_operands("m"),
            Proc.THREAD,
            _row_max,
            collective=Proc.WARPGROUP,
            kind=IntrinsicKind.ROW_MAX,
            doc="m[r] = max(m[r], max_c X[r, c]) over the rows of the warpgroup's accumulator tile X; "
            'each thread\'s m is its piece of partition_by_mma(m, ..., "C") (its rows, shared '
            "with the other 3 lanes of its quad), reduced across the quad.",
        ),
        LeafFn(
            "warpgroup_row_sum",
            "cypress::warpgroup_row_sum",
            _row_operands("l"),
            Proc.THREAD,
            _row_sum_frag,
            collective=Proc.WARPGROUP,
            kind=IntrinsicKind.ROW_SUM,
            doc="l[r] += sum_c X[r, c] over the rows of the warpgroup's accumulator tile X (as "
            "warpgroup_row_max).",
        ),
        LeafFn(
            "exp2_diff",
            "cypress::exp2_diff",
            _broadcast_operands("m") + (OperandRule("scale", kind=OperandKind.SCALAR),),
            Proc.THREAD,
            _exp2_diff,
            collective=Proc.WARPGROUP,
            kind=IntrinsicKind.ROW_MAP,
            doc="X[r, ...] = exp2((X[r, ...] - m[r]) * scale), m a per-row vector (where m[r] is "
            "-inf, as if it were 0); the online softmax's exponent (ex2.approx on the GPU).",
        ),
        LeafFn(
            "scale_rows",
            "cypress::scale_rows",
            _broadcast_operands("v"),
            Proc.THREAD,
            _scale_rows,
            collective=Proc.WARPGROUP,
            kind=IntrinsicKind.ROW_SCALE,
            doc="X[r, ...] *= v[r], v a per-row vector (the online softmax's rescale of O and l).",
        ),
        LeafFn(
            "mask_columns",
            "cypress::mask_columns",
            _mask_operands("n"),
            Proc.THREAD,
            _mask_columns,
            collective=Proc.WARPGROUP,
            kind=IntrinsicKind.MASK,
            doc="X[r, c] = -inf for every column c >= n of the warpgroup's accumulator tile X (keys "
            "past the end of a ragged sequence); nothing to do, and nothing done, when n >= the "
            "tile's columns.",
        ),
        LeafFn(
            "mask_causal",
            "cypress::mask_causal",
            _mask_operands("d"),
            Proc.THREAD,
            _mask_causal,
            collective=Proc.WARPGROUP,
            kind=IntrinsicKind.MASK,
            doc="X[r, c] = -inf where c > r + d (r, c the row and column in the warpgroup's "
            "accumulator tile X; d = the tile's first query row minus its first key column: "
            "a causal mask); nothing done when d >= the tile's columns - 1.",
        ),
        LeafFn(
            "mask_causal_t",
            "cypress::mask_causal_t",
            _mask_operands("d"),
            Proc.THREAD,
            _mask_causal_t,
            collective=Proc.WARPGROUP,
            kind=IntrinsicKind.MASK,
            doc="X[r, c] = -inf where c < r + d (r, c the row and column in the warpgroup's "
            "accumulator tile X; d = the tile's first key row minus its first query column): "
            "mask_causal on a key-major tile, Sᵀ = K·Qᵀ of the attention backward; nothing "
            "done when d <= -(the tile's rows - 1).",
        ),
        LeafFn(
            "row_log_sum_exp",
            "cypress::row_log_sum_exp",
            (
                OperandRule(
                    "lse", writes=True, reads=False, mems=(Mem.REGISTER,), dtypes=("f32",), rank=1
                ),
                OperandRule("m", mems=(Mem.REGISTER,), dtypes=("f32",), rank=1),
                OperandRule("l", mems=(Mem.REGISTER,), dtypes=("f32",), rank=1),
                OperandRule("scale", kind=OperandKind.SCALAR),
            ),
            Proc.THREAD,
            _row_log_sum_exp,
            collective=Proc.WARPGROUP,
            kind=IntrinsicKind.ROW_COMBINE,
            doc="lse[r] = m[r] * scale + ln(l[r]) over per-row vectors: the natural log-sum-exp of "
            "a softmax row whose maximum is m (in score units, scale the softmax scale) and "
            "whose sum of exp((s - m) * scale) is l.",
        ),
        LeafFn(
            "div_rows",
            "cypress::div_rows",
            _broadcast_operands("v"),
            Proc.THREAD,
            _div_rows,
            collective=Proc.WARPGROUP,
            kind=IntrinsicKind.ROW_DIVIDE,
            doc="X[r, ...] /= v[r], v a per-row vector (the softmax's normalization O / l).",
        ),
    )
}


def leaf_of(op) -> LeafFn:
    """The leaf function an IR ``Call`` invokes: its external (``op.ext``, a user C++
    function) or the intrinsic named ``op.fn``; raises ``KeyError`` for neither."""
    return op.ext if op.ext is not None else LEAF_FUNCTIONS[op.fn]
