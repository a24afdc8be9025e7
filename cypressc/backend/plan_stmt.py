"""The kernel plan's statements (Cypress paper §4.2.6): one small value type per kind.

TMA loads and stores, wgmma and its fragments' fills, adds and conversions, SIMT stores,
external leaf calls, per-row operations and the synchronization ops
(:class:`Sync`), each with its operands as IR expressions over the kernel's variables
(:mod:`cypressc.backend.cexpr` prints them).  ``cuda-lowering`` makes them, the plan
rewrites (:mod:`cypressc.backend.peephole`) edit them, :mod:`cypressc.backend.emit_stmt`
prints them.  The storage they name is declared by :mod:`cypressc.backend.plan_decl`.
"""

from __future__ import annotations

from dataclasses import dataclass

from cypressc.backend.plan_decl import TmaMap
from cypressc.ir.nodes import IConst, IExpr
from cypressc.ir.sync import Guard
from cypressc.lang.intrinsics import LeafFn

__all__ = [
    "Load",
    "Convert",
    "Mma",
    "Fill",
    "Add",
    "Scale",
    "ExtArg",
    "External",
    "StoreDirect",
    "box_cols",
    "LoadDirect",
    "StageWrite",
    "WriteShared",
    "TmaStore",
    "Sync",
    "RowOp",
    "FillVector",
    "FillShared",
    "RowSum",
    "StoreVector",
    "RowStore",
]


@dataclass(frozen=True)
class Load:
    """A TMA copy through ``map`` (the descriptor of the tensor it reads): global box at
    ``coords`` -> stage ``stage`` of a stage buffer, completing on ``bar[bar_stage]`` (the
    copy's mbarrier stage from ``sync-insertion``); ``who``: the condition selecting the
    thread that issues it where its role's every thread runs the statement (``issuer``
    before the main loop without a producer warpgroup), else None; ``multicast``: the grid
    dimensions along which the blocks of the cluster share the tile (the IR copy's
    ``multicast``): the first block along them issues it into every one of them."""

    event: str
    map: TmaMap
    buffer: str
    coords: tuple[IExpr, ...]  # per global dim, outermost first (element coordinates)
    chunks: int
    stage: IExpr = IConst(0)
    bar: str = ""
    bar_stage: IExpr = IConst(0)
    who: IExpr | None = None
    multicast: tuple[int, ...] = ()


@dataclass(frozen=True)
class Convert:
    """``dst = T(src)`` for two fragments of one shape: an f32 accumulator rounded to the
    16-bit A fragment a register-sourced wgmma reads (each thread its own elements)."""

    event: str
    src: str
    dst: str
    dtype: str


@dataclass(frozen=True)
class Mma:
    """``acc += A @ B`` over one stage: A from register fragment ``a_frag``, or K-major
    rows ``a_row`` (expr) of ``a_buf`` from column ``a_col`` (expr, a multiple of 16: a K slice of a wider resident tile)
    (or MN-major, ``a_mnmajor``: A stored K x M, the product's rows from column ``a_col`` of
    ``a_buf``, a multiple of its chunk's columns, K from row ``a_row``, a whole 8-row atom),
    B MN-major columns from chunk ``b_chunk`` of ``b_buf``, K from row ``b_row`` (or K-major:
    ``b_kmajor``), K extent ``k``."""

    event: str
    acc: str
    a_buf: str
    a_row: IExpr
    b_buf: str
    b_chunk: int | IExpr  # an expression over ``cw`` where each warpgroup reads its own columns
    k: int
    n: int
    dtype: str
    a_stage: IExpr = IConst(0)
    b_stage: IExpr = IConst(0)
    a_col: IExpr = IConst(0)
    a_frag: str | None = None  # A from this register fragment (then a_buf, a_row are unused)
    # B stored N x K (K contiguous): rows ``b_row``.., K from column ``b_col``; else MN-major
    # (stored K x N): ``b_row`` is its first K row
    b_kmajor: bool = False
    b_row: IExpr = IConst(0)
    b_col: IExpr = IConst(0)
    zero_fill: str | None = None  # the fill of acc folded in: scale-d off on the first k16 step
    a_mnmajor: bool = False  # A stored K x M (M contiguous): read MN-major, tnspA = MN


@dataclass(frozen=True)
class Fill:
    event: str
    acc: str
    value: IExpr


@dataclass(frozen=True)
class Add:
    """``acc op= other`` element by element: ``op`` ``+`` (add), ``*`` (mul) or ``""`` (a copy
    of one f32 fragment into another of the same shape: ``acc = other``)."""

    event: str
    acc: str
    other: str
    op: str = "+"


@dataclass(frozen=True)
class Scale:
    """``acc *= value`` (a float expression), element by element."""

    event: str
    acc: str
    value: IExpr


@dataclass(frozen=True)
class ExtArg:
    """One operand of an external leaf call: ``kind`` ``frag`` (register fragment ``name``,
    element by element), ``vec`` (a row of global tensor ``name`` of ``dtype``: element
    ``col0 + c`` for the fragment's column c, zero at or past ``extent``, the row ``batch`` of
    the tensor's leading dimensions flattened when it is sliced off a rank > 1 tensor) or
    ``scalar`` (``value``, passed as a C++ ``dtype``: ``int`` or ``float``) or ``svec`` (stage
    ``stage`` of shared vector buffer ``name``, element ``value + c`` for the fragment's
    column c, filled from a row at element ``col0``: zero where ``col0 + c`` is at or past
    ``extent``).  A ``vec`` or ``svec`` with ``row`` is read per row: the fragment's row r
    instead of its column c; a ``vec`` with ``broadcast`` is one element of the tensor, at
    row-major index ``col0``, read once per call for every element (zero unless each
    (coordinate, extent) of ``bounds`` is in range)."""

    kind: str
    name: str = ""
    dtype: str = "f32"
    col0: IExpr = IConst(0)
    extent: str = ""
    value: IExpr | None = None
    batch: IExpr | None = None
    stage: IExpr = IConst(0)
    row: bool = False
    broadcast: bool = False
    bounds: tuple[tuple[IExpr, str], ...] = ()


@dataclass(frozen=True)
class External:
    """A user C++ function (call-external) applied to every element of register fragment
    ``acc``'s shape: ``cpp(args...)`` per element, written fragments by reference."""

    event: str
    fn: str
    cpp: str
    header: str
    acc: str
    args: tuple[ExtArg, ...]


@dataclass(frozen=True)
class StoreDirect:
    """Each thread stores its fragment to ``tensor`` at tile origin (``row0``, ``col0``);
    ``reduce`` (a ``copy.add`` of the fragment, f32 only): it adds each pair of elements into
    the tensor with one ``red.global.v2.f32.add`` instead (elements past the tensor's rows or
    columns are skipped either way)."""

    event: str
    acc: str
    tensor: str
    row0: IExpr
    col0: IExpr
    batch: IExpr | None
    dtype: str
    when: IExpr | None = None  # only where this holds (a last-iteration write of a host loop)
    reduce: bool = False


@dataclass(frozen=True)
class LoadDirect:
    """Each thread loads its fragment ``acc`` (f32) from ``tensor`` (of ``dtype``, converted)
    at tile origin (``row0``, ``col0``); elements past the tensor's rows or columns read 0."""

    event: str
    acc: str
    tensor: str
    row0: IExpr
    col0: IExpr
    batch: IExpr | None
    dtype: str


def box_cols(dtype: str) -> int:
    """Columns of one staged epilogue box: a 128-byte swizzled row (64 16-bit elements, or
    32 f32), 64 rows deep (8192 bytes), as the TMA store's box reads it."""
    return 32 if dtype == "f32" else 64


@dataclass(frozen=True)
class StageWrite:
    """Each thread writes its fragment ``acc`` into the swizzled 64x64 shared boxes of the
    staging tile ``tensor`` at byte ``offset`` (one tile per consumer warpgroup); inside the
    main loop, into stage ``stage`` (a kernel expression) of ``stage_bytes`` each (0: one)."""

    event: str
    acc: str
    tensor: str
    offset: int
    dtype: str
    stage: IExpr = IConst(0)
    stage_bytes: int = 0


@dataclass(frozen=True)
class WriteShared:
    """Inside the main loop, each thread converts its f32 fragment ``acc`` to ``dtype`` and
    writes it into stage ``stage`` of the swizzled shared tile ``buf`` (a
    :class:`~cypressc.backend.plan_decl.StageBuffer`, laid out as a wgmma reads it) from row
    ``row`` and column ``col`` (kernel expressions: the warpgroup's tile); a later wgmma of the
    step reads it (the IR's proxy fence and named barrier order them)."""

    event: str
    acc: str
    buf: str
    row: IExpr
    col: IExpr
    dtype: str
    stage: IExpr = IConst(0)


@dataclass(frozen=True)
class TmaStore:
    """The staging tile ``tensor`` (``acc``'s shape per consumer warpgroup) at ``offset`` ->
    global at (``row0``, ``col0``) through TMA map ``map`` (whose ``tensor`` is the global
    tensor written), issued by the warpgroup's leader thread; ``reduce`` (a ``copy.add``):
    added into global instead (``cp.reduce.async.bulk.tensor ... .add``), completing alike."""

    event: str
    acc: str
    tensor: str
    map: TmaMap
    offset: int
    row0: IExpr
    col0: IExpr
    batch: IExpr | None
    reduce: bool = False
    # a copy of the block's whole tile (no warpgroup dimension): the first warpgroup's leader
    # sends every warpgroup's tile, warpgroup w's at row0 + w * (its rows), or (``by_cols``)
    # at col0 + w * (its columns)
    whole: bool = False
    by_cols: bool = False
    stage: IExpr = IConst(0)  # the stage of the staging tile it sends (StageWrite.stage)
    # ``copy.add.ordered`` (deterministic: true): the tile's element origin in ``map.tensor``
    # (one kernel expression per dimension), whose row-major offset is the tile's place in
    # the order the blocks along the grid's last dimension keep (cypress::order_enter)
    order: tuple[IExpr, ...] = ()
    # ... and the main loop it is sent in (None: after the main loops), whose last step marks
    # the block done (cypress::order_finish)
    order_loop: int | None = None


@dataclass(frozen=True)
class Sync:
    """One synchronization op of the IR (``op``, a :mod:`cypressc.ir.sync` op) with its
    operands over the kernel's variables: ``stage``/``parity`` (fields of the role's running
    pipeline state, or over the block's running pipeline step in a persistent kernel; a named
    barrier's id in ``stage``), ``when`` (the
    op's guard, or a condition over the kernel's variables: a carried turn's
    ``guard && more``), ``who`` (which thread of the role runs it: ``leader`` of a warpgroup, lane
    0 of a warp; None: every thread), ``bar``
    (the mbarrier array), ``accs`` (the fragments a wgmma fence or wait orders), ``note``
    (the statement's one-line comment: what the op's edges make safe).  ``deferred``: a TMA store's completion wait that a
    persistent block runs before its next write of the staging tile (``barrier``: the
    warpgroup's named barrier that then lets every writer go, as ``(id, threads)``)."""

    op: object
    note: str
    stage: IExpr | None = None
    parity: IExpr | None = None
    when: Guard | IExpr | None = None
    who: IExpr | None = None
    bar: str = ""
    accs: tuple[str, ...] = ()
    deferred: bool = False
    barrier: tuple[IExpr, int] | None = None


@dataclass(frozen=True)
class RowOp:
    """A leaf over accumulator rows (``leaf``: one whose ``over_rows`` holds, or a ``fill`` or
    ``copy`` of a per-row vector; its kind and operand rules are what the plan rewrites
    match): ``args`` are (``frag`` | ``row``, name) pairs for the tensor operands in order
    (the leaf's operands that are no scalar), ``value`` the scalar (fill value, exp2 scale) if
    any; ``atoms`` the 64-row atoms per warpgroup; ``partial`` and ``reduce``: see
    :func:`cypressc.backend.peephole.defer_row_sums`."""

    event: str
    leaf: LeafFn
    args: tuple[tuple[str, str], ...]
    atoms: int
    value: IExpr | None = None
    partial: bool = (
        False  # warpgroup_row_sum: add this thread's part only (peephole.defer_row_sums)
    )
    reduce: tuple[str, ...] = ()  # per-row vectors to sum across the quad first (the same)

    @property
    def fn(self) -> str:
        """The leaf's name (its C++ helper's, as the kernel's comments show it)."""
        return self.leaf.name


@dataclass(frozen=True)
class FillVector:
    event: str
    vec: str
    value: IExpr


@dataclass(frozen=True)
class FillShared:
    """``buf[row + r][col + c] = value`` for r < ``rows``, c < ``cols`` on the threads where
    ``active`` holds (``row``/``col`` are kernel expressions of their indices): SIMT stores into an
    unstaged swizzled shared tile that a wgmma reads afterwards (the IR's proxy fence and
    barrier order them)."""

    event: str
    buf: str
    row: IExpr
    rows: int
    col: IExpr
    cols: int
    value: IExpr
    dtype: str
    active: IExpr = IConst(True)


@dataclass(frozen=True)
class RowSum:
    """``vec[r] += sum of row (row + r) of the current stage of ``buf``, columns [col0,
    col0 + cols)`` for r < ``rows``, on the threads where ``active`` holds (SIMT; reads the
    128B-swizzled stage tile the wgmmas read)."""

    event: str
    vec: str
    buf: str
    row: IExpr
    rows: int
    col0: int
    cols: int
    dtype: str
    active: IExpr
    stage: IExpr = IConst(0)


@dataclass(frozen=True)
class StoreVector:
    """``tensor[index + i] = vec[i]`` (f32, 1-D, bounds-checked) on the threads where
    ``active`` holds, and only where ``when`` holds (``None``: always)."""

    event: str
    vec: str
    tensor: str
    index: IExpr
    n: int
    active: IExpr
    when: IExpr | None


@dataclass(frozen=True)
class RowStore:
    """A per-row vector ``vec`` to the f32 ``tensor`` (rank 1 once its leading dimensions are
    sliced off at linear index ``batch``): the thread's row ``h`` of atom ``a`` is element
    ``row0 + 64 a + 16 warp + lane / 4 + 8 h``; one lane of each quad stores (the other three
    hold the same values), rows past the tensor's extent are skipped; only where ``when``
    holds (``None``: always)."""

    event: str
    vec: str
    tensor: str
    row0: IExpr
    batch: IExpr | None
    when: IExpr | None = None
