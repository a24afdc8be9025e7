"""The Tensor Core instruction atoms (Cypress paper §3.4) by name: ``WGMMA_64xNx16``, N = 8…256
in steps of 8 (Hopper ``wgmma.mma_async.m64nNk16``, f16/bf16 in, f32 accumulate), and
``WGMMA_64xNx32`` (``m64nNk32``: FP8 e4m3/e5m2 in, both operands K-major; PTX ISA §9.7.15.5).
An atom's K is 32 bytes of its operands' elements: :func:`atom_k` gives it per dtype.

A mapping or a ``partition_by_mma`` names an atom; :func:`is_atom_name` says whether a name
is one, :func:`atom` gives its shape and :func:`atom_name` the name of a shape.  The leaf
functions that run on them are in :mod:`cypressc.lang.intrinsics`.

A mapping may leave a ``tunable(atom)`` unbound: the task tree then binds it to
:data:`AUTO_ATOM`, and dependence analysis derives the atom from the tile it partitions
(:mod:`cypressc.passes.atom_derivation`; docs/language.md §5.2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "ATOM_FORMS",
    "AUTO_ATOM",
    "AutoAtom",
    "MmaAtom",
    "atom",
    "atom_k",
    "atom_name",
    "is_atom_name",
]


@dataclass(frozen=True, slots=True)
class MmaAtom:
    """A wgmma instruction shape ``m x n x k`` (Hopper ``wgmma.mma_async.m64nNk16`` or
    ``m64nNk32``)."""

    name: str
    m: int
    n: int
    k: int

    @property
    def threads(self) -> int:
        return 128


@dataclass(frozen=True, slots=True)
class AutoAtom:
    """The value of an atom tunable the mapping leaves unbound: "derive it" (issue #37).

    Dependence analysis replaces it by the caller's atom of the same name, or by
    ``WGMMA_64x<cols>x<k>`` (:func:`atom_k` of the operands) for the first ``partition_by_mma(T, ATOM, PROC, "C")`` of a rank-2
    tile ``T`` with ``cols`` static columns.  Shown as ``auto`` (``cypressc explain``'s tree
    prints ``MMA=auto``).  All instances are equal; use :data:`AUTO_ATOM`."""

    def __str__(self) -> str:
        return "auto"

    def __repr__(self) -> str:
        return "auto"


AUTO_ATOM = AutoAtom()

_ATOM_RE = re.compile(r"^WGMMA_64x(\d+)x(16|32)$")

ATOM_FORMS = (
    "WGMMA_64xNx16 (16-bit operands) or WGMMA_64xNx32 (FP8) with N a multiple of 8 from 8 to 256"
)
"""The atoms there are, in words, for hints."""


def is_atom_name(name: str) -> bool:
    """True for ``WGMMA_64xNx16`` or ``WGMMA_64xNx32`` with N a multiple of 8 in 8…256."""
    m = _ATOM_RE.match(name)
    return bool(m) and 8 <= int(m.group(1)) <= 256 and int(m.group(1)) % 8 == 0


def atom_k(itemsize: int) -> int:
    """The K of the wgmma atoms whose operands have ``itemsize``-byte elements: one instruction
    reads 32 bytes of each row (k16 for f16/bf16, k32 for FP8)."""
    return 32 // itemsize


def atom_name(m: int, n: int, k: int) -> str:
    """The name of the wgmma atom of shape ``m`` x ``n`` x ``k`` (it may not exist: see
    :func:`is_atom_name`)."""
    return f"WGMMA_{m}x{n}x{k}"


def atom(name: str) -> MmaAtom:
    """Look up an atom by name; raises ``KeyError`` for an unknown one."""
    if not is_atom_name(name):
        raise KeyError(name)
    m = _ATOM_RE.match(name)
    return MmaAtom(name, 64, int(m.group(1)), int(m.group(2)))  # type: ignore[union-attr]
