"""Parse the top level of a ``.cyp`` file into the syntax tree (Cypress paper §3.2,
Fig. 5a): task variants with their ``@task`` decorator and parameter types, ``include()``
lines, dtype parameters ``T = dtype(f16, bf16)`` and their ``--dtype`` bindings, the
hand-off of ``@external`` declarations and ``choice()`` parameters to
:mod:`cypressc.lang.externals`, and of ``from MODULE import TASK`` to
:mod:`cypressc.lang.imports`.

:class:`DeclParser` is a part of :class:`cypressc.lang.parser._Parser` (it calls its
``loc``, ``err`` and ``block`` and fills its ``errors``, ``dtype_params``, ``choices`` and
``tensor_params``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from cypressc.diagnostics import CypressError, CypressErrors, Loc
from cypressc.lang import syntax as S
from cypressc.lang.externals import check_choices, find_header, parse_choice, parse_external
from cypressc.lang.imports import import_variants, is_task_import

__all__ = ["DeclParser"]


class DeclParser:
    """Declarations (a part of :class:`cypressc.lang.parser._Parser`)."""

    # -- module ------------------------------------------------------------------------
    def module(self, mod: ast.Module) -> S.Program:
        includes: list[tuple[str, Path | None]] = []
        variants: list[S.Variant] = []
        externals: list[S.External] = []
        # `from MODULE import TASK`, with where its variants go: resolved after the loop,
        # once the dtype parameters (which the module shares) are all declared
        imports: list[tuple[int, ast.ImportFrom]] = []
        for i, stmt in enumerate(mod.body):
            try:
                if (
                    isinstance(stmt, ast.Expr)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                    and i == 0
                ):
                    continue  # module docstring
                if is_task_import(stmt):
                    assert isinstance(stmt, ast.ImportFrom)
                    imports.append((len(variants), stmt))
                    continue
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
        # in source order, so that a module imported twice brings its externals once; the
        # variants go in from the last, so the earlier insertion points stay valid
        brought: list[tuple[int, list[S.Variant]]] = []
        for at, stmt in imports:
            try:
                got, exts = import_variants(self, stmt, externals)
                brought.append((at, got))
                externals.extend(exts)
            except CypressErrors as es:
                self.errors.extend(es.errors)
            except CypressError as e:
                self.errors.append(e)
        for at, got in reversed(brought):
            variants[at:at] = got
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
        for name in () if self.imported else self.bindings:
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
        if bound not in allowed and self.imported:
            bound = allowed[0]  # the importing statement reports the conflict
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
        task, kind, reads, writes, reduces = self.decorator(fn.decorator_list[0])
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
        return S.Variant(
            fn.name, task, kind, reads, writes, tuple(params), body, self.loc(fn), reduces
        )

    def decorator(
        self, dec: ast.expr
    ) -> tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
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
        privs: dict[str, tuple[str, ...]] = {"reads": (), "writes": (), "reduces": ()}
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
        return name.value, kind.id.lower(), privs["reads"], privs["writes"], privs["reduces"]

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
