"""What the static checks know of names (Cypress paper §3.2; DESIGN §1): a task's
:class:`Signature` (one entry per parameter, shared by every variant of the task), and
inside one variant what each name means (:class:`Binding`: a tensor, a partition and its
piece type, a scalar, a tunable of a kind, a loop variable), starting from its parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from cypressc.diagnostics import Loc
from cypressc.lang import syntax as S
from cypressc.lang.kinds import PartKind

__all__ = ["Signature", "signature", "Binding", "VariantEnv"]


@dataclass(frozen=True, slots=True)
class Signature:
    """A task's signature: one entry per parameter, ``int`` or ``tensor[r, dt]``."""

    params: tuple[str, ...]

    def __str__(self) -> str:
        return "(" + ", ".join(self.params) + ")"


def signature(v: S.Variant) -> Signature:
    return Signature(tuple(str(p.type) for p in v.params))


@dataclass(frozen=True, slots=True)
class Binding:
    """What a name means inside one variant."""

    kind: str  # tensor | partition | scalar | float | tunable_int | tunable_processor | tunable_atom | loopvar
    type: S.TensorType | None = None  # tensors; for partitions the *piece* type
    tensor: str | None = None  # partitions: the partitioned tensor
    pkind: PartKind | None = None  # partitions
    operand: str | None = None  # mma partitions: A | B | C
    index_rank: int = 0  # partitions: number of indices P[...] takes
    local: bool = False  # tensors made with make_tensor
    loc: Loc | None = None


VariantEnv = dict[str, Binding]


def _const_value(e: S.Expr) -> int | None:
    return e.value if isinstance(e, S.Const) and isinstance(e.value, int) else None


def _param_binding(p: S.Param) -> Binding:
    if isinstance(p.type, S.TensorType):
        return Binding("tensor", p.type, loc=p.loc)
    return Binding("float" if p.type.kind == "float" else "scalar", loc=p.loc)
