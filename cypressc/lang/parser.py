"""Parse ``.cyp`` source into the syntax tree (Cypress paper §3.2, Fig. 5a).

The source is parsed with the standard library :mod:`ast` and never executed.  Every
Python construct outside the subset documented in ``docs/language.md`` is rejected
with a located :class:`~cypressc.diagnostics.CypressError` (codes ``E000``–``E013``).

A program may be generic over element types: a top-level ``T = dtype(f16, bf16)``
declares ``T``, types write ``tensor[(M, K), T]``, and the caller binds it
(``parse_source(..., dtypes={"T": "bf16"})``; the first allowed dtype is the default).
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Mapping

from cypressc.diagnostics import CypressError, CypressErrors, Loc
from cypressc.lang import syntax as S
from cypressc.lang.externals import check_choices, find_header, parse_choice, parse_external
from cypressc.lang.intrinsics import LEAF_FUNCTIONS
from cypressc.lang.source import busiest_line, char_offset, decode_error_position, source_lines

__all__ = ["parse_file", "parse_source"]

_BINOPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
}
_UNARY_WORDS = {ast.Not: "'not'", ast.Invert: "'~'"}
# Index expressions are a few levels deep; the checker and every pass recurse once per
# level, so a machine-generated 1+1+...+1 must stop here, located, not deep inside a pass.
MAX_EXPR_DEPTH = 100
_SCALAR_FNS = ("cdiv", "min", "max")
_STMT_NAMES = {
    "If": "if statements",
    "While": "while loops",
    "Return": "return statements",
    "AugAssign": "augmented assignments (x += y)",
    "With": "with blocks",
    "AsyncWith": "with blocks",
    "AsyncFor": "async for loops",
    "Expr": "bare expressions",
    "Import": "imports inside a task",
    "ImportFrom": "imports inside a task",
    "FunctionDef": "nested functions",
    "AsyncFunctionDef": "nested functions",
    "ClassDef": "classes",
    "Try": "try blocks",
    "TryStar": "try blocks",
    "Raise": "raise statements",
    "Assert": "asserts",
    "Delete": "del statements",
    "Global": "global declarations",
    "Nonlocal": "nonlocal declarations",
    "Break": "break statements",
    "Continue": "continue statements",
    "Match": "match statements",
}


class _Parser:
    def __init__(
        self,
        path: str,
        source: str,
        dtypes: Mapping[str, str],
        include_dir: Path | None = None,
        include_path: tuple[Path, ...] = (),
    ) -> None:
        self.path = path
        self.lines = source_lines(source)
        self.errors: list[CypressError] = []
        self.bindings = dict(dtypes)
        self.dtype_params: dict[str, S.DtypeParam] = {}
        self.tensor_params: set[str] = set()  # of the variant being parsed
        self.include_dir = include_dir
        self.include_path = include_path  # -I folders, searched after the program's
        self.choices: dict[str, S.ChoiceParam] = {}
        self.choice_args: dict[
            tuple[str, str], Loc
        ] = {}  # (choice, function) -> where it is listed
        self.depth = 0  # of the expression being converted

    # -- locations ---------------------------------------------------------------------
    def loc(self, node: ast.AST) -> Loc:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        col = char_offset(text, getattr(node, "col_offset", 0)) + 1
        end_line = getattr(node, "end_lineno", line)
        end_col = (
            char_offset(text, getattr(node, "end_col_offset", 0) or 0) + 1
            if end_line == line
            else 0
        )
        return Loc(self.path, line, col, end_col, text)

    def err(self, code: str, msg: str, node: ast.AST, hint: str | None = None) -> CypressError:
        return CypressError(code, msg, self.loc(node), hint=hint)

    # -- module ------------------------------------------------------------------------
    def module(self, mod: ast.Module) -> S.Program:
        includes: list[tuple[str, Path | None]] = []
        variants: list[S.Variant] = []
        externals: list[S.External] = []
        for i, stmt in enumerate(mod.body):
            try:
                if (
                    isinstance(stmt, ast.Expr)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                    and i == 0
                ):
                    continue  # module docstring
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    continue  # `from cypress import *` keeps editors happy; it means nothing here
                if (
                    isinstance(stmt, ast.Expr)
                    and isinstance(stmt.value, ast.Call)
                    and isinstance(stmt.value.func, ast.Name)
                    and stmt.value.func.id == "include"
                ):
                    try:
                        includes.append(self.include(stmt.value))
                    except CypressError:
                        # recorded without a path, so the externals it declares do not cascade
                        if stmt.value.args and isinstance(stmt.value.args[0], ast.Constant):
                            includes.append((str(stmt.value.args[0].value), None))
                        raise
                    continue
                if (
                    isinstance(stmt, ast.FunctionDef)
                    and stmt.decorator_list
                    and isinstance(dec := stmt.decorator_list[0], ast.Call)
                    and isinstance(dec.func, ast.Name)
                    and dec.func.id == "external"
                ):
                    if any(e.name == stmt.name for e in externals):
                        raise self.err("E014", f"external '{stmt.name}' is declared twice", stmt)
                    externals.append(parse_external(self, stmt, includes))
                    continue
                if isinstance(stmt, ast.FunctionDef):
                    variants.append(self.variant(stmt))
                    continue
                if (
                    isinstance(stmt, ast.Assign)
                    and isinstance(stmt.value, ast.Call)
                    and isinstance(stmt.value.func, ast.Name)
                    and stmt.value.func.id == "choice"
                ):
                    c = parse_choice(self, stmt)
                    self.choices[c.name] = c
                    continue
                if (
                    isinstance(stmt, ast.Assign)
                    and isinstance(stmt.value, ast.Call)
                    and isinstance(stmt.value.func, ast.Name)
                    and stmt.value.func.id == "dtype"
                ):
                    self.dtype_param(stmt)
                    continue
                raise self.err(
                    "E002",
                    f"unsupported top-level statement ({type(stmt).__name__})",
                    stmt,
                    'a .cyp file holds @task-decorated defs, include("header.cuh") lines, '
                    "@external declarations and parameters `T = dtype(f16, bf16)`, `F = choice(f, g)`",
                )
            except CypressError as e:
                self.errors.append(e)
        check_choices(self, list(self.choices.values()), externals)
        for e in externals:
            if any(v.name == e.name for v in variants):
                self.errors.append(
                    CypressError(
                        "E014",
                        f"'{e.name}' names both an external and a task variant",
                        e.loc,
                        hint="rename one of them",
                    )
                )
        for name in self.bindings:
            if name not in self.dtype_params and name not in self.choices:
                declared = ", ".join(self.dtype_params) or "none"
                self.errors.append(
                    CypressError(
                        "E013",
                        f"--dtype binds '{name}', which this program does not declare (declared: {declared})",
                        Loc(self.path, 1, 1),
                        hint=self._unbound_dtype_hint(name),
                        notes=tuple(
                            (f"'{d.name}' is declared here", d.loc)
                            for d in self.dtype_params.values()
                        ),
                    )
                )
        return S.Program(
            self.path,
            tuple(n for n, _ in includes),
            tuple(variants),
            Loc(self.path, 1, 1),
            tuple(self.dtype_params.values()),
            tuple(externals),
            tuple(self.choices.values()),
        )

    def _unbound_dtype_hint(self, name: str) -> str:
        """Name the dtype parameters this program does declare, with a ``--dtype`` that works."""
        want = self.bindings[name]
        if not self.dtype_params:
            return (
                f"this program declares no dtype parameter: drop `--dtype {name}={want}`, or declare "
                f"one at top level, e.g. `{name} = dtype(f16, bf16)`"
            )
        params = list(self.dtype_params.values())
        listed = ", ".join(f"{d.name} ({' or '.join(d.allowed)})" for d in params)
        first = params[0]
        dt = want if want in first.allowed else first.allowed[-1]
        return f"this program's dtype parameters: {listed}; e.g. `--dtype {first.name}={dt}`"

    def dtype_param(self, st: ast.Assign) -> None:
        """``T = dtype(f16, bf16)``: declare T, bound to ``self.bindings[T]`` or the first."""
        call = st.value
        assert isinstance(call, ast.Call)
        usage = (
            "write `T = dtype(f16, bf16)`: a name and the dtypes it may stand for, default first"
        )
        if len(st.targets) != 1 or not isinstance(st.targets[0], ast.Name):
            raise self.err("E013", "a dtype parameter is one plain name", st, usage)
        name = st.targets[0].id
        if name in S.DTYPES or name in ("int", "float", "tensor"):
            raise self.err("E013", f"'{name}' is a built-in type name", st.targets[0], usage)
        try:
            self._dtype_param(name, st, call, usage)
        except CypressError:
            # the parse fails anyway; declaring the name keeps its uses from each
            # reporting an unknown dtype
            self.dtype_params.setdefault(name, S.DtypeParam(name, ("f16",), "f16", self.loc(st)))
            raise

    def _dtype_param(self, name: str, st: ast.Assign, call: ast.Call, usage: str) -> None:
        if call.keywords or not call.args:
            raise self.err("E013", "dtype() takes one or more dtype names", call, usage)
        allowed: list[str] = []
        for a in call.args:
            if not (isinstance(a, ast.Name) and a.id in S.DTYPES):
                raise self.err(
                    "E013",
                    f"unknown dtype '{ast.unparse(a)}'",
                    a,
                    "dtypes are " + ", ".join(S.DTYPES),
                )
            if a.id in allowed:
                raise self.err("E013", f"dtype '{a.id}' is listed twice", a, usage)
            allowed.append(a.id)
        if name in self.dtype_params:
            raise self.err(
                "E013",
                f"dtype parameter '{name}' is declared twice",
                st.targets[0],
                f"the first declaration is at line {self.dtype_params[name].loc.line}",
            )
        bound = self.bindings.get(name, allowed[0])
        if bound not in allowed:
            # reported, and the parameter still declared (with its default) so that its
            # uses do not each report an unknown dtype
            self.errors.append(
                self.err(
                    "E013",
                    f"--dtype {name}={bound}: '{name}' may only be " + " or ".join(allowed),
                    st,
                    "pick one of the dtypes listed in its declaration",
                )
            )
            bound = allowed[0]
        self.dtype_params[name] = S.DtypeParam(name, tuple(allowed), bound, self.loc(st))

    def include(self, call: ast.Call) -> tuple[str, Path | None]:
        """``include("ops.cuh")``: the header must exist, relative to the program's folder or
        a ``-I`` folder; returns its name and path (None when parsed from a string)."""
        if (
            len(call.args) != 1
            or call.keywords
            or not isinstance(call.args[0], ast.Constant)
            or not isinstance(call.args[0].value, str)
        ):
            raise self.err("E003", "include() takes one string: the header's file name", call)
        name = call.args[0].value
        if self.include_dir is None:
            return name, None
        dirs = [self.include_dir, *self.include_path]
        found = find_header(name, dirs)
        if found is None:
            raise self.err(
                "E003",
                f"include() names '{name}', which does not exist",
                call.args[0],
                "headers are found relative to the program's folder (then the -I folders); "
                "looked for " + ", ".join(str(d / name) for d in dirs),
            )
        return name, found

    # -- variants ----------------------------------------------------------------------
    def variant(self, fn: ast.FunctionDef) -> S.Variant:
        if len(fn.decorator_list) != 1:
            raise self.err(
                "E003",
                f"function '{fn.name}' needs exactly one @task(...) decorator",
                fn,
                'write @task("name", Inner|Leaf, reads=[...], writes=[...])',
            )
        task, kind, reads, writes = self.decorator(fn.decorator_list[0])
        a = fn.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs or a.kw_defaults:
            raise self.err("E004", "task parameters are plain positional names with types", fn)
        params: list[S.Param] = []
        seen: set[str] = set()
        for arg in a.args:
            if arg.arg in seen:
                raise self.err("E004", f"duplicate parameter '{arg.arg}'", arg)
            seen.add(arg.arg)
            if arg.annotation is None:
                raise self.err(
                    "E004",
                    f"parameter '{arg.arg}' has no type",
                    arg,
                    "annotate it: `X: tensor[2, f16]` or `n: int`",
                )
            params.append(S.Param(arg.arg, self.type_(arg.annotation), self.loc(arg)))
        self.tensor_params = {p.name for p in params if isinstance(p.type, S.TensorType)}
        body = self.block(fn.body, allow_docstring=True)
        return S.Variant(fn.name, task, kind, reads, writes, tuple(params), body, self.loc(fn))

    def decorator(self, dec: ast.expr) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
        usage = 'write @task("name", Inner|Leaf, reads=[...], writes=[...])'
        if not (
            isinstance(dec, ast.Call) and isinstance(dec.func, ast.Name) and dec.func.id == "task"
        ):
            raise self.err("E003", "the decorator must be @task(...)", dec, usage)
        if len(dec.args) != 2:
            raise self.err("E003", "@task takes a task name and Inner or Leaf", dec, usage)
        name, kind = dec.args
        if not (
            isinstance(name, ast.Constant)
            and isinstance(name.value, str)
            and name.value.isidentifier()
        ):
            raise self.err(
                "E003", "the task name must be a string that is an identifier", name, usage
            )
        if not (isinstance(kind, ast.Name) and kind.id in ("Inner", "Leaf")):
            raise self.err("E003", "the variant kind must be Inner or Leaf", kind, usage)
        privs: dict[str, tuple[str, ...]] = {"reads": (), "writes": ()}
        for kw in dec.keywords:
            if kw.arg not in privs:
                raise self.err("E003", f"unknown @task keyword '{kw.arg}'", kw, usage)
            if not isinstance(kw.value, (ast.List, ast.Tuple)) or not all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in kw.value.elts
            ):
                raise self.err(
                    "E003", f"{kw.arg}= takes a list of parameter names as strings", kw.value
                )
            privs[kw.arg] = tuple(e.value for e in kw.value.elts)
        return name.value, kind.id.lower(), privs["reads"], privs["writes"]

    def type_(self, ann: ast.expr) -> S.Type:
        if isinstance(ann, ast.Name) and ann.id in ("int", "float"):
            return S.ScalarType(ann.id)
        hint = (
            "tensor types are written tensor[rank, dtype] or tensor[(M, K), dtype], dtype one of "
            + ", ".join(S.DTYPES)
        )
        if not (
            isinstance(ann, ast.Subscript)
            and isinstance(ann.value, ast.Name)
            and ann.value.id == "tensor"
        ):
            raise self.err("E005", "unsupported type annotation", ann, hint)
        sl = ann.slice
        if not (isinstance(sl, ast.Tuple) and len(sl.elts) == 2):
            raise self.err("E005", "tensor[...] takes a rank and a dtype", ann, hint)
        rank, dt = sl.elts
        if isinstance(dt, ast.Name) and dt.id in self.dtype_params:
            dt = ast.copy_location(ast.Name(self.dtype_params[dt.id].bound), dt)
        if not (isinstance(dt, ast.Name) and dt.id in S.DTYPES):
            raise self.err(
                "E005",
                f"unknown dtype '{ast.unparse(dt)}'",
                dt,
                hint + "; a dtype parameter `T = dtype(...)` must be declared above its use",
            )
        if isinstance(rank, ast.Tuple):
            if not 1 <= len(rank.elts) <= 4 or not all(isinstance(e, ast.Name) for e in rank.elts):
                raise self.err(
                    "E005", "named dimensions are 1 to 4 size names, e.g. (M, K)", rank, hint
                )
            return S.TensorType(len(rank.elts), dt.id, tuple(e.id for e in rank.elts))  # type: ignore[attr-defined]
        if not (
            isinstance(rank, ast.Constant) and type(rank.value) is int and 1 <= rank.value <= 4
        ):
            raise self.err("E005", "the tensor rank must be an integer from 1 to 4", rank, hint)
        return S.TensorType(rank.value, dt.id)

    # -- statements --------------------------------------------------------------------
    def block(self, body: list[ast.stmt], allow_docstring: bool = False) -> tuple[S.Stmt, ...]:
        out: list[S.Stmt] = []
        for i, st in enumerate(body):
            if (
                allow_docstring
                and i == 0
                and isinstance(st, ast.Expr)
                and isinstance(st.value, ast.Constant)
                and isinstance(st.value.value, str)
            ):
                continue
            try:
                out.extend(self.stmt(st))
            except CypressError as e:
                self.errors.append(e)
        return tuple(out)

    def stmt(self, st: ast.stmt) -> list[S.Stmt]:
        loc = self.loc(st)
        if isinstance(st, ast.Pass):
            return []
        if isinstance(st, ast.Assign):
            if len(st.targets) != 1:
                raise self.err("E006", "chained assignment is not supported", st)
            return self.assign(st.targets[0], st.value, st)
        if isinstance(st, ast.AnnAssign):
            return [self.make_tensor(st)]
        if isinstance(st, ast.For):
            return [self.loop(st)]
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            call = st.value
            if not isinstance(call.func, ast.Name):
                raise self.err("E007", "only plain function names can be called", call.func)
            if call.keywords:
                raise self.err(
                    "E007", "keyword arguments are not supported here", call.keywords[0].value
                )
            if call.func.id == "launch":
                if not call.args or not (
                    isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)
                ):
                    raise self.err(
                        "E007",
                        "launch() takes the task name as a string first",
                        call,
                        'write launch("task", arg0, arg1, ...)',
                    )
                return [
                    S.Launch(call.args[0].value, tuple(self.expr(a) for a in call.args[1:]), loc)
                ]
            fn = self.choices[call.func.id].bound if call.func.id in self.choices else call.func.id
            return [S.LeafCall(fn, tuple(self.expr(a) for a in call.args), loc)]
        what = _STMT_NAMES.get(type(st).__name__, f"{type(st).__name__} statements")
        hint = (
            "task bodies hold tunables, index arithmetic, partitions, make_tensor, "
            "launch(), prange/srange loops and (in leaves) leaf-function calls"
        )
        if isinstance(st, ast.AugAssign):
            hint = self._augassign_hint(st)
        raise self.err("E002", f"{what} are not part of the Cypress language", st, hint)

    def _augassign_hint(self, st: ast.AugAssign) -> str:
        """What works instead of ``x op= y``: a tensor changes only through a leaf function
        (``add`` is the one for +=); a scalar name is bound once (E026), so the new value
        needs a new name."""
        t, rhs = ast.unparse(st.target), ast.unparse(st.value)
        op = _BINOPS.get(type(st.op))
        if not isinstance(st.target, ast.Name) or st.target.id in self.tensor_params:
            tensor_rhs = (
                isinstance(st.value, ast.Subscript)
                or isinstance(st.value, ast.Name)
                and st.value.id in self.tensor_params
            )
            if isinstance(st.op, ast.Add) and tensor_rhs:
                return (
                    f"tensors change only through leaf functions: in a Leaf variant, "
                    f"`add({t}, {rhs})` adds {rhs} to {t}"
                )
            return (
                "tensors change only through the leaf functions of docs/language.md §5 ("
                + ", ".join(LEAF_FUNCTIONS)
                + ")"
            )
        if op is None:
            return f"index arithmetic uses + - * / // %; bind the result to a new name, e.g. `{t}2 = ...`"
        return (
            f"a name is bound once (`{t} = {t} {op} {rhs}` is E026), so give the new value a new "
            f"name: `{t}2 = {t} {op} {rhs}`"
        )

    def assign(self, target: ast.expr, value: ast.expr, st: ast.stmt) -> list[S.Stmt]:
        if isinstance(target, ast.Tuple):
            if not isinstance(value, ast.Tuple) or len(value.elts) != len(target.elts):
                raise self.err(
                    "E006", "tuple assignment needs a tuple of the same length on the right", st
                )
            out: list[S.Stmt] = []
            for t, v in zip(target.elts, value.elts):
                out += self.assign(t, v, v)
            return out
        if not isinstance(target, ast.Name):
            raise self.err("E006", "only plain names can be assigned", target)
        name, loc = target.id, self.loc(st if not isinstance(st, ast.expr) else value)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            fn = value.func.id
            if fn == "tunable":
                if (
                    len(value.args) != 1
                    or not isinstance(value.args[0], ast.Name)
                    or value.args[0].id not in S.TUNABLE_KINDS
                ):
                    raise self.err("E008", "tunable() takes int, processor or atom", value)
                return [S.Tunable(name, value.args[0].id, loc)]
            if fn.startswith("partition_by_"):
                return [self.partition(name, value, loc)]
            if fn == "make_tensor":
                raise self.err(
                    "E009",
                    "make_tensor needs a type annotation",
                    value,
                    f"write `{name}: tensor[2, f32] = make_tensor(M, N)`",
                )
        return [S.Let(name, self.expr(value), loc)]

    def partition(self, name: str, call: ast.Call, loc: Loc) -> S.PartitionDecl:
        fn = call.func.id  # type: ignore[union-attr]
        kind = fn[len("partition_by_") :]
        if call.keywords:
            raise self.err("E010", "partition operators take positional arguments", call)
        if not call.args or not isinstance(call.args[0], ast.Name):
            raise self.err("E010", f"{fn} takes a tensor name first", call)
        tensor = call.args[0].id
        rest = call.args[1:]
        if kind == "blocks":
            if len(rest) != 1 or not isinstance(rest[0], ast.Tuple):
                raise self.err(
                    "E010",
                    "partition_by_blocks(T, (b0, b1, ...)) takes a tuple of block sizes",
                    call,
                )
            args = tuple(self.expr(e) for e in rest[0].elts)
        elif kind == "mma":
            if len(rest) != 3:
                raise self.err(
                    "E010",
                    'partition_by_mma(T, ATOM, PROC, "A"|"B"|"Bt"|"C") takes 4 arguments',
                    call,
                )
            args = (self.expr(rest[0]), self.expr(rest[1]), self.expr(rest[2]))
            op = args[2]
            if not (isinstance(op, S.Str) and op.value in ("A", "B", "Bt", "C")):
                raise self.err(
                    "E010", 'the operand of partition_by_mma must be "A", "B", "Bt" or "C"', rest[2]
                )
        elif kind == "slices":
            if len(rest) != 1 or not (
                isinstance(rest[0], ast.Constant) and type(rest[0].value) is int
            ):
                raise self.err(
                    "E010", "partition_by_slices(T, dim) takes an integer dimension", call
                )
            args = (S.Const(rest[0].value, self.loc(rest[0])),)
        else:
            raise self.err(
                "E010",
                f"unknown partition operator '{fn}'",
                call.func,
                "use partition_by_blocks, partition_by_mma or partition_by_slices",
            )
        return S.PartitionDecl(name, tensor, kind, args, loc)

    def make_tensor(self, st: ast.AnnAssign) -> S.MakeTensor:
        if not isinstance(st.target, ast.Name) or st.value is None:
            raise self.err(
                "E009", "annotated assignment is only for `T: tensor[r, dt] = make_tensor(...)`", st
            )
        ty = self.type_(st.annotation)
        v = st.value
        if not (
            isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "make_tensor"
        ):
            raise self.err(
                "E009", "an annotated local must be initialised with make_tensor(d0, d1, ...)", v
            )
        if not isinstance(ty, S.TensorType):
            raise self.err(
                "E009",
                "make_tensor creates tensors; annotate with tensor[rank, dtype]",
                st.annotation,
            )
        return S.MakeTensor(st.target.id, ty, tuple(self.expr(a) for a in v.args), self.loc(st))

    def loop(self, st: ast.For) -> S.Loop:
        if st.orelse:
            raise self.err("E011", "for/else is not supported", st)
        it = st.iter
        if not (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id in ("prange", "srange")
        ):
            raise self.err(
                "E011",
                "loops iterate over prange(...) or srange(...)",
                it,
                "prange for parallel groups of tasks, srange for sequential ones",
            )
        kind = it.func.id
        if it.keywords or not it.args:
            raise self.err("E011", f"{kind}() takes one or more extents", it)
        tgt = st.target
        elts = tgt.elts if isinstance(tgt, ast.Tuple) else [tgt]
        if not all(isinstance(e, ast.Name) for e in elts):
            raise self.err("E011", "loop variables must be plain names", tgt)
        vars_ = tuple(e.id for e in elts)  # type: ignore[attr-defined]
        if len(vars_) != len(it.args):
            raise self.err(
                "E011", f"{len(vars_)} loop variable(s) but {len(it.args)} extent(s)", st
            )
        if kind == "srange" and len(vars_) != 1:
            raise self.err("E011", "srange() is one-dimensional", it)
        body = self.block(st.body)
        return S.Loop(kind, vars_, tuple(self.expr(a) for a in it.args), body, self.loc(st))

    # -- expressions -------------------------------------------------------------------
    def expr(self, e: ast.expr) -> S.Expr:
        self.depth += 1
        try:
            if self.depth > MAX_EXPR_DEPTH:
                raise self.err(
                    "E001",
                    f"the expression nests more than {MAX_EXPR_DEPTH} levels deep",
                    e,
                    "split it into named steps: `a = ...` then `b = a + ...`",
                )
            return self._expr(e)
        finally:
            self.depth -= 1

    def _expr(self, e: ast.expr) -> S.Expr:
        loc = self.loc(e)
        if isinstance(e, ast.Name):
            return S.Name(e.id, loc)
        if isinstance(e, ast.Constant):
            if isinstance(e.value, bool) or not isinstance(e.value, (int, float, str)):
                raise self.err("E012", f"unsupported constant {e.value!r}", e)
            if isinstance(e.value, str):
                return S.Str(e.value, loc)
            return S.Const(e.value, loc)
        if (
            isinstance(e, ast.UnaryOp)
            and isinstance(e.op, ast.USub)
            and isinstance(e.operand, ast.Constant)
            and isinstance(e.operand.value, (int, float))
            and not isinstance(e.operand.value, bool)
        ):
            return S.Const(-e.operand.value, loc)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            # -x is 0 - x: the syntax tree and the IR need no negation node of their own
            return S.BinOp("-", S.Const(0, loc), self.expr(e.operand), loc)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.UAdd):
            return self.expr(e.operand)
        if isinstance(e, ast.UnaryOp):
            raise self.err(
                "E012",
                f"the operator {_UNARY_WORDS.get(type(e.op), 'of this expression')} "
                "is not supported in index expressions",
                e,
                "index arithmetic uses + - * / // %",
            )
        if isinstance(e, ast.BinOp):
            op = _BINOPS.get(type(e.op))
            if op is None:
                raise self.err(
                    "E012", "unsupported operator", e, "index arithmetic uses + - * / // %"
                )
            return S.BinOp(op, self.expr(e.left), self.expr(e.right), loc)
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name):
            if e.keywords:
                raise self.err("E012", "keyword arguments are not supported", e)
            if not e.args and e.func.id not in _SCALAR_FNS:
                return S.Atom(e.func.id, loc)
            if e.func.id in _SCALAR_FNS:
                return S.Call(e.func.id, tuple(self.expr(a) for a in e.args), loc)
            raise self.err(
                "E012",
                f"'{e.func.id}(...)' cannot be used as a value",
                e,
                "values are scalars, tensors, partition pieces P[i, j] and atoms ATOM()",
            )
        if isinstance(e, ast.Subscript):
            v = e.value
            idx = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
            if isinstance(v, ast.Attribute) and v.attr == "shape" and isinstance(v.value, ast.Name):
                if len(idx) != 1 or not (
                    isinstance(idx[0], ast.Constant) and type(idx[0].value) is int
                ):
                    raise self.err("E012", "T.shape[d] takes a constant dimension", e)
                return S.Shape(v.value.id, idx[0].value, loc)
            if isinstance(v, ast.Name):
                if any(isinstance(i, ast.Slice) for i in idx):
                    raise self.err(
                        "E012", "slices are not supported; partition the tensor instead", e
                    )
                return S.Piece(v.id, tuple(self.expr(i) for i in idx), loc)
            raise self.err("E012", "only partitions can be indexed", e)
        raise self.err("E012", f"unsupported expression ({type(e).__name__})", e)


def parse_source(
    source: str,
    path: str = "<string>",
    dtypes: Mapping[str, str] | None = None,
    include_dir: str | Path | None = None,
    include_path: tuple[str | Path, ...] = (),
) -> S.Program:
    """Parse ``.cyp`` text into a :class:`~cypressc.lang.syntax.Program`.

    ``dtypes`` binds the program's parameters (``{"T": "bf16", "ACT": "bias_silu"}``:
    dtype and choice parameters); unbound ones take their first allowed value.  With
    ``include_dir`` (the program's folder), each ``include("h.cuh")`` must name an existing
    file relative to it or to a folder of ``include_path`` (E003).  A leading
    UTF-8 byte-order mark is ignored, as Python does.  Raises :class:`CypressErrors` with
    every syntax-level error found (E001 for Python syntax errors and expressions nested
    more than :data:`MAX_EXPR_DEPTH` deep, E002–E012 for constructs outside the subset,
    E013 for dtype parameters and bindings, E014 for ``@external`` declarations, E015 for
    choice parameters).
    """
    source = source.removeprefix("\ufeff")
    if "\x00" in source:
        raise CypressErrors(
            [CypressError("E001", "the file is binary, not .cyp source", Loc(path, 1, 1))]
        )
    if not source.strip():
        raise CypressErrors(
            [
                CypressError(
                    "E001",
                    "the program is empty",
                    Loc(path, 1, 1),
                    hint="a .cyp file holds @task-decorated defs",
                )
            ]
        )
    try:
        with warnings.catch_warnings():
            # e.g. "invalid escape sequence" in a docstring: Python's business, not a .cyp error
            warnings.simplefilter("ignore")
            mod = ast.parse(source, filename=path)
    except SyntaxError as e:
        lines = source_lines(source)
        line = e.lineno or 1
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        raise CypressErrors(
            [
                CypressError(
                    "E001", f"syntax error: {e.msg}", Loc(path, line, e.offset or 1, 0, text)
                )
            ]
        ) from None
    except (RecursionError, MemoryError):
        line = busiest_line(source)
        lines = source_lines(source)
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        raise CypressErrors(
            [
                CypressError(
                    "E001",
                    "an expression on this line nests too deeply for Python's parser",
                    Loc(path, line, len(text) - len(text.lstrip()) + 1, 0, text),
                    hint=f"expressions nest at most {MAX_EXPR_DEPTH} levels; split it into named steps",
                )
            ]
        ) from None
    except ValueError as e:
        raise CypressErrors([CypressError("E001", f"cannot parse: {e}", Loc(path, 1, 1))]) from None
    p = _Parser(
        path,
        source,
        dtypes or {},
        Path(include_dir) if include_dir is not None else None,
        tuple(Path(d) for d in include_path),
    )
    try:
        prog = p.module(mod)
    except RecursionError:
        # statements nest at most 100 blocks (Python's limit) and expressions MAX_EXPR_DEPTH
        # levels, so this is a last resort
        raise CypressErrors(
            [CypressError("E001", "the program nests too deeply", Loc(path, 1, 1))]
        ) from None
    if p.errors:
        raise CypressErrors(p.errors)
    if not prog.variants:
        raise CypressErrors(
            [CypressError("E001", "the program defines no @task variants", Loc(path, 1, 1))]
        )
    return prog


def parse_file(
    path: str | Path,
    dtypes: Mapping[str, str] | None = None,
    include_path: tuple[str | Path, ...] = (),
) -> S.Program:
    """Read and parse a ``.cyp`` file (``dtypes`` as in :func:`parse_source`; headers it
    includes are looked up in its folder); unreadable files are E000 and non-UTF-8 files
    E001 errors."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise CypressErrors(
            [CypressError("E000", f"no such file: {path}", Loc(str(path)))]
        ) from None
    except OSError as e:
        raise CypressErrors(
            [CypressError("E000", f"cannot read {path}: {e.strerror}", Loc(str(path)))]
        ) from None
    if b"\x00" in data:
        raise CypressErrors(
            [CypressError("E001", "the file is binary, not .cyp source", Loc(str(path), 1, 1))]
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        # point at the first byte that is not UTF-8
        line, col = decode_error_position(data, e.start)
        raise CypressErrors(
            [
                CypressError(
                    "E001",
                    "the file is not UTF-8 text",
                    Loc(str(path), line, col, col + 1),
                    hint="save the program as UTF-8",
                )
            ]
        ) from None
    return parse_source(text, str(path), dtypes, include_dir=p.parent, include_path=include_path)
