"""Size expressions of the kernel info (``requires`` and ``flops``): the JSON trees the
compiler wrote, evaluated with the semantics of the launcher's C."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

__all__ = ["eval_expr", "expr_names"]


_ARITH = ("+", "-", "*", "/", "%", "cdiv", "min", "max")
_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge}


def _node(tree: Any) -> tuple:
    """One node of an expression tree, checked: ``("const", v)``, ``("var", name)`` or
    ``(op, a, b)``."""
    if isinstance(tree, Mapping):
        keys = set(tree)
        v = tree.get("const")
        if keys == {"const"} and isinstance(v, (int, float)) and not isinstance(v, bool):
            return "const", v
        if keys == {"var"} and isinstance(tree["var"], str):
            return "var", tree["var"]
        if keys == {"op", "a", "b"}:
            if tree["op"] in _ARITH or tree["op"] in _COMPARE:
                return tree["op"], tree["a"], tree["b"]
            raise ValueError(f"unknown operator {tree['op']!r} in an expression tree (known: "
                             f"{' '.join([*_ARITH, *_COMPARE])})")
    raise ValueError(f"malformed expression tree node {tree!r}: expected {{\"const\": number}}, "
                     "{\"var\": name} or {\"op\": ..., \"a\": tree, \"b\": tree}")


def _div(a: int | float, b: int | float) -> int | float:
    """C's ``/``: two integers truncate toward zero; a double operand divides exactly."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("integer division by zero in a size expression")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def eval_expr(tree: Mapping[str, Any], env: Mapping[str, int | float]) -> int | float:
    """Evaluate an expression tree of the kernel info (``{"const": 8}``, ``{"var": "N"}``,
    ``{"op": "%", "a": tree, "b": tree}``) over the sizes ``env`` with the semantics of the
    launcher's C on ``int64_t`` and ``double``: integer ``/`` truncates toward zero and ``%``
    takes the dividend's sign (``-7 / 2 == -3``, ``-7 % 2 == -1``), ``cdiv(a, b)`` is
    ``(a + b - 1) / b``, a comparison gives 0 or 1, a double operand makes an operation
    floating.  Python ints do not overflow where ``int64_t`` would.  Raises ``ValueError``
    for a malformed node, an unknown operator, a name not in ``env`` or ``%`` on a double,
    ``ZeroDivisionError`` for an integer division by zero."""
    kind, *args = _node(tree)
    if kind == "const":
        return args[0]
    if kind == "var":
        if args[0] not in env:
            raise ValueError(f"expression uses {args[0]!r}, which is not a size (sizes: "
                             f"{', '.join(env) or 'none'})")
        return env[args[0]]
    a, b = eval_expr(args[0], env), eval_expr(args[1], env)
    if kind in _COMPARE:
        return int(_COMPARE[kind](a, b))
    if kind == "/":
        return _div(a, b)
    if kind == "%":
        if not (isinstance(a, int) and isinstance(b, int)):
            raise ValueError("'%' on a double in a size expression")
        return a - b * _div(a, b)
    if kind == "cdiv":
        return _div(a + b - 1, b)
    if kind in ("min", "max"):  # C's common type: a double operand makes the result a double
        r = min(a, b) if kind == "min" else max(a, b)
        return float(r) if isinstance(a, float) or isinstance(b, float) else r
    return a + b if kind == "+" else a - b if kind == "-" else a * b


def expr_names(tree: Mapping[str, Any]) -> list[str]:
    """The sizes an expression tree reads, in order; raises ``ValueError`` if it is not a
    tree :func:`eval_expr` can evaluate."""
    kind, *args = _node(tree)
    if kind == "const":
        return []
    if kind == "var":
        return [args[0]]
    return expr_names(args[0]) + expr_names(args[1])
