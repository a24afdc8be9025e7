"""The kernel plan: what ``cuda-lowering`` decided, as small validated value types.

A plan is the IR after warp specialization with every event turned into Hopper
synchronization and every view into an address or a TMA coordinate (paper §4.2.6).
:mod:`cypressc.backend.emit` prints it as CUDA C++ against ``cypress.cuh``.
All expressions are C++ source strings over the kernel's variables: the size
arguments (``M``, ``N``, …), the tile coordinates ``b0, b1, b2``, the main-loop
index ``kb`` and the consumer warpgroup index ``cw``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["GlobalTensor", "TmaMap", "StageBuffer", "Load", "Fragment", "Mma", "Fill", "Add",
           "StoreDirect", "StoreStaged", "Vector", "FillVector", "RowSum", "StoreVector", "KernelPlan"]


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
    """A TMA descriptor over ``tensor`` with a box of ``box`` elements (outermost first)."""

    name: str
    tensor: str
    box: tuple[int, ...]


@dataclass(frozen=True)
class StageBuffer:
    """A pipelined shared tile: ``stages`` x ``chunks`` x ``rows`` x 64 elements, 128B-swizzled."""

    name: str
    dtype: str
    rows: int
    cols: int
    stages: int
    offset: int

    @property
    def chunk_bytes(self) -> int:
        return self.rows * 128

    @property
    def stage_bytes(self) -> int:
        return self.rows * self.cols * 2


@dataclass(frozen=True)
class Load:
    """One producer copy per main-loop step: global box at ``coords`` -> stage buffer."""

    event: str
    map: str
    buffer: str
    coords: tuple[str, ...]  # per global dim, outermost first (element coordinates)
    chunks: int


@dataclass(frozen=True)
class Fragment:
    """An f32 accumulator tile of ``rows`` x ``cols`` per consumer warpgroup, in registers
    in the wgmma C layout (``rows // 64`` atoms of ``cols / 2`` floats per thread)."""

    name: str
    rows: int
    cols: int


@dataclass(frozen=True)
class Mma:
    """``acc += A @ B`` over one stage: A K-major rows ``a_row`` (expr) of ``a_buf``,
    B MN-major columns from chunk ``b_chunk`` of ``b_buf``, K extent ``k``."""

    event: str
    acc: str
    a_buf: str
    a_row: str
    b_buf: str
    b_chunk: int
    k: int
    n: int
    dtype: str


@dataclass(frozen=True)
class Fill:
    event: str
    acc: str
    value: str


@dataclass(frozen=True)
class Add:
    event: str
    acc: str
    other: str


@dataclass(frozen=True)
class StoreDirect:
    """Each thread stores its fragment to ``tensor`` at tile origin (``row0``, ``col0``)."""

    event: str
    acc: str
    tensor: str
    row0: str
    col0: str
    batch: str | None
    dtype: str
    when: str | None = None  # only where this holds (a last-iteration write of a host loop)


@dataclass(frozen=True)
class StoreStaged:
    """Fragment -> swizzled shared boxes at ``offset`` (per consumer) -> TMA store at origin."""

    event: str
    acc: str
    map: str
    offset: int
    row0: str
    col0: str
    batch: str | None
    dtype: str
    barrier_event: str


@dataclass(frozen=True)
class Vector:
    """A per-thread f32 register array of ``n`` elements (SIMT state such as row sums)."""

    name: str
    n: int


@dataclass(frozen=True)
class FillVector:
    event: str
    vec: str
    value: str


@dataclass(frozen=True)
class RowSum:
    """``vec[r] += sum of row (row + r) of the current stage of ``buf``, columns [col0,
    col0 + cols)`` for r < ``rows``, on the threads where ``active`` holds (SIMT; reads the
    128B-swizzled stage tile the wgmmas read)."""

    event: str
    vec: str
    buf: str
    row: str
    rows: int
    col0: int
    cols: int
    dtype: str
    active: str


@dataclass(frozen=True)
class StoreVector:
    """``tensor[index + i] = vec[i]`` (f32, 1-D, bounds-checked) on the threads where
    ``active`` holds, and only where ``when`` holds (``None``: always)."""

    event: str
    vec: str
    tensor: str
    index: str
    n: int
    active: str
    when: str | None


@dataclass
class KernelPlan:
    """Everything the emitter needs for one warp-specialized, pipelined block program."""

    name: str
    tensors: list[GlobalTensor]
    sizes: list[str]
    grid: list[str]  # tiles along each BLOCK dimension (b0 outermost)
    raster: int
    persistent: bool
    consumers: int
    stages: int
    trip_count: str
    maps: list[TmaMap]
    buffers: list[StageBuffer]
    loads: list[Load]
    fragments: list[Fragment]
    prologue: list = field(default_factory=list)  # Fill / FillVector
    body: list = field(default_factory=list)  # Mma
    epilogue: list = field(default_factory=list)  # Add / StoreDirect / StoreStaged / StoreVector
    vectors: list[Vector] = field(default_factory=list)
    simt_body: list = field(default_factory=list)  # RowSum: SIMT work on each stage, after the wgmmas issue
    smem_bytes: int = 0
    producer_registers: int = 40
    consumer_registers: int = 232
    mma_in_flight: int = 1
    warpspecialize: bool = True  # False: no producer warpgroup; thread 0 issues loads ahead
    war_barrier: bool = False  # shared bytes reused after the main loop: all consumers sync first
    requires: list[tuple[str, str]] = field(default_factory=list)
    flops: str = "0"
    host_loop: str | None = None  # a parallelized HOST loop: its variable, as the last grid dim
