"""Tags the language, the mapping and the IR share: processor levels, memories, partition
kinds and leaf operand kinds (Cypress paper §3.1 Fig. 2 for the machine, §3.2-§3.3 for
partitions and mappings).

Each is a :class:`Tag`, a :class:`enum.StrEnum` whose members are their old strings: a
member equals, hashes, formats, prints and ``repr``-s as its value, so printed IR,
diagnostics, generated CUDA, JSON and YAML text stay what they were, and code outside the
typed layers (a hand-written string, the machine model's YAML) still compares equal.  The
IR's own tags (roles, hazards, sync kinds) are in :mod:`cypressc.ir.kinds`.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Tag", "Proc", "Mem", "PartKind", "OperandKind"]


class Tag(StrEnum):
    """A string tag of the IR.  ``hash`` is the string's (``Enum.__hash__`` hashes the
    member's *name*, which for ``PartKind.BLOCKS = "blocks"`` differs from the value, so a
    dict keyed by the string would miss the member) and ``repr`` is the string's, so a
    message that shows a tuple of tags (``('WARP', 'THREAD')``) reads as before."""

    __hash__ = str.__hash__

    def __repr__(self) -> str:
        return str.__repr__(self.value)


class Proc(Tag):
    """A processor level of the machine, outermost first (paper Fig. 2; the levels of
    ``cypressc/mapping/machines/h100.yaml``)."""

    HOST = "HOST"
    BLOCK = "BLOCK"
    WARPGROUP = "WARPGROUP"
    WARP = "WARP"
    THREAD = "THREAD"


class Mem(Tag):
    """A memory a mapping places a tensor in; ``NONE``: never materialized at this level
    (paper §3.3), so copy elimination forwards its uses."""

    GLOBAL = "GLOBAL"
    SHARED = "SHARED"
    REGISTER = "REGISTER"
    NONE = "NONE"


class PartKind(Tag):
    """How ``partition_by_<kind>`` splits a tensor: into ``blocks`` of given extents, into
    ``slices`` along one dimension, or among the threads of an ``mma`` atom (paper §3.2)."""

    BLOCKS = "blocks"
    SLICES = "slices"
    MMA = "mma"


class OperandKind(Tag):
    """What one argument of a leaf function is (:class:`cypressc.lang.intrinsics.OperandRule`):
    a tensor, a scalar value, or an instruction atom name."""

    TENSOR = "tensor"
    SCALAR = "scalar"
    ATOM = "atom"
