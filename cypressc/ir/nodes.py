"""The event IR (Cypress paper §4.1, Fig. 7).

Grammar (every op is a frozen dataclass; blocks are tuples of ops)::

    IExpr   = IConst(value) | IVar(name) | IProc(proc, dim) | IBin(op, a, b)
    View    = TRef(name)                         -- a whole tensor
            | Piece(partition, idx: IExpr*)      -- one piece of a partition
    EvRef   = (name, idx: (IExpr | None)*)       -- None is the broadcast ``:``
    Dim     = (extent: IExpr, proc)              -- one dimension of an event array
    Op      = Alloc(name, shape: IExpr*, dtype, mem, layout: View?)
            | Let(name, value: IExpr)
            | Partition(name, base: View, kind, params, piece_shape: IExpr*)
            | Copy(ev, src: View, dst: View, pre: EvRef*, bar: BarIdx?)
            | Call(ev, fn, args: (View | IExpr | AtomArg)*, pre: EvRef*)
            | For(ev, var, lo, hi, pre: EvRef*, body: Block)
            | PFor(ev, var, lo, hi, proc, pre: EvRef*, body: Block)
            | SyncOp                             -- after sync-insertion (cypressc.ir.sync)
    Block   = (ops: Op*, yields: EvRef*)
    Module  = (name, params: Alloc*, scalars: str*, body: Block, synchronized: bool,
               roles: (ev, role)*, sites?, schedule?, resources?, kernel?)  -- pass results

Every op also has ``dims: Dim*``: the processor dimensions it is replicated over.
The dependence analysis leaves ``dims`` empty; vectorization (§4.2.2) flattens the
implicit ``pfor`` loops (BLOCK, WARPGROUP, WARP, THREAD) and records their extents
there, so the event type of an async op is exactly ``[(n, PROC), …]`` of its dims.

``sync-insertion`` (§4.2.6) adds the synchronization ops of :mod:`cypressc.ir.sync`
(mbarriers, waits, arrivals, wgmma groups, named barriers, fences) to the blocks, gives
each TMA copy its completion barrier (``bar``) and sets ``Module.synchronized``.

Sequential ``for`` semantics follow the paper: iteration k+1 starts once iteration
k's yields have completed; ops inside a body with no precondition wait only for
their iteration to start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

from cypressc.ir.kinds import Role
from cypressc.ir.results import Resources, Schedule, SmemSlot
from cypressc.lang.kinds import Mem, PartKind, Proc

if TYPE_CHECKING:
    from cypressc.ir.origin import Sites
    from cypressc.ir.sync import BarIdx
    from cypressc.ir.target import Target

__all__ = [
    "IConst",
    "IVar",
    "IProc",
    "IBin",
    "IExpr",
    "TRef",
    "Piece",
    "View",
    "AtomArg",
    "EvRef",
    "Dim",
    "Alloc",
    "Let",
    "Partition",
    "Copy",
    "Call",
    "For",
    "PFor",
    "Block",
    "Module",
    "Op",
    "AsyncOp",
    "ev_type_str",
    "view_root",
    "iconst",
    "ibin",
    "Schedule",
    "Resources",
    "SmemSlot",
]


# ----------------------------------------------------------------------------- scalars
@dataclass(frozen=True, slots=True)
class IConst:
    """A compile-time number.  ``origin`` names the mapping values it was computed from
    (:class:`cypressc.ir.origin.Origin`: a tunable of an instance), so an error about it
    can point at the YAML that set it; it takes no part in equality or printing."""

    value: int | float
    origin: tuple = field(default=(), compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class IVar:
    """An SSA scalar: a ``Let``, a loop variable, or a scalar module parameter (M, N, K)."""

    name: str


@dataclass(frozen=True, slots=True)
class IProc:
    """The index of the executing processor at level ``proc`` inside its parent
    (``dim`` selects the grid dimension for BLOCK)."""

    proc: Proc
    dim: int = 0


@dataclass(frozen=True, slots=True)
class IBin:
    """``a op b``: index arithmetic (``+ - * / // % cdiv min max``), or, in the kernel
    expressions of the CUDA lowering (:mod:`cypressc.backend.cexpr`), a condition: a
    comparison ``== != < <= > >=``, ``&&``, or ``^`` of parities."""

    op: str
    a: "IExpr"
    b: "IExpr"


IExpr = Union[IConst, IVar, IProc, IBin]


def iconst(v: int) -> IConst:
    return IConst(v)


def ibin(op: str, a: IExpr, b: IExpr) -> IExpr:
    """Build ``a op b``, folding constants (so static tile shapes stay numbers); a folded
    constant keeps the origins of both operands."""
    if isinstance(a, IConst) and isinstance(b, IConst):
        folded = _fold(op, a.value, b.value)
        if folded is not None:
            return IConst(folded, a.origin + tuple(o for o in b.origin if o not in a.origin))
    if op in ("+", "-") and isinstance(b, IConst) and b.value == 0:
        return a
    if op == "+" and isinstance(a, IConst) and a.value == 0:
        return b
    if op == "*" and isinstance(a, IConst) and a.value == 0:
        return IConst(0, a.origin)
    if op == "*" and isinstance(b, IConst) and b.value == 0:
        return IConst(0, b.origin)
    if op == "*" and isinstance(b, IConst) and b.value == 1:
        return a
    if op == "*" and isinstance(a, IConst) and a.value == 1:
        return b
    if op in ("/", "//") and isinstance(b, IConst) and b.value == 1:
        return a
    return IBin(op, a, b)


def _fold(op: str, x: int | float, y: int | float) -> int | float | None:
    """``x op y`` when it is a number the IR keeps folded, else None (division by zero,
    an inexact ``/``: those stay symbolic)."""
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op in ("/", "//") and y != 0 and isinstance(x, int) and isinstance(y, int) and x % y == 0:
        return x // y
    if op == "//" and y != 0:
        return x // y
    if op == "%" and y != 0:
        return x % y
    if op == "cdiv" and y != 0:
        return -(-x // y)
    if op == "min":
        return min(x, y)
    if op == "max":
        return max(x, y)
    return None


# ----------------------------------------------------------------------------- views & events
@dataclass(frozen=True, slots=True)
class TRef:
    name: str


@dataclass(frozen=True, slots=True)
class Piece:
    partition: str
    idx: tuple[IExpr, ...]


View = Union[TRef, Piece]


@dataclass(frozen=True, slots=True)
class AtomArg:
    """An instruction atom operand of a ``call`` (e.g. ``WGMMA_64x256x16``)."""

    name: str


@dataclass(frozen=True, slots=True)
class EvRef:
    """A use of event ``name``; ``idx`` has one entry per array dimension, ``None`` = ``:``."""

    name: str
    idx: tuple[IExpr | None, ...] = ()


@dataclass(frozen=True, slots=True)
class Dim:
    extent: IExpr
    proc: Proc


def ev_type_str(dims: tuple[Dim, ...], show) -> str:
    if not dims:
        return "()"
    return "[" + ", ".join(f"({show(d.extent)}, {d.proc})" for d in dims) + "]"


# ----------------------------------------------------------------------------- ops
@dataclass(frozen=True, slots=True)
class Alloc:
    """``%name = tensor [shape] dtype @MEM``; ``layout`` is the view whose element
    arrangement the tensor copies (a register fragment of an mma partition)."""

    name: str
    shape: tuple[IExpr, ...]
    dtype: str
    mem: Mem
    layout: View | None = None
    dims: tuple[Dim, ...] = ()


@dataclass(frozen=True, slots=True)
class Let:
    name: str
    value: IExpr
    dims: tuple[Dim, ...] = ()


@dataclass(frozen=True, slots=True)
class Partition:
    """``%P = partition_by_<kind> %base (params)``; ``piece_shape`` is one piece's extent.

    params: blocks -> block extents (IExpr); slices -> (dim,);
    mma -> (atom name, processor, operand).
    """

    name: str
    base: View
    kind: PartKind
    params: tuple
    piece_shape: tuple[IExpr, ...]
    dims: tuple[Dim, ...] = ()


@dataclass(frozen=True, slots=True)
class Copy:
    """``%ev = copy src -> dst {pre}``; after sync-insertion a TMA load names the mbarrier
    stage it completes on (``bar``, a :class:`cypressc.ir.sync.BarIdx`).

    ``reduce`` = ``"add"`` makes it ``copy.add``: ``dst += src`` elementwise, one atomic
    reduction (Legion's reduction privilege: the copy-out of a ``reduces=`` argument); two
    reductions into one view commute, so no edge orders them.  ``ordered`` (``copy.add.ordered``,
    the mapping's ``deterministic: true``; :mod:`cypressc.passes.reduction_order`): the blocks
    along the grid's innermost dimension add into each tile in their order, so the sum is
    the same bits on every run; an order across blocks, not an edge of the block's IR.
    ``multicast`` (``… on %full[s] multicast(block_id.x)``, the mapping's ``cluster``;
    :mod:`cypressc.passes.cluster_multicast`): the grid dimensions along which the blocks of
    a cluster read the same tile; the first block of them issues the TMA copy once for all,
    into each one's stage and onto each one's ``bar``."""

    ev: str
    src: View
    dst: View
    pre: tuple[EvRef, ...] = ()
    dims: tuple[Dim, ...] = ()
    bar: BarIdx | None = None
    reduce: str | None = None
    ordered: bool = False
    multicast: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Call:
    """A leaf-function invocation; ``task`` names the leaf variant it came from."""

    ev: str
    fn: str
    args: tuple
    pre: tuple[EvRef, ...] = ()
    dims: tuple[Dim, ...] = ()
    task: str = ""
    ext: object = field(default=None, compare=False, repr=False)  # LeafFn of a user C++ function


@dataclass(frozen=True, slots=True)
class Block:
    ops: tuple["Op", ...]
    yields: tuple[EvRef, ...] = ()


@dataclass(frozen=True, slots=True)
class For:
    ev: str
    var: str
    lo: IExpr
    hi: IExpr
    pre: tuple[EvRef, ...]
    body: Block
    dims: tuple[Dim, ...] = ()
    pipeline: int = 0  # stage depth requested by the mapping (0: not pipelined)
    # positions of the loop's stage rings that copies outside it take per tile (a peeled step's
    # tile: warp-specialization's ring joins, :mod:`cypressc.passes.rings`)
    ring_extra: int = 0


@dataclass(frozen=True, slots=True)
class PFor:
    ev: str
    var: str
    lo: IExpr
    hi: IExpr
    proc: Proc
    pre: tuple[EvRef, ...]
    body: Block
    dims: tuple[Dim, ...] = ()


Op = Union[Alloc, Let, Partition, Copy, Call, For, PFor]
AsyncOp = (Copy, Call, For, PFor)


@dataclass(frozen=True, slots=True)
class Module:
    """A lowered program: ``params`` are the entrypoint's tensors (GLOBAL), ``scalars`` the
    run-time sizes they introduce (``M``, ``N``, ``K``…) and its ``int`` parameters,
    ``floats`` its ``float`` parameters (values such as a softmax scale, never indices),
    ``body`` the HOST-level block.  ``size_aliases`` pairs every other name of a size (an
    unnamed dimension's ``C_d0``, a ``let`` that names it) with the size
    (:mod:`cypressc.passes.entry_sizes`).

    ``roles`` (from ``warp-specialization``, paper §4.2.5) pairs each copy and call event
    with the role that runs it (``producer`` / ``consumer``).  ``synchronized`` is set by
    ``sync-insertion``: from then on every event edge must be realized by a sync op
    (:mod:`cypressc.ir.sync_verify` checks it).

    What a pass hands on to later ones about the whole block is a typed field, ``None``
    until that pass ran and left out of ``==`` (two modules with the same program are
    equal whatever was decided about them): ``sites`` (dependence analysis: where each
    allocation and partition came from, :class:`~cypressc.ir.origin.Sites`), ``schedule``
    (warp specialization, :class:`~cypressc.ir.results.Schedule`), ``resources`` (resource
    allocation and sync-insertion's mbarrier bytes, :class:`~cypressc.ir.results.Resources`)
    and ``kernel`` (CUDA lowering, :class:`~cypressc.backend.plan.KernelPlan`; the IR layer never
    looks inside it).  ``target`` (:class:`~cypressc.ir.target.Target`, set by the lowering from
    the task tree) is the machine and the BLOCK knobs: what passes read instead of the mapping;
    None for IR written by hand (:meth:`Target.default` applies)."""

    name: str
    params: tuple[Alloc, ...]
    scalars: tuple[str, ...]
    body: Block
    synchronized: bool = False
    roles: tuple[tuple[str, Role], ...] = ()
    floats: tuple[str, ...] = ()
    size_aliases: tuple[tuple[str, str], ...] = ()
    sites: Sites | None = field(default=None, compare=False)
    schedule: Schedule | None = field(default=None, compare=False)
    resources: Resources | None = field(default=None, compare=False)
    kernel: object | None = field(
        default=None, compare=False
    )  # the backend's KernelPlan: opaque here
    target: Target | None = field(default=None, compare=False)

    def role_map(self) -> dict[str, Role]:
        """``roles`` as a dict: event -> ``producer`` / ``consumer`` (empty before
        warp specialization)."""
        return dict(self.roles)


def view_root(view: View, parts: dict[str, Partition]) -> str:
    """The allocation a view ultimately refers to."""
    while isinstance(view, Piece):
        view = parts[view.partition].base
    return view.name
