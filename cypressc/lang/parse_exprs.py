"""Parse ``.cyp`` index and argument expressions into the syntax tree (Cypress paper §3.2,
Fig. 5a): names, constants, index arithmetic, ``cdiv``/``min``/``max``, atoms ``ATOM()``,
partition pieces ``P[i, j]`` and ``T.shape[d]``; anything else is a located E012, and an
expression nested more than :data:`MAX_EXPR_DEPTH` levels an E001.

:class:`ExprParser` is a part of :class:`cypressc.lang.parser._Parser` (it calls its
``loc`` and ``err``).
"""

from __future__ import annotations

import ast

from cypressc.lang import syntax as S

__all__ = ["BINOPS", "MAX_EXPR_DEPTH", "ExprParser"]


BINOPS = {
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


class ExprParser:
    """Expressions (a part of :class:`cypressc.lang.parser._Parser`)."""

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
            op = BINOPS.get(type(e.op))
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
