"""The kernel plan: what ``cuda-lowering`` decided, as small validated value types.

A plan is the IR after warp specialization with every event turned into Hopper
synchronization and every view into an address or a TMA coordinate (paper §4.2.6).
:mod:`cypressc.backend.emit` prints it as CUDA C++ against ``cypress.cuh``.
Every expression (an index, a stage, a parity, a guard, which threads run a statement) is
a typed IR expression (:mod:`cypressc.ir.nodes`; a sync op's guard an IR
:class:`~cypressc.ir.sync.Guard`) over the kernel's variables: the size arguments (``M``,
``N``, …), the tile coordinates ``b0, b1, b2``, the main-loop index ``kb``, the consumer
warpgroup index ``cw`` and the others :mod:`cypressc.backend.cexpr` lists, which prints
them all.  Only the names of tensors, buffers, TMA maps, fragments and mbarriers are
strings.  What is evaluated outside the kernel (the launcher's :class:`Require` conditions,
the FLOP count, the grid and trip count for ``cypressc tune``) is kept as IR index
expressions over the sizes, which the kernel info stores as JSON trees (:func:`size_tree`)
for :mod:`cypressc.runtime`, next to their C text from the same printer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cypressc.backend.cexpr import cexpr
from cypressc.ir.nodes import IBin, IConst, IExpr, IProc, IVar
from cypressc.ir.sync import Guard
from cypressc.lang.intrinsics import LeafFn

__all__ = [
    "SWIZZLES",
    "swizzle_for",
    "GlobalTensor",
    "TmaMap",
    "StageBuffer",
    "Load",
    "Fragment",
    "Convert",
    "Mma",
    "Fill",
    "Add",
    "StoreDirect",
    "StageWrite",
    "TmaStore",
    "Barrier",
    "Sync",
    "RoleCode",
    "Vector",
    "FillVector",
    "FillShared",
    "RowSum",
    "StoreVector",
    "RowVector",
    "RowOp",
    "RowStore",
    "KernelPlan",
    "COMPARISONS",
    "Require",
    "size_tree",
]


SWIZZLES = (128, 64, 32)  # TMA / wgmma swizzle modes, bytes per swizzled row, widest first


def swizzle_for(cols: int, elem_bytes: int = 2) -> int | None:
    """The swizzle (bytes) of a shared tile whose rows hold ``cols`` elements of ``elem_bytes``:
    the widest of 128, 64, 32 that divides the row, so the tile is whole chunks of one swizzle
    row each (64, 32 or 16 columns of 16-bit elements).  None when no mode divides it (a row
    that is not a multiple of 32 bytes), which neither TMA nor wgmma can lay out swizzled."""
    return next((sw for sw in SWIZZLES if cols > 0 and (cols * elem_bytes) % sw == 0), None)


COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


def size_tree(e: IExpr) -> dict:
    """``e`` (an expression over the size arguments, Lets inlined) as the JSON tree the kernel
    info stores and :func:`cypressc.runtime.eval_expr` evaluates: ``{"const": 8}``,
    ``{"var": "N"}`` or ``{"op": "%", "a": tree, "b": tree}`` with ``op`` one of ``+ - * / %
    cdiv min max`` or a comparison.  The IR's ``//`` is written ``/``: the C printer prints it
    so, and the tree says what the launcher computes.  Raises ``ValueError`` for a processor
    index (not a size expression)."""
    if isinstance(e, IConst):
        return {"const": e.value}
    if isinstance(e, IVar):
        return {"var": e.name}
    if isinstance(e, IBin):
        return {"op": "/" if e.op == "//" else e.op, "a": size_tree(e.a), "b": size_tree(e.b)}
    if isinstance(e, IProc):
        raise ValueError(f"the {e.proc.lower()} index is not a size")
    raise TypeError(e)


@dataclass(frozen=True)
class Require:
    """A condition the launcher checks before launching (``cudaErrorInvalidValue`` when it
    fails): ``lhs op rhs`` over the size arguments, ``op`` one of :data:`COMPARISONS`;
    ``why`` is the reason a caller is told."""

    lhs: IExpr
    op: str
    rhs: IExpr
    why: str

    def __post_init__(self) -> None:
        if self.op not in COMPARISONS:
            raise ValueError(
                f"a requirement compares with one of {' '.join(COMPARISONS)}, not {self.op!r}"
            )

    @property
    def c(self) -> str:
        """The condition as C (the launcher's test and the text of messages)."""
        return cexpr(IBin(self.op, self.lhs, self.rhs), top=True)

    def tree(self) -> dict:
        """The condition as a :func:`size_tree`."""
        return {"op": self.op, "a": size_tree(self.lhs), "b": size_tree(self.rhs)}


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
    landing ``swizzle``-byte-swizzled (the box's innermost extent spans at most that many bytes)."""

    name: str
    tensor: str
    box: tuple[int, ...]
    swizzle: int = 128


@dataclass(frozen=True)
class StageBuffer:
    """A pipelined shared tile of 16-bit elements: ``stages`` x ``chunks`` x ``rows`` x
    ``chunk_cols``, each chunk ``swizzle``-byte-swizzled as one TMA box writes it (rows of
    ``swizzle`` bytes, the XOR pattern repeating every 8 rows).  ``swizzle`` is 128, 64 or
    32 (:func:`swizzle_for`)."""

    name: str
    dtype: str
    rows: int
    cols: int
    stages: int
    offset: int
    swizzle: int = 128

    @property
    def chunk_cols(self) -> int:
        """Columns of one chunk: one swizzle row of 16-bit elements."""
        return self.swizzle // 2

    @property
    def chunks(self) -> int:
        return self.cols // self.chunk_cols

    @property
    def chunk_bytes(self) -> int:
        return self.rows * self.swizzle

    @property
    def stage_bytes(self) -> int:
        return self.rows * self.cols * 2


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
class Load:
    """A TMA copy through ``map`` (the descriptor of the tensor it reads): global box at
    ``coords`` -> stage ``stage`` of a stage buffer, completing on ``bar[bar_stage]`` (the
    copy's mbarrier stage from ``sync-insertion``); ``who``: the condition selecting the
    thread that issues it where its role's every thread runs the statement (``issuer``
    before the main loop without a producer warpgroup), else None."""

    event: str
    map: TmaMap
    buffer: str
    coords: tuple[IExpr, ...]  # per global dim, outermost first (element coordinates)
    chunks: int
    stage: IExpr = IConst(0)
    bar: str = ""
    bar_stage: IExpr = IConst(0)
    who: IExpr | None = None


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
    rows ``a_row`` (expr) of ``a_buf`` from column ``a_col`` (expr, a multiple of 16: a K slice of a wider resident tile),
    B MN-major columns from chunk ``b_chunk`` of ``b_buf`` (or K-major: ``b_kmajor``), K extent ``k``."""

    event: str
    acc: str
    a_buf: str
    a_row: IExpr
    b_buf: str
    b_chunk: int
    k: int
    n: int
    dtype: str
    a_stage: IExpr = IConst(0)
    b_stage: IExpr = IConst(0)
    a_col: IExpr = IConst(0)
    a_frag: str | None = None  # A from this register fragment (then a_buf, a_row are unused)
    b_kmajor: bool = (
        False  # B stored N x K (K contiguous): rows ``b_row``.., K from column ``b_col``
    )
    b_row: IExpr = IConst(0)
    b_col: IExpr = IConst(0)
    zero_fill: str | None = None  # the fill of acc folded in: scale-d off on the first k16 step


@dataclass(frozen=True)
class Fill:
    event: str
    acc: str
    value: IExpr


@dataclass(frozen=True)
class Add:
    event: str
    acc: str
    other: str


@dataclass(frozen=True)
class ExtArg:
    """One operand of an external leaf call: ``kind`` ``frag`` (register fragment ``name``,
    element by element), ``vec`` (global 1-D tensor ``name`` of ``dtype``, element ``col0 +
    c`` for the fragment's column c, zero at or past ``extent``) or ``scalar`` (``value``,
    passed as a C++ ``dtype``: ``int`` or ``float``)."""

    kind: str
    name: str = ""
    dtype: str = "f32"
    col0: IExpr = IConst(0)
    extent: str = ""
    value: IExpr | None = None


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
    """Each thread stores its fragment to ``tensor`` at tile origin (``row0``, ``col0``)."""

    event: str
    acc: str
    tensor: str
    row0: IExpr
    col0: IExpr
    batch: IExpr | None
    dtype: str
    when: IExpr | None = None  # only where this holds (a last-iteration write of a host loop)


@dataclass(frozen=True)
class StageWrite:
    """Each thread writes its fragment ``acc`` into the swizzled 64x64 shared boxes of the
    staging tile ``tensor`` at byte ``offset`` (one tile per consumer warpgroup)."""

    event: str
    acc: str
    tensor: str
    offset: int
    dtype: str


@dataclass(frozen=True)
class TmaStore:
    """The staging tile ``tensor`` (``acc``'s shape per consumer warpgroup) at ``offset`` ->
    global at (``row0``, ``col0``) through TMA map ``map`` (whose ``tensor`` is the global
    tensor written), issued by the warpgroup's leader thread."""

    event: str
    acc: str
    tensor: str
    map: TmaMap
    offset: int
    row0: IExpr
    col0: IExpr
    batch: IExpr | None


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


@dataclass
class RoleCode:
    """The statements of one role (producer or consumers) for one tile, in IR order:
    ``before`` the first main loop, in each step of main loop ``i`` (``loops[i]``), and after
    it up to the next main loop or the tile's end (``afters[i]``)."""

    before: list = field(default_factory=list)
    loops: list = field(default_factory=lambda: [[]])
    afters: list = field(default_factory=lambda: [[]])

    def sections(self) -> list[list]:
        """The statement lists in program order (the lists themselves, to edit in place)."""
        return [self.before, *(sec for pair in zip(self.loops, self.afters) for sec in pair)]

    def all(self) -> list:
        return [st for sec in self.sections() for st in sec]


@dataclass(frozen=True)
class RowVector:
    """A per-row f32 vector of a ``rows``-row accumulator tile per consumer warpgroup, in the
    wgmma C layout's rows: each thread holds its 2 rows per atom (``[rows // 64][2]``), the
    same values as the other 3 lanes of its quad (row statistics: max, sum, rescale factor)."""

    name: str
    rows: int


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
class Vector:
    """A per-thread f32 register array of ``n`` elements (SIMT state such as row sums)."""

    name: str
    n: int


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


@dataclass
class KernelPlan:
    """Everything the emitter needs for one warp-specialized, pipelined block program."""

    name: str
    tensors: list[GlobalTensor]
    sizes: list[str]
    grid: list[
        IExpr
    ]  # tiles along each BLOCK dimension (b0 outermost), over the kernel's variables
    raster: int
    persistent: bool
    consumers: int
    stages: int
    trips: list  # each main loop's trip count (IR over the kernel's variables), in program order
    maps: list[TmaMap]
    buffers: list[StageBuffer]
    loads: list[Load]
    fragments: list[Fragment]
    prologue: list = field(default_factory=list)  # Fill / FillVector
    body: list = field(default_factory=list)  # Mma
    epilogue: list = field(
        default_factory=list
    )  # Add / StoreDirect / StageWrite / TmaStore / StoreVector
    vectors: list[Vector] = field(default_factory=list)
    row_vectors: list[RowVector] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)  # include name -> path: user C++ headers
    pointer_reads: set[str] = field(
        default_factory=set
    )  # read tensors the kernel loads by pointer (not TMA)
    simt_body: list = field(
        default_factory=list
    )  # RowSum: SIMT work on each stage, after the wgmmas issue
    smem_bytes: int = 0
    producer_registers: int = 40
    consumer_registers: int = 232
    mma_in_flight: int = 1
    warpspecialize: bool = True  # False: no producer warpgroup; thread 0 issues loads ahead
    barriers: list[Barrier] = field(default_factory=list)
    producer: RoleCode = field(default_factory=RoleCode)
    consumer: RoleCode = field(default_factory=RoleCode)
    issue_ahead: list = field(
        default_factory=list
    )  # no producer: the issuer's loads, STAGES - 1 steps ahead
    entry: list = field(default_factory=list)  # consumer statements before the first tile
    exit: list = field(default_factory=list)  # consumer statements after the last tile
    ring_extra: list = field(
        default_factory=list
    )  # per main loop: ring positions per tile besides its steps
    # (role, name) of the running variables each role's code reads: "pipe" (a pipeline state),
    # "kbase" (suffixed per main loop: "pipe_1", …), "pipe_ahead", "tphase", "more"
    counters: set = field(default_factory=set)
    requires: list[Require] = field(default_factory=list)
    flops: IExpr = IConst(0.0)  # useful floating-point operations of one launch, over the sizes
    grid_exprs: list[IExpr] = field(
        default_factory=list
    )  # ``grid`` over the sizes (cypressc tune's model)
    trip_expr: IExpr | None = None  # ``trip_count`` over the sizes and block indices
    host_loop: str | None = None  # a parallelized HOST loop: its variable, as the last grid dim
    floats: list[str] = field(
        default_factory=list
    )  # float entry parameters: kernel arguments after the sizes
    size_aliases: dict[str, str] = field(
        default_factory=dict
    )  # other names of the sizes (entry_sizes)

    @property
    def pointer_tensors(self) -> list[GlobalTensor]:
        """The tensors the kernel gets as pointers: those it writes, and read-only ones it
        loads element by element (an external leaf function's per-column vector)."""
        return [t for t in self.tensors if t.writes or t.name in self.pointer_reads]

    def summary(self) -> list[str]:
        """The ``// kernel: …`` lines ``cypressc explain`` prints after cuda-lowering (the IR
        printer calls this: it does not know the plan's types)."""
        grid = " x ".join(cexpr(g) for g in self.grid)
        out = [
            f"// kernel: grid {grid} tiles, {128 * (1 + self.consumers)} threads, "
            f"{self.stages} stages, TMA maps {', '.join(t.name for t in self.maps)}"
        ]
        if self.host_loop:
            kept = sorted({op.tensor for op in self.epilogue if getattr(op, "when", None)})
            out.append(
                f"// kernel: HOST loop %{self.host_loop} runs as the last grid dimension"
                + (
                    f"; {', '.join('%' + t for t in kept)} kept from its last iteration"
                    if kept
                    else ""
                )
            )
        if self.simt_body:
            out.append(
                "// kernel: SIMT on each stage after the wgmmas issue: "
                + ", ".join(f"{op.event} row_sum" for op in self.simt_body)
            )
        return out

    @property
    def flops_c(self) -> str:
        """``flops`` as C, in the launcher's scope."""
        return cexpr(self.flops, top=True)

    @property
    def trip_count(self) -> IExpr:
        """The first main loop's trip count (``num_k`` in the kernel)."""
        return self.trips[0]

    @staticmethod
    def loop_suffix(n: int) -> str:
        """The suffix of main loop ``n``'s kernel variables: ``num_k``, ``pipe``, ``kbase`` for
        the first, ``num_k_1``, ``pipe_1``, … for the second."""
        return "" if n == 0 else f"_{n}"
