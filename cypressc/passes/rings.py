"""Ring joins: a tile copied outside a pipelined loop into the loop's stage ring (Cypress
paper §4.2.4-§4.2.5; FlashAttention-3's K and V rings).

A software-pipelined program peels steps off its main loop: FlashAttention-3 copies K[0]
before the key loop and the last V tile after it, each of the same partition and shape as
the loop's own K and V copies.  Given a buffer of their own, such a tile holds its bytes for
the whole tile (in a persistent block its next copy waits for this tile's readers of those
bytes), and it needs bytes the stage rings could lend.  A *ring join* gives it the next
position of the loop's stage ring instead: the copies before the loop (``pre``) take ring
positions ``0 .. a-1`` of the tile, the loop's step ``k`` takes ``a + k``, the copies after
it (``post``) ``a + T + j`` (``T`` the trip count).  The stage ring then advances
``T + a + b`` positions per tile, and a persistent block's next tile's peeled K tile loads
as soon as a ring stage frees up during this tile's loop.

A SHARED tensor ``A`` joins the ring of buffer ``B`` (allocated in the body of a loop mapped
``pipeline: D``, D >= 2, with a lower bound of 0) when:

* the block is warp-specialized (the producer issues every ring copy in ring order);
* ``A`` is allocated in the block that holds the loop, outside every loop, and its one write
  is a copy from GLOBAL memory of a piece of the same partition as ``B``'s one write (the
  loop's copy), with the same shape, element type, processor dimensions;
* every access of ``A`` (the copy and its readers) lies on one side of the loop: before it
  (``pre``) or after it (``post``), so a member's stage is free again before the loop needs it
  (before) or the loop's stages are released before a member needs them (after);
* every ring of the loop advances by the same ``a + b`` per tile (the kernel keeps one stage
  counter per loop), and ``a + b <= D`` (each member's stage is ``a + b - 1`` or fewer
  positions from the loop's, so no member waits on another member's release).

:func:`ring_joins` finds them; resource allocation gives joined tensors no bytes of their own,
warp specialization rewrites their views to the ring's stage pieces
(:func:`cypressc.passes.warp_specialization.warp_specialization`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cypressc.ir import nodes as N
from cypressc.ir.analysis import Symbols, views_of
from cypressc.ir.shapes import static
from cypressc.ir.subst import walk_ops
from cypressc.lang.kinds import Mem

__all__ = ["Join", "ring_joins", "ring_extra"]


@dataclass(frozen=True)
class Join:
    """SHARED tensor ``member`` takes a position of loop ``loop``'s stage ring of buffer
    ``ring``: ``side`` ``pre`` (position ``index`` of the tile) or ``post`` (position
    ``pre + T + index``, ``pre`` the ring's count of members before the loop, ``T`` its trip
    count)."""

    member: str
    ring: str
    loop: str
    side: str
    index: int
    pre: int


def _writes(o: N.Op, sym: Symbols) -> list[str]:
    return [sym.root(v) for v, _, w in views_of(o) if w] if isinstance(o, (N.Copy, N.Call)) else []


def _uses(o: N.Op, sym: Symbols) -> set[str]:
    """The root tensors op ``o`` (a loop: its whole body) names."""
    ops = list(walk_ops(o.body)) if isinstance(o, (N.For, N.PFor)) else [o]
    out = set()
    for x in ops:
        if isinstance(x, (N.Copy, N.Call)):
            out |= {sym.root(v) for v, _, _ in views_of(x)}
        elif isinstance(x, N.Partition):
            out.add(sym.root(x.base))
    return out


def _ring_copy(buf: N.Alloc, ops: list[N.Op], sym: Symbols) -> N.Copy | None:
    """The one write of ``buf``: a copy from GLOBAL memory of a partition's piece into all of it."""
    writes = [o for o in ops if buf.name in _writes(o, sym)]
    if len(writes) != 1 or not isinstance(writes[0], N.Copy):
        return None
    c = writes[0]
    if not (
        isinstance(c.dst, N.TRef) and isinstance(c.src, N.Piece) and sym.mem(c.src) == Mem.GLOBAL
    ):
        return None
    return c


def ring_joins(m: N.Module, warpspecialize: bool) -> dict[str, Join]:
    """The ring joins of ``m`` (before warp specialization stages its loops), by member
    tensor; empty without warp specialization.  See the module docstring."""
    if not warpspecialize:
        return {}
    sym = Symbols(m)
    every = list(walk_ops(m.body))
    out: dict[str, Join] = {}

    def block(b: N.Block) -> None:
        for i, lp in enumerate(b.ops):
            if isinstance(lp, (N.For, N.PFor)):
                block(lp.body)
            if isinstance(lp, N.For) and lp.pipeline >= 2 and static(lp.lo) == 0:
                out.update(_loop_joins(b, i, lp, sym, every))

    block(m.body)
    return out


def _loop_joins(b: N.Block, at: int, lp: N.For, sym: Symbols, every: list[N.Op]) -> dict[str, Join]:
    bufs = [o for o in lp.body.ops if isinstance(o, N.Alloc) and o.mem == Mem.SHARED]
    members: dict[str, list[tuple[int, str, str]]] = {
        x.name: [] for x in bufs
    }  # ring -> (pos, side, member)
    for x in bufs:
        c = _ring_copy(x, list(walk_ops(lp.body)), sym)
        if c is None:
            continue
        for a in b.ops:
            if not (
                isinstance(a, N.Alloc)
                and a.mem == Mem.SHARED
                and a.shape == x.shape
                and a.dtype == x.dtype
                and a.dims == x.dims
            ):
                continue
            ac = _ring_copy(a, every, sym)
            if (
                ac is None
                or ac.src.partition != c.src.partition
                or ac.dims != c.dims
                or ac not in b.ops
            ):
                continue
            sides = {
                "pre" if j < at else "post"
                for j, o in enumerate(b.ops)
                if j != at and not isinstance(o, N.Alloc) and a.name in _uses(o, sym)
            }
            if a.name in _uses(lp, sym) or len(sides) != 1:
                continue
            members[x.name].append((b.ops.index(ac), sides.pop(), a.name))
    counts = {
        r: (sum(s == "pre" for _, s, _ in ms), sum(s == "post" for _, s, _ in ms))
        for r, ms in members.items()
    }
    extra = {a + p for a, p in counts.values()}
    if len(extra) != 1 or extra == {0} or next(iter(extra)) > lp.pipeline:
        return {}  # the rings would not advance in step, or a member would wait on another's release
    out = {}
    for r, ms in members.items():
        pre = counts[r][0]
        for side in ("pre", "post"):
            for j, (_, _, name) in enumerate(sorted(x for x in ms if x[1] == side)):
                out[name] = Join(name, r, lp.ev, side, j, pre)
    return out


def ring_extra(joins: dict[str, Join], loop: str) -> int:
    """Ring positions per tile that loop ``loop``'s members take besides its steps."""
    rings: dict[str, int] = {}
    for j in joins.values():
        if j.loop == loop:
            rings[j.ring] = rings.get(j.ring, 0) + 1
    return max(rings.values(), default=0)
