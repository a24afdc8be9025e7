"""Parse the statements of a task body into the syntax tree (Cypress paper §3.2, Fig. 5a):
tunables, index lets, partitions, ``make_tensor``, ``launch()``, leaf calls and
``prange``/``srange`` loops; every other Python statement is a located E002 with a hint of
what to write instead.

:class:`StmtParser` is a part of :class:`cypressc.lang.parser._Parser` (it calls its
``loc``, ``err`` and ``expr`` and reads its ``choices``, ``outer_choices`` and ``tensor_params``).
"""

from __future__ import annotations

import ast

from cypressc.diagnostics import CypressError, Loc
from cypressc.lang import syntax as S
from cypressc.lang.intrinsics import LEAF_FUNCTIONS
from cypressc.lang.kinds import PartKind
from cypressc.lang.parse_exprs import BINOPS

__all__ = ["StmtParser"]


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


class StmtParser:
    """Statements (a part of :class:`cypressc.lang.parser._Parser`)."""

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
            name = call.func.id
            fn = (
                self.choices[name].bound
                if name in self.choices
                else self.outer_choices.get(name, name)
            )
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
        op = BINOPS.get(type(st.op))
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
        if kind == PartKind.BLOCKS:
            if len(rest) != 1 or not isinstance(rest[0], ast.Tuple):
                raise self.err(
                    "E010",
                    "partition_by_blocks(T, (b0, b1, ...)) takes a tuple of block sizes",
                    call,
                )
            args = tuple(self.expr(e) for e in rest[0].elts)
        elif kind == PartKind.MMA:
            if len(rest) != 3:
                raise self.err(
                    "E010",
                    'partition_by_mma(T, ATOM, PROC, "A"|"At"|"B"|"Bt"|"C") takes 4 arguments',
                    call,
                )
            args = (self.expr(rest[0]), self.expr(rest[1]), self.expr(rest[2]))
            op = args[2]
            if not (isinstance(op, S.Str) and op.value in ("A", "At", "B", "Bt", "C")):
                raise self.err(
                    "E010",
                    'the operand of partition_by_mma must be "A", "At", "B", "Bt" or "C"',
                    rest[2],
                )
        elif kind == PartKind.SLICES:
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
        return S.PartitionDecl(name, tensor, PartKind(kind), args, loc)

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
