"""What the passes hand on to later ones, as typed fields of :class:`~cypressc.ir.nodes.Module`.

Each pass that decides something about the whole block (not about one op) records it in
one small frozen dataclass, set on the module by that pass and ``None`` before it ran:

* :class:`Schedule` — ``warp-specialization`` (paper §4.2.5): channels, stage depths,
  whether the block is warp-specialized;
* :class:`Resources` — ``resource-allocation`` (paper §4.2.4, Fig. 11): the shared-memory
  plan, the byte-sharing (WAR) pairs and the register estimate and budget;
  ``sync-insertion`` grows its mbarrier bytes when channels need more.

Dependence analysis' :class:`~cypressc.ir.origin.Sites` and the CUDA lowering's
:class:`~cypressc.backend.plan.KernelPlan` are the other two such fields (``Module.sites``,
``Module.kernel``).  The mappings here are plain dicts for cheap reads; no pass mutates
them after construction (a pass that changes one builds a new value with
:func:`dataclasses.replace`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["Schedule", "SmemSlot", "Resources"]


@dataclass(frozen=True, slots=True)
class Schedule:
    """``warp-specialization``'s decisions (paper §4.2.5).

    ``channels``: producer copy event -> the consumer events that read its bytes (each a
    full mbarrier forward and, on a stage buffer, an empty mbarrier backward), in program
    order.  ``stages``: SHARED buffer -> its pipeline depth D (only buffers of a pipelined
    loop are listed; the others have one stage).  ``warpspecialize``: the mapping asked
    for a DMA producer warpgroup (``warpspecialize: true`` on the BLOCK instance).
    ``persistent``: one block walks several tiles (``persistent: true``), so a tile's reads of
    a buffer its next tile loads again are hazards (``via = "tile"`` edges into the copies
    outside the main loop); with one tile per block they are not.
    """

    channels: dict[str, tuple[str, ...]]
    stages: dict[str, int]
    warpspecialize: bool
    persistent: bool = False


class SmemSlot(NamedTuple):
    """One SHARED tensor's byte range in the block's shared memory: it starts ``offset``
    bytes after the (1024-byte aligned) base and spans ``bytes`` bytes, all ``stages``
    stages (and per-warpgroup replicas) included.  A tuple, so ``slot[0]`` is the offset."""

    offset: int
    bytes: int
    stages: int


@dataclass(frozen=True, slots=True)
class Resources:
    """``resource-allocation``'s plan (paper §4.2.4, Fig. 11); all sizes in bytes.

    ``smem``: tensor -> :class:`SmemSlot`, in allocation order (by first use).
    ``smem_bytes``: the block's dynamic shared memory, mbarriers and 1024-byte alignment
    slack included.  ``barrier_offset``: where the mbarrier arrays start (after the
    tensors); ``barrier_bytes``: the bytes reserved for them (``sync-insertion`` grows this
    and ``smem_bytes`` when its channels need more).  ``smem_limit``: the mapping's
    ``smem_limit`` (default: the machine's per-block maximum).  ``war``: pairs of tensors
    that share bytes, the earlier first (a write-after-read edge from the last readers of
    the first to the first writer of the second).  ``registers``: estimated registers per
    consumer thread; ``register_budget``: (producer, consumer) registers per thread
    (``setmaxnreg``).
    """

    smem: dict[str, SmemSlot]
    smem_bytes: int
    barrier_offset: int
    barrier_bytes: int
    smem_limit: int
    war: tuple[tuple[str, str], ...]
    registers: int
    register_budget: tuple[int, int]
