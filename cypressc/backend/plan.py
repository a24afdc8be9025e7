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

This module holds the plan itself (:class:`KernelPlan`, its per-role statement lists
:class:`RoleCode`) and the launcher's conditions (:class:`Require`, :func:`size_tree`).  The
value types it holds live in :mod:`cypressc.backend.plan_decl` (what the kernel declares:
tensors, TMA maps, stage buffers, mbarriers, register tiles) and
:mod:`cypressc.backend.plan_stmt` (its statements); they are re-exported here, and only
here, so that ``from cypressc.backend import plan as P`` with ``P.<Name>`` keeps naming the
whole plan in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cypressc.backend.cexpr import cexpr
from cypressc.backend.plan_decl import (
    SWIZZLES,
    Barrier,
    Fragment,
    GlobalTensor,
    RowVector,
    StageBuffer,
    TmaMap,
    Vector,
    swizzle_for,
)
from cypressc.backend.plan_stmt import (
    Add,
    Convert,
    ExtArg,
    External,
    Fill,
    FillShared,
    FillVector,
    Load,
    LoadDirect,
    Mma,
    RowOp,
    RowStore,
    RowSum,
    Scale,
    StageWrite,
    WriteShared,
    StoreDirect,
    StoreVector,
    Sync,
    TmaStore,
    box_cols,
)
from cypressc.ir.nodes import IBin, IConst, IExpr, IProc, IVar

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
    "Scale",
    "ExtArg",
    "External",
    "StoreDirect",
    "LoadDirect",
    "StageWrite",
    "WriteShared",
    "TmaStore",
    "box_cols",
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
    # deterministic: true: a reduce-add the blocks along the last grid dimension keep in order
    # (a progress word per tile in a workspace the launcher allocates; TmaStore.order)
    ordered: bool = False
    # blocks per thread-block cluster along each grid dimension (the mapping's ``cluster``,
    # when some copy is multicast), else None
    cluster: tuple[int, ...] | None = None
    floats: list[str] = field(
        default_factory=list
    )  # float entry parameters: kernel arguments after the sizes
    size_aliases: dict[str, str] = field(
        default_factory=dict
    )  # other names of the sizes (entry_sizes)

    @property
    def simt(self) -> bool:
        """A kernel with no main loop: no TMA, no wgmma, each thread loads, computes and stores
        its own elements (a block program without an ``srange``)."""
        return not self.trips

    @property
    def pointer_tensors(self) -> list[GlobalTensor]:
        """The tensors the kernel gets as pointers: those it writes, and read-only ones it
        loads element by element (an external leaf function's per-column vector)."""
        return [t for t in self.tensors if t.writes or t.name in self.pointer_reads]

    def read_in_pairs(self, tensor: str) -> bool:
        """Whether the kernel reads ``tensor`` by pointer two adjacent elements at a time (a
        fragment's direct load, or its reduction, ``red.global.v2.f32.add``): its innermost
        extent must be even and its address aligned to two elements."""
        return any(
            isinstance(s, (LoadDirect, StoreDirect))
            and s.tensor == tensor
            and (isinstance(s, LoadDirect) or s.reduce)
            for s in self.epilogue
        )

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
