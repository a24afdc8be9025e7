"""Vector clocks of one thread block's run in the concurrent interpreter: the recorder behind
:mod:`cypressc.ir.happens_before` (which explains the model: agents, releases, acquires and the
accesses each records).  :class:`cypressc.ir.concurrent._Concurrent` calls its ``on_*`` hooks;
the first unordered conflicting pair raises the interpreter's race finding."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cypressc.ir import nodes as N
from cypressc.ir.analysis import dim_procs, proc_names
from cypressc.lang.intrinsics import DTYPE_BYTES
from cypressc.lang.kinds import Mem, Proc

__all__ = ["HappensBefore", "Access"]

_LANES = {Proc.WARP, Proc.THREAD}


@dataclass(eq=False)
class Access:
    """One recorded access: ``agent`` at clock ``clock`` touched ``elems`` (flat indices into
    the location's array; None = all of it)."""

    agent: int
    clock: int
    write: bool
    elems: np.ndarray | None
    label: str
    lo: int = 0
    hi: int = 0
    reduce: bool = False  # a copy.add: it conflicts with reads and writes, not with reductions


@dataclass(eq=False)
class _Agent:
    name: str
    id: int
    vc: dict = field(default_factory=dict)

    @property
    def clock(self) -> int:
        return self.vc[self.id]


class HappensBefore:
    """Vector clocks of one block's run in the concurrent interpreter ``ci`` (which calls
    the ``on_*`` hooks); the first unordered conflicting pair raises ``ci``'s race finding."""

    def __init__(self, ci) -> None:
        self.ci = ci
        self.agents: dict[int, _Agent] = {}
        self.thread_agent: dict[int, _Agent] = {}
        self.phases: dict[tuple, dict] = {}  # (barrier, stage, phase) -> released clocks
        self.named: dict[tuple, dict] = {}  # (named barrier id, generation) -> released clocks
        self.locs: dict[tuple, list[Access]] = {}
        self.shared_bytes = {
            x for pair in (ci.m.resources.war if ci.m.resources is not None else ()) for x in pair
        }
        self.mma_chain: dict[int, list] = {}  # thread -> its wgmma agents and their registers

    # -- agents and clocks ----------------------------------------------------------------
    def _new(self, name: str, vc: dict | None = None) -> _Agent:
        a = _Agent(name, len(self.agents), dict(vc or {}))
        a.vc[a.id] = 1
        self.agents[a.id] = a
        return a

    def thread(self, t) -> _Agent:
        a = self.thread_agent.get(id(t))
        if a is None:
            a = self.thread_agent[id(t)] = self._new(t.name)
        return a

    @staticmethod
    def _join(into: dict, vc: dict) -> None:
        for k, v in vc.items():
            if into.get(k, 0) < v:
                into[k] = v

    def _release(self, a: _Agent, into: dict) -> None:
        self._join(into, a.vc)
        a.vc[a.id] += 1  # what the agent does next is not part of this release

    # -- synchronization hooks ----------------------------------------------------------------
    def on_arrive(self, t, bar: tuple, phase: int) -> None:
        self._release(self.thread(t), self.phases.setdefault((*bar, phase), {}))

    def on_wait(self, t, bar: tuple, completed: int) -> None:
        if completed > 0:
            self._join(self.thread(t).vc, self.phases.get((*bar, completed - 1), {}))

    def on_named_arrive(self, t, key: tuple) -> None:
        self._release(self.thread(t), self.named.setdefault(key, {}))

    def on_named_pass(self, t, key: tuple) -> None:
        self._join(self.thread(t).vc, self.named.get(key, {}))

    def on_issue(self, t, job: dict, accesses) -> None:
        """An asynchronous operation issued by ``t``: its own agent, with ``t``'s past.  The
        wgmmas one warpgroup issues on the same accumulator registers run in issue order
        (PTX: no fence is needed between them), so a wgmma also has the past of the ones
        before it on its registers."""
        a = self._new(f"{job.get('op', 'wgmma')} ({t.name})", self.thread(t).vc)
        job["hb"] = a
        regs = job.get("regs")
        if regs:
            for prev, prev_regs in self.mma_chain.get(id(t), []):
                if prev_regs & regs:
                    self._join(a.vc, prev.vc)
            self.mma_chain.setdefault(id(t), []).append((a, frozenset(regs)))
        for v, scope, env, write, label, *red in accesses:
            self.access(a, v, scope, env, write, label, reduce=bool(red and red[0]))

    def on_complete_tma(self, job: dict, bar: tuple, phase: int) -> None:
        self._join(self.phases.setdefault((*bar, phase), {}), job["hb"].vc)

    def on_retire(self, t, job: dict) -> None:
        if "hb" in job:
            self._join(self.thread(t).vc, job["hb"].vc)

    # -- accesses -------------------------------------------------------------------------------
    def location(
        self, v: N.View, scope, env
    ) -> tuple[tuple, np.ndarray | None, tuple[int, int] | None]:
        """The location a view touches and, in it, the flat indices of its elements, or
        (None, a byte interval) for a tensor sharing bytes with another, or (None, None) for
        the whole location.  A view into a fragment of
        the warpgroup's lanes (a piece indexed by a warp or lane index) stands for the
        union over the lanes: the piece's base."""
        ci = self.ci
        root = ci.sym.root(v)
        alloc = ci.sym.allocs[root]
        key = tuple(
            env.get(p) for p in dim_procs(alloc.dims) if p.proc != Proc.BLOCK or len(ci.tiles) <= 1
        )
        if alloc.mem == Mem.REGISTER:
            wg = tuple(env.get(p) for p in dim_procs(alloc.dims) if p.proc == Proc.WARPGROUP)
            return (Mem.REGISTER, root, wg), None, None
        for piece in reversed(ci.sym.chain(v)):  # from the root outwards
            if any(proc_names(i) & _LANES for i in piece.idx):
                v = ci.sym.parts[piece.partition].base
                break
        view = ci.vi.view(v, scope, env)
        idx, _ = view.cells()
        flat = (
            np.unique(np.ravel_multi_index(idx, view.arr.shape))
            if idx
            else np.zeros(0, dtype=np.int64)
        )
        if root in self.shared_bytes and len(flat):
            return ("SMEM",), None, self._bytes(root, env, view.arr, flat)
        return (alloc.mem, root, key), flat, None

    def _bytes(self, root: str, env: dict, arr: np.ndarray, flat: np.ndarray) -> tuple[int, int]:
        """The byte interval of the block's shared memory that elements ``flat`` of a tensor
        sharing bytes with another lie in, to the stage (of the warpgroup's replica): the
        layout inside a stage (swizzles, boxes) is the backend's."""
        slot = self.ci.m.resources.smem[root]
        alloc = self.ci.sym.allocs[root]
        wg = next((env.get(p, 0) for p in dim_procs(alloc.dims) if p.proc == Proc.WARPGROUP), 0)
        stage = arr.size // max(1, slot.stages)
        isz = DTYPE_BYTES[alloc.dtype]
        base = slot.offset + wg * arr.size * isz
        return (
            base + int(flat[0]) // stage * stage * isz,
            base + (int(flat[-1]) // stage + 1) * stage * isz - 1,
        )

    def access(
        self, a: _Agent, v: N.View, scope, env, write: bool, label: str, reduce: bool = False
    ) -> None:
        """Record an access of ``a`` (``reduce``: a ``copy.add`` write, which commutes with
        other reductions) and fail on an earlier conflicting one not in its past."""
        loc, elems, interval = self.location(v, scope, env)
        if elems is not None and not len(elems):
            return
        if elems is not None:
            lo, hi = int(elems[0]), int(elems[-1])
        else:
            lo, hi = interval or (0, 1 << 62)
        new = Access(a.id, a.clock, write, elems, label, lo, hi, reduce)
        recs = self.locs.setdefault(loc, [])
        keep = []
        for r in recs:
            if (
                r.agent == a.id
                or not (write or r.write)
                or (reduce and r.reduce)
                or r.hi < lo
                or hi < r.lo
            ):
                keep.append(r)
                continue
            if r.elems is not None and elems is not None and not np.isin(r.elems, elems).any():
                keep.append(r)
                continue
            if r.clock > a.vc.get(r.agent, 0):
                what = "reduction" if reduce else "write" if write else "read"
                then = "reduction" if r.reduce else "write" if r.write else "read"
                self.ci.fail(
                    "race",
                    label,
                    f"its {what} of %{self.ci.sym.root(v)} is not ordered after the {then} by "
                    f"{r.label} ({self.agents[r.agent].name}): no chain of "
                    "synchronization leads from one to the other",
                )
            # an earlier access this write covers and is ordered after: later accesses that are
            # ordered after this write are ordered after it too (not for a reduction: a later
            # reduction need not be ordered after this one, so it must meet `r` itself)
            if (
                write
                and not reduce
                and (
                    (elems is None and lo <= r.lo and r.hi <= hi)
                    or (elems is not None and r.elems is not None and np.isin(r.elems, elems).all())
                )
            ):
                continue
            keep.append(r)
        keep.append(new)
        self.locs[loc] = keep

    def thread_access(
        self, t, v: N.View, scope, env, write: bool, label: str, reduce: bool = False
    ) -> None:
        self.access(self.thread(t), v, scope, env, write, label, reduce)
