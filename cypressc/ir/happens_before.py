"""An independent check of a synchronized module (Cypress paper §4.2.6): every pair of
conflicting memory accesses of one thread block is ordered by a chain of synchronization.

The dependence analysis (:mod:`cypressc.ir.hazards`) decides which event edges need
synchronization and ``sync-insertion`` realizes them; :mod:`cypressc.ir.sync_verify`
checks the inserted ops against that same analysis, so a hazard the analysis misses, it
misses too.  This module shares nothing with the analysis: it runs the block on the
concurrent interpreter (:mod:`cypressc.ir.concurrent`, at concrete small sizes, every
iteration of every loop and, for a persistent block, two tiles back to back) and keeps
*vector clocks* (Lamport; the happens-before relation race detectors such as FastTrack
use) for every agent:

* an agent is a role instance (the producer, each consumer warpgroup) or one
  asynchronous operation (a TMA load, a TMA store, a wgmma), which starts with its
  issuer's clock at the issue;
* an arrival on an mbarrier stage (``arrive``, ``arrive_expect_tx``) and the completion of
  a TMA load on it release into that stage's current phase; a ``wait`` that returns
  acquires the phase it saw complete;
* ``wait_group wgmma N`` acquires the wgmmas it retires; ``wait_group bulk N`` the TMA
  stores of every group but the newest N;
* a named barrier (``bar_sync``, a ping-pong ``turn take``) releases every arrival into
  its generation and acquires the generation once complete; a ``turn pass``
  (``bar.arrive``) only releases.

Every access is recorded with the agent's clock and the elements it touches (shared and
global tiles to the element, through the interpreter's own views; a register tensor of a
warpgroup as a whole; tensors resource allocation lets share bytes by the byte ranges of
their stages in the block's shared memory).  A
new access that conflicts with a recorded one (overlapping elements, one of them a write,
different agents) must have that access in its past; otherwise the pair is a race and the
check reports it with both operations.  Accesses of one warpgroup's threads among
themselves are in program order here (the interpreter runs a warpgroup in lockstep):
ordering *inside* a warpgroup (``bar_sync`` of 128 threads, ``syncwarp``) and the proxy
fences are checked by the interpreter's own race checks and by the sync verifier.
"""

from __future__ import annotations

from itertools import product

import numpy as np

from cypressc.diagnostics import VerifyError
from cypressc.ir import concurrent as C
from cypressc.ir import nodes as N
from cypressc.ir.analysis import shapeless_scalars
from cypressc.ir.interp import evaluate
from cypressc.ir.schedule_check import grid_blocks, small_sizes, two_tile_sizes
from cypressc.lang.intrinsics import NUMPY_DTYPES

__all__ = ["check_happens_before", "verify_happens_before"]


def check_happens_before(m: N.Module, sizes: dict[str, int] | None = None, seed: int = 0):
    """Run the synchronized module ``m`` at ``sizes`` (default:
    :func:`cypressc.ir.schedule_check.small_sizes`, with every int parameter that fixes no
    shape also at 0) on each of the grid's first two blocks, and a persistent module's first
    two tiles back to back in one block where
    :func:`~cypressc.ir.schedule_check.two_tile_sizes` finds sizes for them, checking every
    pair of conflicting accesses for a synchronization chain.  Returns the first
    :class:`~cypressc.ir.concurrent.Finding` (a race, or a deadlock the run hit) or None.
    Raises ValueError where :func:`~cypressc.ir.concurrent.run_block` does for ``sizes``
    given (the default sizes skip two-tile runs that cannot restart the pipeline)."""
    if sizes is not None:
        bases = [sizes]
    else:
        small = small_sizes(m)
        # an int flag (FlashAttention's causal) changes the loops' trip counts: each at 0 too
        flags = shapeless_scalars(m)[:2]
        bases = [
            {**small, **dict(zip(flags, vals))} for vals in product(*[(small[f], 0) for f in flags])
        ]
    runs = []
    for base in bases:
        runs += [(base, [b]) for b in grid_blocks(m, base)[:2]]
        if m.schedule is not None and m.schedule.persistent and sizes is None:
            two = two_tile_sizes(m, base)
            if two is not None:
                runs.append((two, grid_blocks(m, two)))
    for sz, blocks in runs:
        sz = {**sz, **{f: 0.75 for f in m.floats if f not in sz}}
        arrays = {
            p.name: np.zeros([int(evaluate(x, sz)) for x in p.shape], NUMPY_DTYPES[p.dtype])
            for p in m.params
        }
        try:
            f = C.run_block(
                m,
                sz,
                arrays,
                blocks if len(blocks) > 1 else blocks[0],
                seed,
                values=False,
                happens_before=True,
            )
        except ValueError:
            if (
                len(blocks) > 1 and sizes is None
            ):  # these tiles cannot run back to back: no such run
                continue
            raise
        if f is not None:
            return f
    return None


def verify_happens_before(m: N.Module) -> None:
    """:func:`check_happens_before` at the module's small sizes; raises
    :class:`cypressc.diagnostics.VerifyError` (a compiler bug) naming the unordered pair or the
    deadlock.  The pass manager runs it after ``sync-insertion``."""

    f = check_happens_before(m)
    if f is not None:
        raise VerifyError(f"happens-before: {f}")
