"""Synchronization ops of the event IR (Cypress paper §4.2.6: "lowering events in the IR
onto hardware-specific synchronization primitives").

``sync-insertion`` (:mod:`cypressc.passes.sync_insertion`) places these ops in the blocks
of the warp-specialized IR, next to the copies and calls whose event edges they realize.
They are small frozen value types, like the rest of the IR (:mod:`cypressc.ir.nodes`)::

    Edge    = (src: event, dst: event | "", hazard, tensor, via, distance)
    Guard   = (a: IExpr) >= (b: IExpr)
    BarIdx  = (bar, stage: IExpr)                      -- one stage of an mbarrier array
    SyncOp  = MBarrier(name, kind, stages, count, arrive_role, wait_role, channel: event*)
            | ArriveExpectTx(bar, stage, bytes, role)  -- the producer's arrival + TMA bytes
            | Wait(bar, stage, parity, role)           -- try_wait.parity on one stage
            | Arrive(bar, stage, role, when: Guard?, cluster)
                                                       -- a consumer's release of one stage
                                                       -- (in every block of the cluster)
            | CommitGroup(unit, role, events)          -- wgmma / bulk (TMA store) group
            | WaitGroup(unit, pending, role)           -- wait until <= pending groups in flight
            | SyncWarp(role, when: Guard?)             -- __syncwarp
            | BarSync(id: IExpr, threads, role)        -- named barrier (bar.sync id, threads)
            | Turn(kind, id: IExpr, threads, role, when: Guard?)
                                                       -- ping-pong: take (bar.sync) or pass
                                                       -- (bar.arrive) the Tensor Core turn
            | Fence(kind, role)                        -- wgmma.fence / fence.proxy.async

Every op has ``dims`` (the processor instances that execute it, as for async ops: the
BLOCK dimensions, then e.g. ``(2, WARPGROUP)`` for one arrival per consumer warpgroup)
and ``edges``: the event edges it comes from, which the printer shows as
``from %e3 -> %e5 (raw %A)``.  Roles, stage indices and phase parities are explicit, so an
interpreter can run each role as its own thread of control.

Phases follow the mbarrier convention: a wait with parity ``p`` returns once the phase
of parity ``p`` has completed; a *full* barrier's i-th use waits parity ``i % 2``, an
*empty* barrier's producer waits parity ``(i + 1) % 2`` (its first wait passes at once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from cypressc.ir import nodes as N
from cypressc.ir.kinds import BarrierKind, FenceKind, GroupUnit, Hazard, Role, TurnKind, Via

__all__ = [
    "Edge",
    "Guard",
    "BarIdx",
    "MBarrier",
    "ArriveExpectTx",
    "Wait",
    "Arrive",
    "CommitGroup",
    "WaitGroup",
    "SyncWarp",
    "BarSync",
    "Turn",
    "Fence",
    "SyncOp",
    "SYNC_OPS",
    "HAZARDS",
    "VIAS",
    "once_per_tile",
    "carried_turns",
]

# "turn": not a data hazard but the Tensor Core as a resource the consumer warpgroups take
# turns on (a mapping's `pingpong`): warpgroup w's run of wgmma issues after w - 1's
HAZARDS = tuple(Hazard)
TURN_KINDS = tuple(TurnKind)
# named barrier ids the kernel may use: 1..7 (cypress::named_sync goes through CUTLASS's
# NamedBarrier, which adds the 8 ids it reserves; 0 is __syncthreads)
NAMED_BARRIERS = 7
VIAS = tuple(Via)
BARRIER_KINDS = tuple(BarrierKind)
GROUP_UNITS = tuple(GroupUnit)
FENCE_KINDS = tuple(FenceKind)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class Edge:
    """One event edge a sync op realizes.

    ``src`` is the producing event and ``dst`` the consuming one ("" for the end of the
    block program); ``hazard`` is what the edge protects (``raw``/``war``/``waw`` on
    ``tensor``, or ``end``); ``via`` how the edge reaches ``dst`` (``same`` iteration,
    ``entry`` into a loop, ``after`` a loop, ``carried`` ``distance`` iterations later,
    ``tile``: into the block's next tile; ``ring``: a stage ring's next fill of a stage,
    D positions on, where the ring has members outside its loop).
    """

    src: str
    dst: str
    hazard: Hazard
    tensor: str = ""
    via: Via = Via.SAME
    distance: int = 0

    def __post_init__(self) -> None:
        _check(self.hazard in HAZARDS, f"edge hazard {self.hazard!r}")
        _check(self.via in VIAS, f"edge via {self.via!r}")
        _check(self.distance >= 0, "negative edge distance")


@dataclass(frozen=True, slots=True)
class Guard:
    """``a >= b``: the op runs only in the iterations where this holds."""

    a: N.IExpr
    b: N.IExpr


@dataclass(frozen=True, slots=True)
class BarIdx:
    """Stage ``stage`` of mbarrier array ``bar`` (a copy's completion barrier)."""

    bar: str
    stage: N.IExpr


@dataclass(frozen=True, slots=True)
class MBarrier:
    """``%name = mbarrier[stages] arrivals count``: an array of ``stages`` shared-memory
    barriers, each completing a phase after ``count`` arrivals (a *full* barrier also
    after its expected transaction bytes).  The roles of ``arrive_role`` arrive and those
    of ``wait_role`` wait (one or more each, printed ``@consumer,producer``); ``channel`` lists the TMA copies whose stages it guards.  ``lag`` is the phases
    the waits trail the arrivals: 1 for an *empty* barrier (its first wait passes: the
    stage starts free), 0 for a *full* one and for an empty one whose copy waits for a
    release earlier in the same tile (shared bytes, ``same_tile``)."""

    name: str
    kind: BarrierKind
    stages: int
    count: int
    arrive_role: tuple[Role, ...]  # the roles that arrive (printed joined by ",")
    wait_role: tuple[Role, ...]  # the roles that wait
    channel: tuple[str, ...]
    edges: tuple[Edge, ...] = ()
    dims: tuple[N.Dim, ...] = ()
    same_tile: bool = False

    @property
    def lag(self) -> int:
        """Phases the waits on this barrier trail its completions (see the class docstring)."""
        return 1 if self.kind == BarrierKind.EMPTY and not self.same_tile else 0

    def __post_init__(self) -> None:
        _check(self.kind in BARRIER_KINDS, f"mbarrier kind {self.kind!r}")
        _check(self.stages >= 1 and self.count >= 1, "mbarrier with no stage or no arrival")
        for roles in (self.arrive_role, self.wait_role):  # a bare str would print c,o,n,…
            _check(isinstance(roles, tuple) and len(roles) > 0, f"mbarrier roles {roles!r}")
        _check(
            not self.same_tile or (self.kind == BarrierKind.EMPTY and self.stages == 1),
            "a same-tile mbarrier is a one-stage empty barrier",
        )


@dataclass(frozen=True, slots=True)
class ArriveExpectTx:
    """The producer's arrival on ``bar[stage]`` announcing ``bytes`` of TMA transactions."""

    bar: str
    stage: N.IExpr
    bytes: int
    role: Role
    edges: tuple[Edge, ...] = ()
    dims: tuple[N.Dim, ...] = ()

    def __post_init__(self) -> None:
        _check(self.bytes > 0, "arrive_expect_tx of no bytes")


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait until the phase of parity ``parity`` of ``bar[stage]`` has completed."""

    bar: str
    stage: N.IExpr
    parity: N.IExpr
    role: Role
    edges: tuple[Edge, ...] = ()
    dims: tuple[N.Dim, ...] = ()


@dataclass(frozen=True, slots=True)
class Arrive:
    """One arrival per instance of ``dims`` on ``bar[stage]`` (where ``when`` holds);
    ``cluster`` (``arrive.cluster``): on ``bar[stage]`` of every block of the thread-block
    cluster, the release of a stage that a multicast copy of another block fills."""

    bar: str
    stage: N.IExpr
    role: Role
    when: Guard | None = None
    edges: tuple[Edge, ...] = ()
    dims: tuple[N.Dim, ...] = ()
    cluster: bool = False


@dataclass(frozen=True, slots=True)
class CommitGroup:
    """Close the group of async operations issued so far (``wgmma.commit_group`` for
    ``unit="wgmma"``, ``cp.async.bulk.commit_group`` for TMA stores, ``unit="bulk"``);
    ``events`` are the IR events in the group."""

    unit: GroupUnit
    role: Role
    events: tuple[str, ...]
    dims: tuple[N.Dim, ...] = ()

    def __post_init__(self) -> None:
        _check(self.unit in GROUP_UNITS, f"group unit {self.unit!r}")


@dataclass(frozen=True, slots=True)
class WaitGroup:
    """Wait until at most ``pending`` committed groups of ``unit`` are still in flight."""

    unit: GroupUnit
    pending: int
    role: Role
    edges: tuple[Edge, ...] = ()
    dims: tuple[N.Dim, ...] = ()

    def __post_init__(self) -> None:
        _check(self.unit in GROUP_UNITS, f"group unit {self.unit!r}")
        _check(self.pending >= 0, "negative wait_group")


@dataclass(frozen=True, slots=True)
class SyncWarp:
    """``__syncwarp()``: the threads of each warp in ``dims`` meet (a THREAD broadcast);
    only where ``when`` holds (the guard of the arrival it orders the lanes before)."""

    role: Role
    edges: tuple[Edge, ...] = ()
    dims: tuple[N.Dim, ...] = ()
    when: Guard | None = None


@dataclass(frozen=True, slots=True)
class BarSync:
    """Named barrier ``bar.sync id, threads`` (a WARP or WARPGROUP broadcast); ``id`` may
    depend on the warpgroup index (one barrier per warpgroup)."""

    id: N.IExpr
    threads: int
    role: Role
    edges: tuple[Edge, ...] = ()
    dims: tuple[N.Dim, ...] = ()

    def __post_init__(self) -> None:
        _check(self.threads > 0 and self.threads % 32 == 0, "named barrier thread count")


@dataclass(frozen=True, slots=True)
class Turn:
    """Ping-pong between consumer warpgroups (FlashAttention-3's warp scheduler barriers): a
    run of wgmma issues of warpgroup ``w`` starts once warpgroup ``w - 1`` has issued its
    run (warpgroup 0: once the last one issued its previous run), so one warpgroup's
    wgmmas run on the Tensor Core while the others do their thread code.

    ``take`` waits on named barrier ``id`` (``bar.sync id, threads``: the warpgroup's own
    barrier, ``threads`` = two warpgroups), ``pass`` arrives on the next warpgroup's
    (``bar.arrive``, no wait); ``when`` limits it to some warpgroups (the last warpgroup
    passes warpgroup 0 the tile's first turn at the start of the tile and nothing after the
    tile's last run, so a tile leaves every turn barrier empty; a persistent block carries
    that first pass to the end of the tile before: :func:`carried_turns`).  The edges are
    ``turn`` edges: the run's last wgmma (of the previous warpgroup) to its first."""

    kind: TurnKind
    id: N.IExpr
    threads: int
    role: Role
    when: Guard | None = None
    edges: tuple[Edge, ...] = ()
    dims: tuple[N.Dim, ...] = ()

    def __post_init__(self) -> None:
        _check(self.kind in TURN_KINDS, f"turn kind {self.kind!r}")
        _check(self.threads > 0 and self.threads % 32 == 0, "named barrier thread count")


@dataclass(frozen=True, slots=True)
class Fence:
    """``wgmma.fence`` (registers written by threads, then read by wgmma) or
    ``fence.proxy.async`` (shared memory written by threads, then read by TMA/wgmma)."""

    kind: FenceKind
    role: Role
    edges: tuple[Edge, ...] = ()
    dims: tuple[N.Dim, ...] = ()

    def __post_init__(self) -> None:
        _check(self.kind in FENCE_KINDS, f"fence kind {self.kind!r}")


SyncOp = Union[
    MBarrier, ArriveExpectTx, Wait, Arrive, CommitGroup, WaitGroup, SyncWarp, BarSync, Turn, Fence
]
SYNC_OPS = (
    MBarrier,
    ArriveExpectTx,
    Wait,
    Arrive,
    CommitGroup,
    WaitGroup,
    SyncWarp,
    BarSync,
    Turn,
    Fence,
)


def once_per_tile(body: N.Block) -> set[str]:
    """The mbarriers (names) of the copies outside the block program's main loops, declared
    in ``body`` (the block program's top level): each completes one phase per tile, so a
    persistent block's tile t waits them with the IR's parity flipped when t is odd."""
    once = {o.ev for o in body.ops if isinstance(o, N.Copy)}
    return {o.name for o in body.ops if isinstance(o, MBarrier) and set(o.channel) <= once}


def carried_turns(ops) -> tuple[Turn, Turn] | None:
    """The two turn ops among the top-level ``ops`` of a block program with ping-pong that a
    persistent block carries from one tile to the next: ``(first, last)``, the tile's first
    turn, passed by the last warpgroup at the start of the tile (its edges come from the
    start), and the pass after the tile's last run, which the last warpgroup skips.  A block
    that goes on to another tile runs ``first`` once before its first tile and then right
    after ``last`` of each tile but its last (the CUDA lowering,
    :func:`cypressc.backend.sync_lower.carry_turns`; the concurrent interpreter runs the
    tiles of a persistent block the same way): the ring of turns goes on without waiting for
    the last warpgroup's epilogue.  None without turn ops; ValueError when the turns do not
    have the shape ping-pong gives them (:mod:`cypressc.passes.sync_turns`)."""
    passes = [op for op in ops if isinstance(op, Turn) and op.kind == TurnKind.PASS]
    firsts = [op for op in passes if op.edges and all(not e.src for e in op.edges)]
    if not firsts:
        return None
    lasts = [op for op in passes if op.when is not None and all(op is not f for f in firsts)]
    if len(firsts) != 1 or firsts[0].when is None or len(lasts) != 1:
        raise ValueError(
            "ping-pong: the tile's turns are not one guarded first pass from the start and one "
            "guarded pass after the tile's last run"
        )
    return firsts[0], lasts[0]
