"""The event IR's own tags (Cypress paper §4.2.5-§4.2.6): warp-specialization roles, the
hazards and paths of event edges, what kind of op a copy or call is, what realizes a
dependence, and the kinds of the sync ops of :mod:`cypressc.ir.sync`.

Like the shared tags of :mod:`cypressc.lang.kinds` (processor levels, memories, partition
kinds) each is a :class:`~cypressc.lang.kinds.Tag`: a member equals, hashes, prints and
``repr``-s as its old string, so the printed IR and every message read as before.
"""

from __future__ import annotations

from cypressc.lang.kinds import Tag

__all__ = [
    "Role",
    "Hazard",
    "Via",
    "OpKind",
    "Need",
    "BarrierKind",
    "GroupUnit",
    "FenceKind",
    "TurnKind",
]


class Role(Tag):
    """Who runs a copy or call after warp specialization (§4.2.5): the producer warp issues
    the TMA loads, the consumer warpgroups the rest."""

    PRODUCER = "producer"
    CONSUMER = "consumer"


class Hazard(Tag):
    """What an event edge protects: a read after write, write after read or write after
    write on a tensor, the end of the block program (a TMA store's reads of shared memory
    must retire), or a ping-pong ``turn`` (the Tensor Core as a resource the consumer
    warpgroups take turns on, not a data hazard)."""

    RAW = "raw"
    WAR = "war"
    WAW = "waw"
    END = "end"
    TURN = "turn"


class Via(Tag):
    """How an event edge reaches its consumer: in the ``same`` iteration, on ``entry`` into
    a loop, ``after`` a loop, ``carried`` some iterations later, at the ``end`` of the block
    program, into the block's next ``tile``, or a stage ``ring``'s next fill of a stage."""

    SAME = "same"
    ENTRY = "entry"
    AFTER = "after"
    CARRIED = "carried"
    END = "end"
    TILE = "tile"
    RING = "ring"


class OpKind(Tag):
    """What runs a copy or leaf call of the block program: a TMA load (GLOBAL to SHARED) or
    store (SHARED to GLOBAL), a Tensor Core leaf a warpgroup issues (``wgmma``), or thread
    code (any other copy, any other leaf)."""

    TMA_LOAD = "tma_load"
    TMA_STORE = "tma_store"
    WGMMA = "wgmma"
    THREAD = "thread"


class Need(Tag):
    """What realizes a dependence (:meth:`cypressc.ir.hazard_needs.Realization.needs`): a
    ``full`` / ``empty`` mbarrier, ``chain`` (wgmmas on one accumulator retire in order),
    ``wait_group``, ``fence_wgmma``, ``proxy`` (fence.proxy.async), ``syncwarp`` /
    ``bar_sync`` (a broadcast over threads / warps), ``bulk`` (a TMA store's group),
    ``bulk_read`` (a TMA store's bulk group retired its reads of shared memory: its issuing
    thread's ``wait_group bulk N``), ``none`` (program order in one thread) or ``implied``
    (by other synchronized edges)."""

    FULL = "full"
    EMPTY = "empty"
    CHAIN = "chain"
    WAIT_GROUP = "wait_group"
    FENCE_WGMMA = "fence_wgmma"
    PROXY = "proxy"
    SYNCWARP = "syncwarp"
    BAR_SYNC = "bar_sync"
    BULK = "bulk"
    BULK_READ = "bulk_read"
    NONE = "none"
    IMPLIED = "implied"


class BarrierKind(Tag):
    """An mbarrier's job: ``full`` (the TMA bytes of a stage landed) or ``empty`` (its
    readers released the stage)."""

    FULL = "full"
    EMPTY = "empty"


class GroupUnit(Tag):
    """The async groups a ``commit_group`` / ``wait_group`` counts: ``wgmma`` groups or TMA
    stores' ``bulk`` groups."""

    WGMMA = "wgmma"
    BULK = "bulk"


class FenceKind(Tag):
    """``wgmma`` (``wgmma.fence``: registers written by threads, then read by wgmma) or
    ``proxy_async`` (``fence.proxy.async``: shared memory written by threads, then read by
    TMA or wgmma)."""

    WGMMA = "wgmma"
    PROXY_ASYNC = "proxy_async"


class TurnKind(Tag):
    """A ping-pong turn op: ``take`` the Tensor Core turn (``bar.sync``) or ``pass`` it to
    the next warpgroup (``bar.arrive``)."""

    TAKE = "take"
    PASS = "pass"
