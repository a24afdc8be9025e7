"""Pass ``reduction-order``: the mapping's ``deterministic: true`` (issue #38; beyond the
Cypress paper, whose privileges stop at reads and writes: Legion's reduction privilege with
FlashAttention-3's deterministic backward, where a semaphore per dQ tile makes the key
blocks add in their order).

A reduction (``copy.add`` of a ``reduces=`` argument into global memory) lets the blocks that
add into one tile run concurrently; the adds land in whatever order the blocks reach them,
so the f32 sum may differ in its last bits from run to run.  With ``deterministic: true`` on
the kernel's BLOCK instance this pass marks the block's reduce-add ``copy.add.ordered``: the
blocks along the grid's **innermost dimension** (the last ``block_id`` dimension: the key
blocks of an attention backward) add into each tile in one order along it, every run.
The CUDA lowering realizes the order with a progress word per block in a workspace it
allocates: the tile walk starts the blocks of that dimension from the last one down and they
add in that order; before adding tile τ a block waits until the one started before it has
passed τ, and it publishes how far it has come (``cypressc/backend/runtime/cypress.cuh``,
``order_enter`` / ``order_finish``).

The order is only as deterministic as three facts the pass proves with Z3
(:func:`cypressc.ir.intsets.blocks_may_share`, :func:`~cypressc.ir.intsets.always_increases`,
:func:`~cypressc.ir.intsets.stays_inside`), refusing the knob (E064) when one is not proven:

* **the blocks that add into one tile differ only along the innermost dimension**: two blocks
  that differ elsewhere never reach the same tile (otherwise two chains would add into it in
  either order);
* **each block visits its tiles in increasing order** (lexicographic in the tile's element
  origin, outermost dimension first) from one iteration of the loop around the add to the
  next: a block that passes a tile never comes back to it, so "passed τ" is one number.  That
  number is the row-major offset of the origin, which orders tiles as the lexicographic order
  does when the origin starts inside the tensor along every dimension but the first: proved
  too (:func:`~cypressc.ir.intsets.stays_inside`).

No fact is needed for the sum to be right or for the wait to end: a block only ever waits
for the block of its row that the tile walk started just before it.  The
pass changes no edge of the block's IR (the order is across blocks); it only marks the copy.

Scope: one reduce-add into global memory per block, issued once per block (its dims are the
grid's, and processors below the block only of extent 1: one consumer warpgroup's) and
standing in at most one loop of the block; anything else is refused with what to change.
"""

from __future__ import annotations

from dataclasses import replace

from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir.analysis import element_origin, map_ops
from cypressc.ir.hazards import Program
from cypressc.ir.intsets import always_increases, blocks_may_share, stays_inside
from cypressc.ir.printer import fmt_view
from cypressc.ir.shapes import static
from cypressc.lang.kinds import Mem, Proc
from cypressc.passes.base import ModulePass

__all__ = ["ReductionOrder", "CODE"]

CODE = "E064"  # deterministic: true, and the compiler cannot order the block's reductions


class ReductionOrder(ModulePass):
    """Mark the block's reduce-add into global memory ``copy.add.ordered`` when the mapping
    sets ``deterministic: true`` (a no-op otherwise), after proving that the blocks adding
    into one tile differ only along the grid's innermost dimension and that each block's
    tiles increase from one step to the next.  Raises
    :class:`~cypressc.diagnostics.CypressError` ``E064`` at the knob when it cannot."""

    name = "reduction-order"
    section = (
        "beyond the paper"  # Legion's reduction privilege, FlashAttention-3's deterministic mode
    )

    def apply(self, m: N.Module) -> N.Module:
        t = m.target
        if t is None or not t.block.deterministic:
            return m
        loc = t.knob_loc("deterministic")

        def refuse(msg: str, hint: str) -> CypressError:
            return CypressError(CODE, f"deterministic: true: {msg}", loc, hint=hint)

        prog = Program(m)
        reds = [
            lf
            for lf in prog.leaves.values()
            if isinstance(lf.op, N.Copy)
            and lf.op.reduce is not None
            and prog.sym.mem(lf.op.dst) == Mem.GLOBAL
        ]
        if not reds:
            raise refuse(
                "the block adds into no tensor (no copy.add into global memory)",
                "drop the knob: only a block that reduces into a `reduces=` tensor has an order to keep",
            )
        if len(reds) > 1:
            evs = ", ".join(fmt_view(lf.op.dst) for lf in reds)
            raise refuse(
                f"the block adds into global memory in {len(reds)} places ({evs}); one can be "
                "ordered",
                "add into the tensor from one place in the block, or drop the knob",
            )
        lf = reds[0]
        op = lf.op
        root = prog.sym.root(op.dst)
        below = [d for d in op.dims if d.proc != Proc.BLOCK and static(d.extent) != 1]
        if below:
            raise refuse(
                f"the reduce-add into {root} ({fmt_view(op.dst)}) runs per "
                f"{below[0].proc}: they would add in either order",
                "stage the block's whole tile in shared memory and add it once (a BLOCK-level "
                "copy.add: TMA reduce-add of the tile, as a `put` into one shared tile does)",
            )
        if lf.hosts or len(lf.loops) > 1:
            raise refuse(
                f"the reduce-add into {root} stands in "
                f"{len(lf.loops) + len(lf.hosts)} loops; the order is kept across the steps of one",
                "add into the tensor from the block's main loop or after it",
            )
        grid = [d.extent for d in op.dims if d.proc == Proc.BLOCK]
        if not grid:
            raise refuse("the reduce-add runs outside the grid", "map the task to BLOCK")
        _, tile, _, _ = element_origin(prog.sym, op.dst)
        if blocks_may_share(tile, prog.space, grid, len(grid) - 1):
            raise refuse(
                f"blocks that differ in a grid dimension other than the innermost may add into "
                f"the same tile of {root} (or the compiler could not prove "
                "they never do)",
                "make the innermost HOST prange the one whose blocks share tiles (the key "
                "blocks of an attention backward), or drop the knob",
            )
        if not stays_inside(tile, prog.sym.allocs[root].shape, prog.space, grid):
            raise refuse(
                f"the compiler could not prove that the tile the block adds into "
                f"({fmt_view(op.dst)}) starts inside {root} along every dimension but the "
                "first, so its row-major offset need not order the tiles",
                "add only into tiles that start inside the tensor, or drop the knob",
            )
        if lf.loops and not always_increases(tile, lf.loops[0].var, prog.space):
            raise refuse(
                f"the compiler could not prove that the tile the block adds into "
                f"({fmt_view(op.dst)}) increases from one step of its loop to the next",
                "walk the tiles in increasing order (outermost dimension first), or drop the knob",
            )

        def mark(o: N.Op) -> N.Op:
            return replace(o, ordered=True) if o is op else o

        return map_ops(m, mark)
