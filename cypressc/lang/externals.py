"""The paper's call-external (§3.2): leaf functions written by the user in C++.

A program declares one with a decorated, bodiless ``def``::

    include("ops/epilogue.cuh")

    @external("cypress_ops::bias_gelu", writes=["x"])
    def bias_gelu(x: tensor[2, f32], bias: tensor[1, f32]):
        \"\"\"x = GELU(x + bias), bias broadcast along the rows.\"\"\"

and a Leaf variant calls it like an intrinsic: ``bias_gelu(C, bias)``.  An external leaf
function runs at ``THREAD`` and is **elementwise**: the generated code calls the C++
function once per element of the thread's piece, written operands by reference, read ones
by value, in parameter order (``void bias_gelu(float& x, float bias)``).  Every tensor
operand has the shape of the first one, except that a rank-1 operand of a rank-2 call is
a per-column vector: element (r, c) reads its element c (c counted in the tile that
``partition_by_mma`` split), or a per-row vector, element r, when the declaration names its
dimension like the first operand's rows (``x: tensor[(R, C), f32], s: tensor[(R,), f32]``:
:meth:`~cypressc.lang.syntax.External.per_row`).  A ``tensor[(1,), f32]`` operand is one
element that every element reads (a block scale: :meth:`~cypressc.lang.syntax.External.broadcast`).
Scalars are ``int`` or ``float`` arguments.

The NumPy reference (what the CPU interpreters run) is the function of the same name in
``<header stem>.py`` next to the header; it takes the operands as float64 arrays (vectors
already broadcast to the first operand's shape) and returns the new values of the written
operands (one array, or a tuple in parameter order).  Without it the interpreters still
check the schedule and report that the values were not checked.

``ACT = choice(bias_gelu, bias_silu)`` declares a leaf-function parameter: calls of
``ACT(...)`` use the bound one (``--param ACT=bias_silu``; the first by default).

Errors: E014 (a bad ``@external`` declaration, a header that does not declare the function,
an unloadable reference), E015 (a bad ``choice`` parameter or binding).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from cypressc.diagnostics import CypressError, Loc
from cypressc.lang import syntax as S
from cypressc.lang.intrinsics import LEAF_FUNCTIONS, LeafFn, Operand, OperandRule
from cypressc.lang.kinds import Mem, OperandKind, Proc

__all__ = [
    "ParserHost",
    "parse_external",
    "parse_choice",
    "leaf_functions",
    "leaf_fn",
    "find_header",
]


class ParserHost(Protocol):
    """What this module needs of the parser that calls it (:class:`cypressc.lang.parser._Parser`):
    the program's dtype bindings and declarations so far, the errors it collects, and its way
    of locating and typing AST nodes."""

    bindings: dict[str, str]  # --dtype/--param NAME=VALUE
    choices: dict[str, S.ChoiceParam]
    choice_args: dict[tuple[str, str], Loc]  # (choice, function) -> where it is listed
    dtype_params: dict[str, S.DtypeParam]
    errors: list[CypressError]

    def loc(self, node: ast.AST) -> Loc: ...

    def err(self, code: str, msg: str, node: ast.AST, hint: str | None = None) -> CypressError: ...

    def type_(self, ann: ast.expr) -> S.Type: ...


_USAGE = (
    'write @external("ns::cpp_name", writes=["x"]) over a def with typed parameters and no body'
)
# a C++ id-expression: qualified names, template arguments (numbers, names, ::)
_CPP_NAME = re.compile(r"^(::)?[A-Za-z_]\w*(::[A-Za-z_]\w*)*(<[\w:, .+-]*>)?$")


def find_header(name: str, dirs: list[Path]) -> Path | None:
    """The first ``dir / name`` that is a file, or None."""
    for d in dirs:
        try:
            if (d / name).is_file():
                return d / name
        except (OSError, ValueError):
            continue
    return None


def _base_name(cpp: str) -> str:
    """``ns::f<3>`` -> ``f``: the identifier a header must mention."""
    return cpp.split("<", 1)[0].rsplit("::", 1)[-1]


def _param_type(p: ParserHost, ann: ast.expr) -> S.Type:
    """An external parameter's type: the parser's, plus ``tensor[(1,), dtype]``, a one-element
    vector that every element of the call reads (:meth:`~cypressc.lang.syntax.External.broadcast`)."""
    sl = ann.slice if isinstance(ann, ast.Subscript) else None
    if (
        isinstance(sl, ast.Tuple)
        and len(sl.elts) == 2
        and isinstance(sl.elts[0], ast.Tuple)
        and len(sl.elts[0].elts) == 1
        and isinstance(one := sl.elts[0].elts[0], ast.Constant)
        and type(one.value) is int
        and one.value == 1
    ):
        rank1 = ast.copy_location(
            ast.Subscript(ann.value, ast.Tuple([ast.Constant(1), sl.elts[1]], ast.Load())), ann
        )
        t = p.type_(rank1)
        assert isinstance(t, S.TensorType)
        return S.TensorType(1, t.dtype, ("1",))
    return p.type_(ann)


def parse_external(
    p: ParserHost, fn: ast.FunctionDef, includes: list[tuple[str, Path | None]]
) -> S.External:
    """An ``@external(...)`` def -> :class:`~cypressc.lang.syntax.External` (E014 if malformed)."""
    dec = fn.decorator_list[0]
    assert isinstance(dec, ast.Call)
    if len(fn.decorator_list) != 1:
        raise p.err("E014", f"external '{fn.name}' takes exactly one decorator", fn, _USAGE)
    if len(dec.args) != 1 or not (
        isinstance(dec.args[0], ast.Constant) and isinstance(dec.args[0].value, str)
    ):
        raise p.err("E014", "@external takes the C++ function's name as one string", dec, _USAGE)
    cpp = dec.args[0].value.strip()
    if not _CPP_NAME.match(cpp):
        raise p.err(
            "E014",
            f"'{cpp}' is not a C++ function name",
            dec.args[0],
            "a name, optionally qualified and with template arguments: ns::f, ns::act<1>",
        )
    privs: dict[str, tuple[str, ...] | None] = {"reads": None, "writes": None}
    named: list[tuple[str, ast.Constant]] = []  # (keyword, its string): errors point at the string
    for kw in dec.keywords:
        if kw.arg not in privs:
            raise p.err("E014", f"unknown @external keyword '{kw.arg}'", kw, _USAGE)
        if not isinstance(kw.value, (ast.List, ast.Tuple)) or not all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in kw.value.elts
        ):
            raise p.err("E014", f"{kw.arg}= takes a list of parameter names as strings", kw.value)
        privs[kw.arg] = tuple(e.value for e in kw.value.elts)  # type: ignore[union-attr]
        named += [(kw.arg, e) for e in kw.value.elts]  # type: ignore[misc]
    if fn.name in LEAF_FUNCTIONS:
        raise p.err(
            "E014",
            f"'{fn.name}' is a built-in leaf function; an external needs its own name",
            fn,
            f"rename the def (e.g. '{fn.name}_ext') and call it by that name; the C++ name may stay",
        )
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs or a.kw_defaults:
        raise p.err("E014", "external parameters are plain positional names with types", fn)
    params: list[S.Param] = []
    for arg in a.args:
        if any(q.name == arg.arg for q in params):
            raise p.err("E014", f"duplicate parameter '{arg.arg}'", arg)
        if arg.annotation is None:
            raise p.err(
                "E014",
                f"parameter '{arg.arg}' has no type",
                arg,
                "annotate it: `x: tensor[2, f32]`, `n: int` or `alpha: float`",
            )
        params.append(S.Param(arg.arg, _param_type(p, arg.annotation), p.loc(arg)))
    for st in fn.body:
        if not (
            isinstance(st, ast.Pass)
            or isinstance(st, ast.Expr)
            and isinstance(st.value, ast.Constant)
        ):
            raise p.err(
                "E014",
                "an external's body is its docstring (or ...): the code is the C++ function",
                st,
                "write the computation in the header; add a NumPy reference next to it",
            )
    tensors = [q for q in params if isinstance(q.type, S.TensorType)]
    names = {q.name for q in tensors}
    writes = privs["writes"] or ()
    reads = privs["reads"] if privs["reads"] is not None else tuple(q.name for q in tensors)
    for kw_name, e in named:
        if e.value not in names:
            scalar = any(q.name == e.value for q in params)
            raise p.err(
                "E014",
                f"{kw_name}= names '{e.value}', which is not a tensor parameter of external "
                f"'{fn.name}'",
                e,
                f"tensor parameters: {', '.join(sorted(names)) or '(none)'}"
                + (
                    "; a scalar parameter is passed by value and cannot be written"
                    if scalar
                    else ""
                ),
            )
    if not writes:
        raise p.err(
            "E014",
            f"external '{fn.name}' writes nothing",
            dec,
            'name the operands it changes: writes=["x"]',
        )
    first = tensors[0].type
    assert isinstance(first, S.TensorType)
    for q in tensors:
        t = q.type
        assert isinstance(t, S.TensorType)
        if (
            t.rank > 2
            or t.rank != first.rank
            and not (t.rank == 1 and first.rank == 2)
            or q.name in writes
            and t.rank != first.rank
        ):
            vs = (
                ""
                if q is tensors[0]
                else f", the first operand '{tensors[0].name}' rank {first.rank}"
            )
            raise p.err(
                "E014",
                f"operand '{q.name}' of external '{fn.name}' has rank {t.rank}{vs}",
                next(x.annotation or x for x in a.args if x.arg == q.name),
                "an elementwise external's operands all have the first one's rank (1 or 2), "
                "except that a rank-2 call may read rank-1 per-column (or per-row) vectors",
            )
    if first.rank == 2 and first.dims is not None and first.dims[0] == first.dims[1]:
        for q in tensors[1:]:
            t = q.type
            if t.rank == 1 and t.dims is not None and t.dims[0] == first.dims[0]:  # type: ignore[union-attr]
                raise p.err(
                    "E014",
                    f"operand '{q.name}' of external '{fn.name}' names its dimension "
                    f"'{first.dims[0]}', which is both the rows and the columns of "
                    f"'{tensors[0].name}': per row or per column?",
                    next(x.annotation or x for x in a.args if x.arg == q.name),
                    "name the first operand's dimensions apart, e.g. tensor[(R, C), f32], and "
                    "the vector's like the rows (R) to read it per row, else per column",
                )
    header = _declaring_header(p, fn, cpp, includes)
    ref = header.with_suffix(".py") if header is not None else None
    ref_path = str(ref.resolve()) if ref is not None and ref.is_file() else None
    if ref_path is not None:
        _load_reference(p, fn, ref_path, str(ref))
    hname = next((n for n, h in includes if h == header), "")
    return S.External(
        fn.name,
        cpp,
        tuple(params),
        tuple(reads),
        tuple(writes),
        hname,
        ref_path,
        p.loc(fn),
        str(header.resolve()) if header is not None else None,
    )


def _declaring_header(
    p: ParserHost, fn: ast.FunctionDef, cpp: str, includes: list[tuple[str, Path | None]]
) -> Path | None:
    """The included header that mentions the C++ function's name (E014 if none does)."""
    if not includes:
        raise p.err(
            "E014",
            f"external '{fn.name}' is declared but the program includes no header",
            fn.decorator_list[0],
            f'add include("ops.cuh") naming the header that defines {cpp}, above the declaration',
        )
    base = _base_name(cpp)
    word = re.compile(rf"\b{re.escape(base)}\b")
    for name, path in includes:
        if path is None:  # parsed from a string: no folder to look in
            continue
        try:
            if word.search(path.read_text(errors="replace")):
                return path
        except OSError:
            continue
    if all(path is None for _, path in includes):
        return None
    raise p.err(
        "E014",
        f"no included header defines '{base}' (for external '{fn.name}')",
        fn.decorator_list[0].args[0],  # type: ignore[attr-defined]
        "included: " + ", ".join(n for n, _ in includes) + f"; define {cpp} in one of them",
    )


class _NoFunction(AttributeError):
    """The reference file loads but has no function of the external's name."""


def _load_reference(p: ParserHost, fn: ast.FunctionDef, path: str, shown: str) -> Callable:
    """Load the reference at ``path`` (``shown`` as the user wrote its folder) or raise E014."""
    try:
        return reference(path, fn.name)
    except Exception as e:  # the user's Python: any failure is theirs to see, located here
        why = str(e) if isinstance(e, _NoFunction) else f"{type(e).__name__}: {e}"
        raise p.err(
            "E014",
            f"the NumPy reference {shown} of external '{fn.name}' cannot be used: {why}",
            fn,
            f"define `def {fn.name}({', '.join(x.arg for x in fn.args.args)})` there, returning "
            "the written operands' new values",
        ) from None


_REFS: dict[tuple[str, float], object] = {}


def reference(path: str, name: str) -> Callable:
    """Function ``name`` of the Python file ``path`` (loaded once per file version);
    raises whatever loading it raises, ``AttributeError`` if it has no such function."""
    p = Path(path)
    key = (str(p.resolve()), p.stat().st_mtime)
    mod = _REFS.get(key)
    if mod is None:
        spec = importlib.util.spec_from_file_location(f"cypressc_ref_{abs(hash(key))}", p)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _REFS[key] = mod
    f = getattr(mod, name, None)
    if not callable(f):
        # not the module's AttributeError: its name is a cache key, meaningless to the user
        raise _NoFunction(
            f"it defines no function '{name}'" if f is None else f"its '{name}' is not a function"
        )
    return f


def parse_choice(p: ParserHost, st: ast.Assign) -> S.ChoiceParam:
    """``ACT = choice(f, g)`` -> :class:`~cypressc.lang.syntax.ChoiceParam` bound to
    ``p.bindings[ACT]`` or ``f`` (E015)."""
    call = st.value
    assert isinstance(call, ast.Call)
    usage = (
        "write `ACT = choice(bias_gelu, bias_silu)`: a name and the leaf functions it may stand for"
    )
    if len(st.targets) != 1 or not isinstance(st.targets[0], ast.Name):
        raise p.err("E015", "a choice parameter is one plain name", st, usage)
    name = st.targets[0].id
    if call.keywords or not call.args or not all(isinstance(x, ast.Name) for x in call.args):
        raise p.err("E015", "choice() takes the names of one or more leaf functions", call, usage)
    allowed = [x.id for x in call.args]  # type: ignore[attr-defined]
    if len(set(allowed)) != len(allowed):
        raise p.err("E015", "choice() lists a function twice", call, usage)
    if name in LEAF_FUNCTIONS or name in p.choices or name in p.dtype_params:
        raise p.err(
            "E015",
            f"'{name}' is already a leaf function or program parameter",
            st.targets[0],
            usage,
        )
    for x in call.args:
        p.choice_args[(name, x.id)] = p.loc(x)  # type: ignore[attr-defined]
    bound = p.bindings.get(name, allowed[0])
    if bound not in allowed:
        p.errors.append(
            p.err(
                "E015",
                f"--param {name}={bound}: '{name}' may only be " + " or ".join(allowed),
                st,
                "pick one of the functions its declaration lists",
            )
        )
        bound = allowed[0]
    return S.ChoiceParam(name, tuple(allowed), bound, p.loc(st))


def check_choices(p: ParserHost, choices: list[S.ChoiceParam], externals: list[S.External]) -> None:
    """Every function a choice lists exists (E015, at the function's name in the choice)."""
    known = set(LEAF_FUNCTIONS) | {e.name for e in externals}
    declared = ", ".join(e.name for e in externals) or "none"
    for c in choices:
        for f in c.allowed:
            if f not in known:
                p.errors.append(
                    CypressError(
                        "E015",
                        f"choice '{c.name}' lists '{f}', which is not a leaf function",
                        p.choice_args.get((c.name, f), c.loc),
                        hint=f"declare it with @external in this program (externals declared: {declared}), "
                        "or name a built-in leaf function",
                    )
                )


# ----------------------------------------------------------------------------- leaf table
def _semantics(ext: S.External) -> Callable[..., dict[int, np.ndarray]]:
    """The interpreter semantics of an external: its NumPy reference applied to the
    operands (vectors gathered by the first operand's column, or row, coordinates), or, without a
    reference, no writes at all."""
    tensor_idx = [i for i, q in enumerate(ext.params) if isinstance(q.type, S.TensorType)]
    written = [i for i in tensor_idx if ext.params[i].name in ext.writes]
    if ext.reference is None:
        return lambda *ops: {}
    fn = reference(ext.reference, ext.name)
    first = tensor_idx[0]

    def run(*ops) -> dict[int, np.ndarray]:
        x0: Operand = ops[first]
        args = []
        for i, o in enumerate(ops):
            if not isinstance(o, Operand):
                args.append(o)
                continue
            v = o.value.astype(np.float64)
            if ext.broadcast(ext.params[i].name):
                if v.shape != (1,):
                    raise ValueError(
                        f"{ext.name}(): '{ext.params[i].name}' is declared tensor[(1,), ...] (one "
                        f"element for every element of the call) but has {v.shape[0]} element(s)"
                    )
                v = np.broadcast_to(v[0], x0.value.shape)
            elif v.ndim == 1 and x0.value.ndim == 2:
                row = ext.per_row(ext.params[i].name)
                at = x0.coords[0 if row else -1]
                what = "row" if row else "column"
                if len(at) and int(at.max()) >= v.shape[0]:
                    raise ValueError(
                        f"{ext.name}(): the per-{what} vector '{ext.params[i].name}' has "
                        f"{v.shape[0]} element(s), the tile {int(at.max()) + 1}+ {what}s"
                    )
                v = np.broadcast_to(v[at][:, None] if row else v[at], x0.value.shape)
            args.append(v)
        out = fn(*args)
        outs = out if isinstance(out, tuple) else (out,)
        if len(outs) != len(written):
            raise ValueError(
                f"{ext.reference}: {ext.name}() returned {len(outs)} value(s) for "
                f"{len(written)} written operand(s)"
            )
        return {
            i: np.broadcast_to(np.asarray(o, dtype=np.float64), ops[i].value.shape).astype(
                ops[i].value.dtype
            )
            for i, o in zip(written, outs)
        }

    return run


def leaf_fn(ext: S.External) -> LeafFn:
    """The :class:`~cypressc.lang.intrinsics.LeafFn` of an external declaration (THREAD,
    elementwise; written operands in registers, read ones in registers, global or shared
    memory)."""
    rules = []
    for q in ext.params:
        if isinstance(q.type, S.TensorType):
            w = q.name in ext.writes
            rules.append(
                OperandRule(
                    q.name,
                    writes=w,
                    reads=q.name in ext.reads,
                    mems=(Mem.REGISTER,) if w else (Mem.REGISTER, Mem.GLOBAL, Mem.SHARED),
                    dtypes=(q.type.dtype,),
                    rank=q.type.rank,
                )
            )
        else:
            rules.append(OperandRule(q.name, kind=OperandKind.SCALAR))
    return LeafFn(
        ext.name,
        ext.cpp,
        tuple(rules),
        Proc.THREAD,
        _semantics(ext),
        doc=f"user C++ {ext.cpp} from {ext.header}, elementwise",
        external=ext,
    )


def leaf_functions(prog: S.Program) -> dict[str, LeafFn]:
    """The leaf functions ``prog`` may call: the intrinsics and its externals."""
    return {**LEAF_FUNCTIONS, **{e.name: leaf_fn(e) for e in prog.externals}}
