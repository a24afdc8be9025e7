"""Syntax tree of the ``.cyp`` language (Cypress paper §3.2, Fig. 3).

Grammar (ASDL-like; every node ends with ``loc``)::

    Program    = (path, includes: str*, variants: Variant*, dtype_params: DtypeParam*,
                  externals: External*, choices: ChoiceParam*)
    External   = (name, cpp, params: Param*, reads: str*, writes: str*, header)
                                                        -- @external: a user C++ leaf function
    ChoiceParam = (name, allowed: str*, bound)          -- ACT = choice(f, g)
    Variant    = (name, task, kind: inner|leaf, reads: str*, writes: str*,
                  params: Param*, body: Stmt*)
    Param      = (name, type: TensorType | ScalarType)
    TensorType = (rank: int, dtype: f16|bf16|f32|i32|f8e4m3|f8e5m2, dims: str*?)
    ScalarType = (kind: int|float)                      -- ``float`` only in @external
    Stmt       = Tunable(name, kind: int|processor|atom)
               | Let(name, value: Expr)                 -- scalar index arithmetic
               | PartitionDecl(name, tensor, kind: blocks|mma|slices, args: Expr*)
               | MakeTensor(name, type: TensorType, dims: Expr*)
               | Launch(task, args: Expr*)
               | Loop(kind: prange|srange, vars: str*, extents: Expr*, body: Stmt*)
               | LeafCall(fn, args: Expr*)
    Expr       = Name(id) | Const(value) | Str(value) | Atom(name)
               | BinOp(op, lhs, rhs) | Call(fn: cdiv|min|max, args)
               | Shape(tensor, dim) | Piece(partition, indices: Expr*)

Nodes are frozen dataclasses; edit with :func:`dataclasses.replace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from cypressc.abi.dtypes import DTYPES as _ABI_DTYPES
from cypressc.diagnostics import Loc
from cypressc.lang.kinds import PartKind, Proc

# C++20's keywords and alternative tokens, and CUDA's: a kernel name becomes a C symbol
CXX_KEYWORDS = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t
    char16_t char32_t class compl concept const consteval constexpr constinit const_cast continue
    co_await co_return co_yield decltype default delete do double dynamic_cast else enum explicit
    export extern false float for friend goto if inline int long mutable namespace new noexcept
    not not_eq nullptr operator or or_eq private protected public register reinterpret_cast
    requires return short signed sizeof static static_assert static_cast struct switch template
    this thread_local throw true try typedef typeid typename union unsigned using virtual void
    volatile wchar_t while xor xor_eq __global__ __device__ __host__ __shared__ __constant__
    __managed__ __restrict__""".split()
)

DTYPES = tuple(_ABI_DTYPES)  # the element types a kernel parameter may have (cypressc.abi)
PROCESSORS = tuple(Proc)
TUNABLE_KINDS = ("int", "processor", "atom")

_L = field(default=Loc("<none>"), compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class TensorType:
    """A tensor parameter or local type: ``tensor[rank, dtype]``, or, naming each
    dimension's size, ``tensor[(M, K), dtype]`` (equal names are equal sizes; the
    entrypoint's names become the kernel's run-time size arguments)."""

    rank: int
    dtype: str
    dims: tuple[str, ...] | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return f"tensor[{self.rank}, {self.dtype}]"


@dataclass(frozen=True, slots=True)
class ScalarType:
    """A scalar parameter: ``int`` (index arithmetic: extents, indices, offsets) or ``float``
    (a value for a leaf's scalar operand, e.g. the softmax scale; never an index).  An
    entrypoint's scalars are the kernel's run-time arguments (a ``float`` is passed as a C
    ``float``); an ``@external`` function's are passed to the C++ function."""

    kind: str = "int"

    def __str__(self) -> str:
        return self.kind


Type = Union[TensorType, ScalarType]


# ----------------------------------------------------------------------------- expressions
@dataclass(frozen=True, slots=True)
class Name:
    id: str
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class Const:
    value: int | float
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class Str:
    value: str
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class Atom:
    """An instruction atom written as a call with no arguments, e.g. ``WGMMA_64x256x16()``."""

    name: str
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class BinOp:
    op: str  # one of + - * / // %
    lhs: "Expr"
    rhs: "Expr"
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class Call:
    fn: str  # cdiv | min | max
    args: tuple["Expr", ...]
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class Shape:
    """``T.shape[d]``: the run-time extent of dimension ``dim`` of tensor ``tensor``."""

    tensor: str
    dim: int
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class Piece:
    """``P[i, j]``: the sub-tensor of partition ``partition`` at the given indices."""

    partition: str
    indices: tuple["Expr", ...]
    loc: Loc = _L


Expr = Union[Name, Const, Str, Atom, BinOp, Call, Shape, Piece]


# ----------------------------------------------------------------------------- statements
@dataclass(frozen=True, slots=True)
class Tunable:
    """``X = tunable(kind)``: a compile-time value bound by the mapping."""

    name: str
    kind: str
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class Let:
    """``x = <scalar expr>``: scalar index arithmetic."""

    name: str
    value: Expr
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class PartitionDecl:
    """``P = partition_by_blocks(T, (b0, ...))`` / ``partition_by_mma(T, ATOM, PROC, "A")``
    / ``partition_by_slices(T, dim)``.

    ``args`` holds, for ``blocks``: the block extents; for ``mma``: (atom, proc, Str operand);
    for ``slices``: (Const dim,).
    """

    name: str
    tensor: str
    kind: PartKind
    args: tuple[Expr, ...]
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class MakeTensor:
    """``T: tensor[r, dt] = make_tensor(d0, ...)``: a task-local tensor."""

    name: str
    type: TensorType
    dims: tuple[Expr, ...]
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class Launch:
    """``launch("task", args...)``: one child task."""

    task: str
    args: tuple[Expr, ...]
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class Loop:
    """``for i, j in prange(e0, e1):`` (parallel) or ``for k in srange(e):`` (sequential)."""

    kind: str
    vars: tuple[str, ...]
    extents: tuple[Expr, ...]
    body: tuple["Stmt", ...]
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class LeafCall:
    """``fn(args...)`` in a leaf variant: a call to a leaf function of the intrinsics registry."""

    fn: str
    args: tuple[Expr, ...]
    loc: Loc = _L


Stmt = Union[Tunable, Let, PartitionDecl, MakeTensor, Launch, Loop, LeafCall]


# ----------------------------------------------------------------------------- declarations
@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: Type
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class Variant:
    """One ``@task(...)``-decorated ``def``: a variant of task ``task``."""

    name: str
    task: str
    kind: str  # "inner" | "leaf"
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    loc: Loc = _L
    # Legion's reduction privilege ("add"): the variant only adds into these parameters, so
    # instances that reduce into one piece commute; its fresh copy starts undefined
    reduces: tuple[str, ...] = ()

    @property
    def tensor_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if isinstance(p.type, TensorType))

    def tunables(self) -> dict[str, Tunable]:
        """The tunables this variant declares, by name (declared at top level of the body)."""
        return {s.name: s for s in self.body if isinstance(s, Tunable)}


@dataclass(frozen=True, slots=True)
class DtypeParam:
    """A top-level ``T = dtype(f16, bf16)``: an element type the program is generic over.

    ``allowed`` lists the dtypes it may be bound to (the first is the default);
    ``bound`` is the one this parse used (``cypressc … --dtype T=bf16``).  Types that
    name ``T`` were resolved to ``bound`` by the parser, so nothing downstream sees ``T``.
    """

    name: str
    allowed: tuple[str, ...]
    bound: str
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class External:
    """An ``@external("cpp::name", writes=[...])``-decorated ``def``: a leaf function the
    user writes in C++ (the paper's call-external, §3.2), applied elementwise.

    ``cpp`` is the C++ function called once per element (``void f(float& x, float b)``:
    written operands by reference); ``header`` is the ``include()``d file that declares it
    and ``reference`` the path of the optional NumPy reference (``<header stem>.py`` next
    to the header, a function of the same name) or ``None``."""

    name: str
    cpp: str
    params: tuple[Param, ...]
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    header: str
    reference: str | None = None
    loc: Loc = _L
    header_path: str | None = None  # the header's absolute path (None: parsed from a string)

    def broadcast(self, name: str) -> bool:
        """Whether operand ``name`` is one element that every element of the call reads: a
        rank-1 tensor declared ``tensor[(1,), f32]`` (a 128 x 128 block's scale, read once per
        call; the piece bound to it must have one element)."""
        t = next(q.type for q in self.params if q.name == name)
        return isinstance(t, TensorType) and t.rank == 1 and t.dims == ("1",)

    def per_row(self, name: str) -> bool:
        """Whether rank-1 operand ``name`` of a rank-2 call is read per row (element (r, c)
        reads its element r): its one dimension is named like the first operand's first,
        ``c: tensor[(R, C), f32]`` and ``s: tensor[(R,), f32]``.  Any other rank-1 operand
        of a rank-2 call is per column."""
        ts = [q.type for q in self.params if isinstance(q.type, TensorType)]
        t = next(q.type for q in self.params if q.name == name)
        return (
            isinstance(t, TensorType)
            and t.rank == 1
            and ts[0].rank == 2
            and t.dims is not None
            and ts[0].dims is not None
            and t.dims[0] == ts[0].dims[0]
        )


@dataclass(frozen=True, slots=True)
class ChoiceParam:
    """A top-level ``ACT = choice(bias_gelu, bias_silu)``: a leaf function the program is
    generic over, bound with ``--param ACT=bias_silu`` (the first by default).  Calls of
    ``ACT(...)`` were resolved to ``bound`` by the parser."""

    name: str
    allowed: tuple[str, ...]
    bound: str
    loc: Loc = _L


@dataclass(frozen=True, slots=True)
class Program:
    path: str
    includes: tuple[str, ...]
    variants: tuple[Variant, ...]
    loc: Loc = _L
    dtype_params: tuple[DtypeParam, ...] = ()
    externals: tuple[External, ...] = ()
    choices: tuple[ChoiceParam, ...] = ()

    def external(self, name: str) -> External | None:
        return next((e for e in self.externals if e.name == name), None)

    @property
    def kernel_name(self) -> str:
        """The name the generated kernel takes: the file's name without ``.cyp`` (its
        ``<name>.cu``, ``<name>_launch``, ``lib<name>.so``); the checker's E037 refuses one
        that is not a C identifier the build can use."""
        return self.path.rsplit("/", 1)[-1].removesuffix(".cyp")

    @property
    def bindings(self) -> dict[str, str]:
        """Every program parameter and what this parse bound it to (``{"T": "f16", "ACT": "bias_gelu"}``)."""
        return {
            **{d.name: d.bound for d in self.dtype_params},
            **{c.name: c.bound for c in self.choices},
        }

    def variant(self, name: str) -> Variant | None:
        for v in self.variants:
            if v.name == name:
                return v
        return None

    def tasks(self) -> dict[str, list[Variant]]:
        """Variants grouped by task name, in source order."""
        out: dict[str, list[Variant]] = {}
        for v in self.variants:
            out.setdefault(v.task, []).append(v)
        return out


def walk(stmts: tuple[Stmt, ...]):
    """Yield every statement in ``stmts``, descending into loop bodies (pre-order)."""
    for s in stmts:
        yield s
        if isinstance(s, Loop):
            yield from walk(s.body)


def expr_names(e: Expr) -> set[str]:
    """Names an expression reads (tensor names of ``Shape``/``Piece`` included)."""
    if isinstance(e, Name):
        return {e.id}
    if isinstance(e, BinOp):
        return expr_names(e.lhs) | expr_names(e.rhs)
    if isinstance(e, Call):
        return set().union(*(expr_names(a) for a in e.args)) if e.args else set()
    if isinstance(e, Shape):
        return {e.tensor}
    if isinstance(e, Piece):
        out = {e.partition}
        for i in e.indices:
            out |= expr_names(i)
        return out
    return set()
