"""Size expressions of the kernel info (``requires`` and ``flops``): the JSON trees the
compiler wrote, evaluated with the semantics of the launcher's C."""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

from .errors import brief

__all__ = ["eval_expr", "expr_names", "MAX_DEPTH"]


_ARITH = ("+", "-", "*", "/", "%", "cdiv", "min", "max")
_COMPARE = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_INT64 = (-(1 << 63), (1 << 63) - 1)
MAX_DEPTH = 200
"""The deepest expression tree :func:`expr_names` and :func:`eval_expr` take (the compiler's
are about ten deep); a deeper one is refused rather than left to exhaust Python's stack."""


def _node(tree: Any) -> tuple:
    """One node of an expression tree, checked: ``("const", v)``, ``("var", name)`` or
    ``(op, a, b)``.  A constant is an ``int64_t`` or a finite double, as C text can hold."""
    if isinstance(tree, Mapping):
        keys = set(tree)
        v = tree.get("const")
        if keys == {"const"} and isinstance(v, (int, float)) and not isinstance(v, bool):
            if isinstance(v, int) and not _INT64[0] <= v <= _INT64[1]:
                raise ValueError(f"constant {brief(v)} in an expression tree is outside int64_t")
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"constant {v} in an expression tree is not a finite number")
            return "const", v
        if keys == {"var"} and isinstance(tree["var"], str):
            return "var", tree["var"]
        if keys == {"op", "a", "b"}:
            op = tree["op"]
            if isinstance(op, str) and (op in _ARITH or op in _COMPARE):
                return op, tree["a"], tree["b"]
            raise ValueError(
                f"unknown operator {brief(op)} in an expression tree (known: "
                f"{' '.join([*_ARITH, *_COMPARE])})"
            )
    raise ValueError(
        f'malformed expression tree node {brief(tree)}: expected {{"const": number}}, '
        '{"var": name} or {"op": ..., "a": tree, "b": tree}'
    )


def _div(a: int | float, b: int | float) -> int | float:
    """C's ``/``: two integers truncate toward zero; a double operand divides exactly."""
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ZeroDivisionError("integer division by zero in a size expression")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    if b == 0:  # IEEE 754, as the launcher's double arithmetic: no trap
        return (
            math.nan
            if a == 0 or math.isnan(a)
            else math.copysign(math.inf, a) * math.copysign(1.0, b)
        )
    return a / b


def eval_expr(tree: Mapping[str, Any], env: Mapping[str, int | float]) -> int | float:
    """Evaluate an expression tree of the kernel info (``{"const": 8}``, ``{"var": "N"}``,
    ``{"op": "%", "a": tree, "b": tree}``) over the sizes ``env`` with the semantics of the
    launcher's C on ``int64_t`` and ``double``: integer ``/`` truncates toward zero and ``%``
    takes the dividend's sign (``-7 / 2 == -3``, ``-7 % 2 == -1``), ``cdiv(a, b)`` is
    ``(a + b - 1) / b``, a comparison gives 0 or 1, a double operand makes an operation
    floating (a double division by zero gives an infinity or NaN).  Python ints do not
    overflow where ``int64_t`` would.  Raises ``ValueError`` for a malformed node, an unknown
    operator, a tree deeper than :data:`MAX_DEPTH`, a name not in ``env`` or whose value is
    not a number, or ``%`` on a double; ``ZeroDivisionError`` for an integer division by
    zero; ``OverflowError`` where an integer too large for a double meets a double."""
    return _eval(tree, env, 0)


def _eval(tree: Any, env: Mapping[str, int | float], depth: int) -> int | float:
    if depth >= MAX_DEPTH:
        raise ValueError(f"expression tree nested deeper than {MAX_DEPTH}")
    kind, *args = _node(tree)
    if kind == "const":
        return args[0]
    if kind == "var":
        if args[0] not in env:
            raise ValueError(
                f"expression uses {brief(args[0])}, which is not a size (sizes: "
                f"{', '.join(map(str, env)) or 'none'})"
            )
        v = env[args[0]]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"size {args[0]} must be a number, got {type(v).__name__} {brief(v)}")
        return v
    a, b = _eval(args[0], env, depth + 1), _eval(args[1], env, depth + 1)
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
    """The sizes an expression tree reads, in order.  Checks the whole tree first: raises
    ``ValueError`` if it is not one :func:`eval_expr` can evaluate (a malformed node, an
    unknown operator, a constant that is not an ``int64_t`` or a finite double, nesting deeper
    than :data:`MAX_DEPTH`, a ``/``, ``%`` or ``cdiv`` by the integer constant 0, ``%`` on a
    double)."""
    names: list[str] = []
    stack: list[tuple[Any, int]] = [
        (tree, 0)
    ]  # iterative: a deep tree is refused, not a stack overflow
    while stack:
        node, depth = stack.pop()
        if depth >= MAX_DEPTH:
            raise ValueError(f"expression tree nested deeper than {MAX_DEPTH}")
        kind, *args = _node(node)
        if kind == "var":
            names.append(args[0])
        elif kind != "const":
            if (
                kind in ("/", "%", "cdiv")
                and isinstance(args[1], Mapping)
                and set(args[1]) == {"const"}
                and args[1]["const"] == 0
                and isinstance(args[1]["const"], int)
            ):
                raise ValueError(f"'{kind}' by the constant 0 in an expression tree")
            stack += [(args[1], depth + 1), (args[0], depth + 1)]
    _is_double(tree)
    return names


def _is_double(tree: Mapping[str, Any]) -> bool:
    """Whether a checked tree is a double in C (sizes are ``int64_t``); raises ``ValueError``
    for ``%`` on a double, which C refuses to compile."""
    kind, *args = _node(tree)
    if kind == "const":
        return isinstance(args[0], float)
    if kind == "var":
        return False
    a, b = _is_double(args[0]), _is_double(args[1])
    if kind == "%" and (a or b):
        raise ValueError("'%' on a double in an expression tree")
    return kind not in _COMPARE and (a or b)
