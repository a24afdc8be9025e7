"""The state the concurrent interpreter (:mod:`cypressc.ir.concurrent`) keeps of one thread
block, and the race checks on shared and register memory.

A :class:`Finding` is what a schedule found (raised as :class:`ScheduleFailure`); an mbarrier
stage is a :class:`Bar`, a shared buffer (stage) a :class:`Region` with its last writer and
its readers since, a role instance a :class:`Thread`.  :class:`RaceChecks` flags a read of a
stage before its TMA completed or before the reader observed the full-barrier phase that
TMA completed, and an overwrite of a stage whose earlier reader is still in flight or whose
release (an arrival) the writer has not observed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.analysis import dim_procs
from cypressc.ir.kinds import Role
from cypressc.ir.printer import fmt_expr
from cypressc.ir.shapes import static
from cypressc.ir.subst import walk_ops
from cypressc.lang.kinds import Mem, PartKind, Proc

__all__ = [
    "Finding",
    "ScheduleFailure",
    "op_label",
    "Bar",
    "Region",
    "Thread",
    "RaceChecks",
    "BLOCK",
    "WG",
    "alias_groups",
]

BLOCK, WG = Proc.BLOCK, Proc.WARPGROUP


@dataclass(frozen=True)
class Finding:
    """What a schedule found: ``kind`` is ``deadlock``, ``race`` or ``mismatch``; ``event``
    the IR event (or barrier) the finding is located at; ``message`` the details."""

    kind: str
    event: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind} at {self.event}: {self.message}"


class ScheduleFailure(Exception):
    """Raised inside the interpreter to stop a schedule at its first :class:`Finding`."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(str(finding))
        self.finding = finding


def op_label(op, names: dict | None = None) -> str:
    """How a finding names an op: its printed event (``%e5``) or the sync op and barrier."""
    if isinstance(op, (N.Copy, N.Call, N.For)):
        return (names or {}).get(op.ev, "%" + op.ev)
    if isinstance(op, (S.Wait, S.Arrive, S.ArriveExpectTx)):
        kw = {S.Wait: "wait", S.Arrive: "arrive", S.ArriveExpectTx: "arrive_expect_tx"}[type(op)]
        return f"{kw} %{op.bar}[{fmt_expr(op.stage)}]"
    if isinstance(op, S.WaitGroup):
        return f"wait_group {op.unit} {op.pending}"
    if isinstance(op, S.BarSync):
        return f"bar_sync {fmt_expr(op.id)}, {op.threads}"
    if isinstance(op, S.Turn):
        return f"turn {op.kind} {fmt_expr(op.id)}, {op.threads}"
    return {
        S.CommitGroup: lambda: f"commit_group {op.unit}",
        S.Fence: lambda: f"fence {op.kind}",
        S.SyncWarp: lambda: "syncwarp",
    }.get(type(op), lambda: type(op).__name__)()


@dataclass(eq=False)
class Bar:
    """One stage of an mbarrier: ``count`` arrivals complete a phase once ``tx`` (pending
    transaction bytes) is back to zero."""

    count: int
    arrivals: int = 0
    tx: int = 0
    phase: int = 0  # phases completed so far


@dataclass(eq=False)
class Region:
    """A shared buffer (stage): its last writer and its readers since that write."""

    writer: dict | None = None
    readers: list[dict] = field(default_factory=list)


@dataclass(eq=False)
class Thread:
    """One role instance (the producer, or consumer warpgroup ``wg``) as a thread of control:
    its generator, what blocks it, the barrier phases it observed, its open and committed
    wgmma / bulk groups, and the writes it has not fenced yet."""

    name: str
    role: Role
    wg: int
    gen: object = None
    ready: object = None  # callable -> bool while blocked
    pos: str = "start"
    tile: int = 0  # the tile of a persistent block it runs (run_block with several blocks)
    done: bool = False
    observed: dict = field(default_factory=dict)  # (bar, stage) -> phases observed complete
    open_mma: list = field(default_factory=list)
    mma_groups: list = field(default_factory=list)
    open_bulk: list = field(default_factory=list)
    bulk_groups: list = field(default_factory=list)
    dirty: set = field(default_factory=set)  # shared regions written by threads, unfenced
    unfenced_regs: set = field(default_factory=set)


def alias_groups(m: N.Module) -> dict[str, tuple[tuple[str, int | None], ...]]:
    """Tensors resource allocation let share bytes (``m.resources.war``), one-stage ones: each
    pair is a region of the interpreter, and a tensor touches the region of every pair it is
    in (FlashAttention-3's peeled K tile under both its last V tile and the staged O tile) —
    two tensors that each share bytes with a third but not with each other never meet.
    tensor -> ((the pair's region name, the warpgroup count of its per-warpgroup member or
    None), ...).  Pipeline stages sharing bytes with another tensor are not modelled."""
    res = m.resources
    if res is None:
        return {}
    allocs = {o.name: o for o in walk_ops(m.body) if isinstance(o, N.Alloc)}
    out: dict[str, tuple[tuple[str, int | None], ...]] = {}
    for pair in res.war:
        if any(x not in allocs or res.smem[x].stages != 1 for x in pair):
            continue
        wgs = next((static(d.extent) for x in pair for d in allocs[x].dims if d.proc == WG), None)
        for x in pair:
            out[x] = out.get(x, ()) + (("|".join(sorted(pair)), wgs),)
    return out


class RaceChecks:
    """Memory tracking of the interpreter: the shared/register region a view touches and the
    checks of each read and overwrite of a shared stage.  The interpreter sets ``vi`` (the
    sequential interpreter), ``sym``, ``names`` (event -> printed name), ``regions``, ``alias``
    (:func:`alias_groups`) and ``tiles`` (the block indices of the tiles it runs: several share
    one block's memory)."""

    def fail(self, kind: str, op, msg: str):
        raise ScheduleFailure(
            Finding(kind, op_label(op, self.names) if not isinstance(op, str) else op, msg)
        )

    def region(self, v: N.View, scope, env) -> tuple[str, tuple] | None:
        root = self.sym.root(v)
        alloc = self.sym.allocs[root]
        if alloc.mem not in (Mem.SHARED, Mem.REGISTER):
            return None
        stage = None
        for p in self.sym.chain(v):
            part = self.sym.parts[p.partition]
            if part.kind == PartKind.SLICES and isinstance(part.base, N.TRef):
                stage = int(self.vi.expr(p.idx[0], scope, env))
        # the tiles of one persistent block share its shared memory and registers
        procs = (WG,) if len(self.tiles) > 1 else (BLOCK, WG)
        key = tuple(env.get(p) for p in dim_procs(alloc.dims) if p.proc in procs)
        return alloc.mem, (root, key, stage)

    def regions_of(self, v: N.View, scope, env) -> list[tuple[str, tuple]]:
        """The regions a view touches: :meth:`region`'s one, or for a tensor that shares its
        bytes with others (``alias``, from resource allocation's ``war`` pairs of one-stage
        tensors) the slices it covers of each pair's common bytes — a per-warpgroup tensor its
        own warpgroup's slice, a block-wide one every warpgroup's slice."""
        reg = self.region(v, scope, env)
        if reg is None:
            return []
        mem, (root, key, stage) = reg
        pairs = self.alias.get(root, ()) if stage is None else ()
        if not pairs:
            return [reg]
        alloc = self.sym.allocs[root]
        blk = (
            tuple(env.get(p) for p in dim_procs(alloc.dims) if p.proc == BLOCK)
            if len(self.tiles) <= 1
            else ()
        )
        mine = tuple(env.get(p) for p in dim_procs(alloc.dims) if p.proc == WG)
        out = []
        for canon, wgs in pairs:
            slices = [mine] if mine else [(i,) for i in range(wgs or 1)]
            out += [(mem, (canon, blk + sl, None)) for sl in slices]
        return out

    def check_read(self, t: Thread, op, key, retired: bool) -> dict:
        r = self.regions.setdefault(key, Region())
        w = r.writer
        if w is not None and w["kind"] == "tma":
            if not w["done"]:
                self.fail(
                    "race",
                    op,
                    f"reads %{key[0]}{self._st(key)} while the TMA {w['op']} writing it "
                    f"is in flight ({t.name})",
                )
            bar = w["bar"]
            if t.observed.get(bar, 0) <= w["phase"]:
                self.fail(
                    "race",
                    op,
                    f"reads %{key[0]}{self._st(key)} without observing phase {w['phase']} of "
                    f"%{bar[0]}[{bar[1]}] that its TMA {w['op']} completed ({t.name})",
                )
        rec = {"thread": t, "op": op_label(op, self.names), "retired": retired, "tokens": set()}
        r.readers.append(rec)
        return rec

    @staticmethod
    def _st(key) -> str:
        return f"[stage {key[2]}]" if key[2] is not None else ""

    def check_overwrite(self, t: Thread, op, key) -> Region:
        r = self.regions.setdefault(key, Region())
        if r.writer is not None and r.writer["kind"] == "tma" and not r.writer["done"]:
            self.fail(
                "race",
                op,
                f"TMA into %{key[0]}{self._st(key)} while TMA {r.writer['op']} into it is "
                "in flight",
            )
        for rd in r.readers:
            if rd["thread"] is t and rd["retired"]:  # program order covers a finished own read
                continue
            if not rd["retired"]:
                self.fail(
                    "race",
                    op,
                    f"overwrites %{key[0]}{self._st(key)} while {rd['op']} "
                    f"({rd['thread'].name}) may still read it",
                )
            if not any(t.observed.get(b, 0) > ph for b, ph in rd["tokens"]):
                self.fail(
                    "race",
                    op,
                    f"overwrites %{key[0]}{self._st(key)} before the release of "
                    f"{rd['op']} ({rd['thread'].name}) was observed",
                )
        r.readers = []
        return r
