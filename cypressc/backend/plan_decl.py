"""The kernel plan's storage (Cypress paper §4.2.6): what a kernel declares once.

The global tensors it takes (:class:`GlobalTensor`), its TMA descriptors (:class:`TmaMap`),
its pipelined shared tiles (:class:`StageBuffer`, swizzled per :func:`swizzle_for`), its
mbarrier arrays (:class:`Barrier`) and its register tiles (:class:`Fragment`,
:class:`Vector`, :class:`RowVector`).  The statements that use them are in
:mod:`cypressc.backend.plan_stmt`; :class:`~cypressc.backend.plan.KernelPlan` holds both.
"""

from __future__ import annotations

from dataclasses import dataclass

from cypressc.abi.dtypes import DTYPES
from cypressc.ir.target import TMA_VECTOR_SLACK, vector_buffer_bytes

__all__ = [
    "SWIZZLES",
    "swizzle_for",
    "GlobalTensor",
    "TmaMap",
    "StageBuffer",
    "Barrier",
    "Fragment",
    "RowVector",
    "Vector",
]


SWIZZLES = (128, 64, 32)  # TMA / wgmma swizzle modes, bytes per swizzled row, widest first


def swizzle_for(cols: int, elem_bytes: int = 2) -> int | None:
    """The swizzle (bytes) of a shared tile whose rows hold ``cols`` elements of ``elem_bytes``:
    the widest of 128, 64, 32 that divides the row, so the tile is whole chunks of one swizzle
    row each (64, 32 or 16 columns of 16-bit elements).  None when no mode divides it (a row
    that is not a multiple of 32 bytes), which neither TMA nor wgmma can lay out swizzled."""
    return next((sw for sw in SWIZZLES if cols > 0 and (cols * elem_bytes) % sw == 0), None)


@dataclass(frozen=True)
class GlobalTensor:
    """A kernel parameter: row-major, ``dims`` are size-argument names, outermost first."""

    name: str
    dtype: str
    dims: tuple[str, ...]
    reads: bool
    writes: bool


@dataclass(frozen=True)
class TmaMap:
    """A TMA descriptor over ``tensor`` with a box of ``box`` elements (outermost first),
    landing ``swizzle``-byte-swizzled (the box's innermost extent spans at most that many bytes;
    0: unswizzled).  A one-element ``box`` maps the tensor flattened to one dimension (a vector
    piece of a row: no row stride, so no 16-byte row-stride rule)."""

    name: str
    tensor: str
    box: tuple[int, ...]
    swizzle: int = 128


@dataclass(frozen=True)
class StageBuffer:
    """A pipelined shared tile: ``stages`` x ``chunks`` x ``rows`` x ``chunk_cols``.  A 16-bit
    tile's chunks are ``swizzle``-byte-swizzled as one TMA box writes them (rows of ``swizzle``
    bytes, the XOR pattern repeating every 8 rows; 128, 64 or 32, :func:`swizzle_for`).  A
    vector (``swizzle`` 0: one unswizzled row of ``cols`` elements of any dtype, like
    FlashAttention-3's LSE piece of a step) is one chunk of :func:`vector_buffer_bytes` per stage:
    its copy starts on the 16-byte boundary at or before the piece."""

    name: str
    dtype: str
    rows: int
    cols: int
    stages: int
    offset: int
    swizzle: int = 128

    @property
    def vector(self) -> bool:
        return self.swizzle == 0

    @property
    def chunk_cols(self) -> int:
        """Columns of one chunk: one swizzle row (a vector: all)."""
        return self.cols if self.vector else self.swizzle // DTYPES[self.dtype].itemsize

    @property
    def chunks(self) -> int:
        return self.cols // self.chunk_cols

    @property
    def chunk_bytes(self) -> int:
        return self.stage_bytes if self.vector else self.rows * self.swizzle

    @property
    def stage_bytes(self) -> int:
        n = self.rows * self.cols * DTYPES[self.dtype].itemsize
        return vector_buffer_bytes(n) if self.vector else n

    @property
    def slack(self) -> int:
        """Elements a vector's copy lands before the piece at most (its 16-byte-aligned start)."""
        return TMA_VECTOR_SLACK // DTYPES[self.dtype].itemsize if self.vector else 0


@dataclass(frozen=True)
class Barrier:
    """An mbarrier array of the IR (:class:`cypressc.ir.sync.MBarrier`) at byte ``offset`` of
    shared memory: ``stages`` barriers, each completing a phase after ``count`` arrivals."""

    name: str
    kind: str
    stages: int
    count: int
    offset: int
    note: str


@dataclass(frozen=True)
class Fragment:
    """A ``rows`` x ``cols`` register tile per consumer warpgroup in the wgmma C layout
    (``rows // 64`` atoms): f32 (an accumulator, ``cols / 2`` floats per thread and atom), or
    f16/bf16 (a wgmma A operand, ``cols / 16`` k16 steps of 4 packed pairs per thread and
    atom; the PTX A fragment of a k16 step is the C layout of its 16 columns)."""

    name: str
    rows: int
    cols: int
    dtype: str = "f32"


@dataclass(frozen=True)
class RowVector:
    """A per-row f32 vector of a ``rows``-row accumulator tile per consumer warpgroup, in the
    wgmma C layout's rows: each thread holds its 2 rows per atom (``[rows // 64][2]``), the
    same values as the other 3 lanes of its quad (row statistics: max, sum, rescale factor)."""

    name: str
    rows: int


@dataclass(frozen=True)
class Vector:
    """A per-thread f32 register array of ``n`` elements (SIMT state such as row sums)."""

    name: str
    n: int
