"""Where ``sync-insertion`` (paper §4.2.6) puts the sync ops it derives: each waits in a slot
before or after an op of the block program (or at the end of a block), ops of one key merge
there (their edges joined, a ``wait_group`` keeping the smallest N), and the blocks are
rebuilt with every slot's ops in a fixed order by kind."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.hazard_deps import Dep, instances
from cypressc.ir.hazards import Program
from cypressc.ir.kinds import FenceKind, Via
from cypressc.lang.kinds import Tag

__all__ = ["Refuse", "Ins", "Side", "count_instances", "Placement"]


class Side(Tag):
    """Where a slot of sync ops sits: before or after an op, or at the end of a block."""

    BEFORE = "before"
    AFTER = "after"
    END = "end"


_BEFORE = {
    S.MBarrier: 0,
    S.WaitGroup: 1,
    FenceKind.PROXY_ASYNC: 2,
    S.SyncWarp: 3,
    S.BarSync: 4,
    S.Wait: 5,
    S.ArriveExpectTx: 6,
    FenceKind.WGMMA: 7,
}
_AFTER = {S.CommitGroup: 0, S.WaitGroup: 1, S.SyncWarp: 2, S.Arrive: 3}
_BEFORE[S.Arrive] = (
    3.5  # a stage released before a thread op: after the wait_group that retired its readers
)


class Refuse(Exception):
    """An edge sync-insertion cannot synchronize yet; the pass reports it as E050."""


@dataclass
class Ins:
    """A sync op waiting to be placed: merged with others of the same ``key`` at one anchor."""

    prio: int
    key: tuple
    build: Callable[["Ins"], object]
    edges: list = field(default_factory=list)
    pending: int = 0


def count_instances(dims: tuple[N.Dim, ...]) -> int:
    """Instances of an op over ``dims`` (a static count; :class:`Refuse` otherwise)."""
    n = instances(dims)
    if n is None:
        raise Refuse("a run-time number of warpgroups, warps or threads")
    return n


class Placement:
    """The slots of sync ops waiting to be placed, and the blocks rebuilt with them.

    ``prog`` is the :class:`~cypressc.ir.hazards.Program` the ops are derived from (a
    subclass sets it); ``bars`` gives each TMA copy event the completion barrier written
    into the copy when its block is rebuilt."""

    prog: Program

    def __init__(self) -> None:
        self.slots: dict[tuple[int, Side], list[Ins]] = {}
        self.bars: dict[str, S.BarIdx] = {}

    def put(self, anchor, side: Side, prio, key: tuple, build, edges=(), pending: int = 0) -> None:
        """Place ``build(ins)`` before / after ``anchor`` (or at the ``end`` of a block),
        ordered there by ``prio`` (a sync op type, or a :class:`~cypressc.ir.kinds.FenceKind`
        for fences; an int in an ``end`` slot);
        ops of one ``key`` merge their edges, and a wait_group keeps the smallest N."""
        order = (
            prio if isinstance(prio, int) else (_BEFORE if side == Side.BEFORE else _AFTER)[prio]
        )
        slot = self.slots.setdefault((id(anchor), side), [])
        for ins in slot:
            if ins.key == key:
                ins.edges += [e for e in edges if e not in ins.edges]
                ins.pending = min(ins.pending, pending)
                return
        slot.append(Ins(order, key, build, list(edges), pending))

    def anchor(self, d: Dep) -> tuple[object, Side]:
        """Where the waiting side of ``d`` goes: before the consumer, or before the loop it
        enters."""
        c = self.prog.leaves[d.dst]
        if d.via == Via.ENTRY:
            return self.prog.loops[d.loop][0], Side.BEFORE
        return c.op, Side.BEFORE

    def _emit(self, anchor, side: Side) -> list:
        slot = sorted(self.slots.get((id(anchor), side), []), key=lambda i: i.prio)
        return [ins.build(ins) for ins in slot]

    def _rebuild(self, b: N.Block) -> N.Block:
        ops: list = []
        for op in b.ops:
            ops += self._emit(op, Side.BEFORE)
            if isinstance(op, N.Copy) and op.ev in self.bars:
                new = replace(op, bar=self.bars[op.ev])
            elif isinstance(op, (N.For, N.PFor)):
                new = replace(op, body=self._rebuild(op.body))
            else:
                new = op
            ops.append(new)
            ops += self._emit(op, Side.AFTER)
        ops += self._emit(b, Side.END)
        return N.Block(tuple(ops), b.yields)
