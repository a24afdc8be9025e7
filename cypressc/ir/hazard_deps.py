"""The records of the hazard analysis (Cypress paper §4.2.6) and what follows from them
alone: a :class:`Leaf` (a copy or leaf call of the block program), a :class:`Dep` (one
event edge between two leaves with the data hazard it protects), the processor levels a
hazard can span (:data:`LEVELS`), whether a dependence is :func:`implied` by a path of
synchronized ones, and how many :func:`instances` of an op run per block.

:class:`cypressc.ir.hazards.Program` finds the dependences; sync insertion, its placement
and channels, and the sync verifier read these records.
"""

from __future__ import annotations

from dataclasses import dataclass

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.kinds import Hazard, OpKind, Role, Via
from cypressc.ir.shapes import static
from cypressc.lang.kinds import Mem, Proc

__all__ = ["LEVELS", "Leaf", "Dep", "implied", "instances"]

LEVELS = (Proc.WARPGROUP, Proc.WARP, Proc.THREAD)


@dataclass(frozen=True, eq=False)
class Leaf:
    """A copy or leaf call of the block program: ``loops`` are the block-level loops around
    it (outermost first), ``hosts`` the HOST loops, ``seq`` its pre-order position."""

    op: N.Copy | N.Call
    block: N.Block
    loops: tuple[N.For, ...]
    hosts: tuple[N.For, ...]
    seq: int
    role: Role
    kind: OpKind


@dataclass(frozen=True)
class Dep:
    """A hazard an event edge protects: ``src`` must complete before ``dst`` touches
    ``other`` (``tensor`` is what ``src`` touches; they differ when the two share bytes)."""

    src: str
    dst: str
    via: Via
    loop: str  # the loop event of entry / after / carried ("" otherwise)
    distance: int
    hazard: Hazard
    tensor: str
    other: str
    mem: Mem
    scope: tuple[Proc, ...]

    def edge(self) -> S.Edge:
        return S.Edge(self.src, self.dst, self.hazard, self.tensor, self.via, self.distance)


def implied(dep: Dep, covered: list[Dep]) -> bool:
    """Whether ``dep`` follows from a path of covered dependences through one or two ops
    (each completes before the next starts): same-iteration steps compose with any step
    (with a ``tile`` step into the next tile too), carried distances add up."""

    def step(a: Dep, b: Dep) -> tuple | None:
        kinds = (a.via, b.via)
        if Via.TILE in kinds and Via.SAME not in kinds:
            return None
        if a.via == Via.SAME:
            return (b.via, b.loop, b.distance)
        if b.via == Via.SAME:
            return (a.via, a.loop, a.distance)
        if kinds == (Via.CARRIED, Via.CARRIED) and a.loop == b.loop:
            return (Via.CARRIED, a.loop, a.distance + b.distance)
        return None

    goal = (dep.via, dep.loop, dep.distance)
    by_src: dict[str, list[Dep]] = {}
    for c in covered:
        if c.hazard != Hazard.END:  # a tile edge composes with same-tile steps (into the next tile)
            by_src.setdefault(c.src, []).append(c)
    for a in by_src.get(dep.src, []):
        for b in by_src.get(a.dst, []):
            if b.dst == dep.dst and step(a, b) == goal:
                return True
            for c in by_src.get(b.dst, []):
                ab = step(a, b)
                if (
                    c.dst == dep.dst
                    and ab is not None
                    and step(Dep("", "", *ab, "", "", "", "", ()), c) == goal
                ):
                    return True
    return False


def instances(dims: tuple[N.Dim, ...]) -> int | None:
    """How many instances of an op run per block (the product of its processor extents
    below BLOCK); None when one of them is a run-time value."""
    n = 1
    for d in dims:
        if d.proc != Proc.BLOCK:
            e = static(d.extent)
            if e is None:
                return None
            n *= e
    return n
