"""A concurrent interpreter for the synchronized IR (issue #10 item 3; paper §4.2.6).

After ``sync-insertion`` every event edge is an explicit sync op (:mod:`cypressc.ir.sync`).
:func:`run_block` executes one thread block of such a module the way the GPU would:
each *role instance* — the producer, and each consumer warpgroup (``WARPGROUP`` index) —
is its own thread of control (a Python generator that yields at every sync op and
asynchronous issue), and a seeded scheduler interleaves them at random.  The warps and
lanes of one warpgroup run in lockstep (an op ``per [(2, WARPGROUP), (4, WARP), ...]``
runs all of that warpgroup's instances at once; an op without a ``WARPGROUP`` dimension
in a consumer is executed by warpgroup 0, the elected one).

Hardware semantics modelled (PTX ISA, mbarrier / wgmma / cp.async.bulk):

* an mbarrier stage completes a phase once ``count`` arrivals were made and its pending
  transaction bytes are back to zero; ``wait parity p`` blocks until the phase of parity
  ``p`` has completed; barriers are initialised once per block;
* a TMA load (``copy ... on %bar[s]``) completes at a random later scheduler step: only
  then is its destination written and its bytes subtracted from the barrier;
* a wgmma is issued asynchronously; its accumulator update lands when a ``wait_group``
  retires its (committed) group; TMA stores (``bulk`` groups) complete at a random later
  step, ``wait_group bulk N`` blocks until at most N groups are in flight;
* ``bar_sync id, threads`` blocks until ``threads / 128`` warpgroups arrived;
  ``syncwarp`` is a no-op (lanes run in lockstep); fences clear the proxy/register marks
  below.

Findings (:class:`Finding`), first one wins: **deadlock** (no thread can run, nothing in
flight; every thread's position), **race** — a shared stage read before the TMA writing
it completed or before the reader observed the full-barrier phase it completed; a TMA
issued into a stage whose earlier reader is still in flight or whose release (an
arrival) the producer has not observed; a register accumulator touched while a wgmma on
it is in flight; a wgmma on registers written by threads without ``fence wgmma``; a TMA
store of shared memory written by threads without ``fence proxy_async``; the block
exiting with a TMA store in flight — and **mismatch** (values differ from the sequential
interpreter, :mod:`cypressc.ir.interp`, which supplies the value semantics of copies and
leaf calls here).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import numpy as np

from cypressc.ir import interp as I
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.analysis import Symbols, dim_procs
from cypressc.ir.printer import _Printer, fmt_expr
from cypressc.lang.intrinsics import LEAF_FUNCTIONS, NUMPY_DTYPES

__all__ = ["Finding", "ScheduleFailure", "run_block", "block_ops"]

BLOCK, WG = "BLOCK", "WARPGROUP"


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


def _where(op, names: dict | None = None) -> str:
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
    return {S.CommitGroup: lambda: f"commit_group {op.unit}", S.Fence: lambda: f"fence {op.kind}",
            S.SyncWarp: lambda: "syncwarp"}.get(type(op), lambda: type(op).__name__)()


def block_ops(b: N.Block):
    """Every op of ``b``, pre-order, loop bodies included."""
    for op in b.ops:
        yield op
        if isinstance(op, (N.For, N.PFor)):
            yield from block_ops(op.body)


@dataclass(eq=False)
class _Bar:
    count: int
    arrivals: int = 0
    tx: int = 0
    phase: int = 0  # phases completed so far


@dataclass(eq=False)
class _Region:
    """A shared buffer (stage): its last writer and its readers since that write."""

    writer: dict | None = None
    readers: list[dict] = field(default_factory=list)


@dataclass(eq=False)
class _Thread:
    name: str
    role: str
    wg: int
    gen: object = None
    ready: object = None  # callable -> bool while blocked
    pos: str = "start"
    done: bool = False
    observed: dict = field(default_factory=dict)  # (bar, stage) -> phases observed complete
    open_mma: list = field(default_factory=list)
    mma_groups: list = field(default_factory=list)
    open_bulk: list = field(default_factory=list)
    bulk_groups: list = field(default_factory=list)
    dirty: set = field(default_factory=set)  # shared regions written by threads, unfenced
    unfenced_regs: set = field(default_factory=set)


class _Concurrent:
    def __init__(self, m: N.Module, sizes, arrays, block_env: dict, seed: int, values: bool) -> None:
        self.m, self.values, self.rng = m, values, random.Random(seed)
        self.vi = I._Interp(m, sizes, arrays, None)  # value semantics (views, leaf calls)
        self.sym = Symbols(m)
        pr = _Printer(None, m.body)  # the event names `explain` prints (%e1, %e2, ...)
        self.names = {ev: pr.ev(ev) for ev in list(pr.names)}
        self.roles: dict[str, str] = m.role_map()
        self.env0 = dict(block_env)
        self.bars: dict[tuple, _Bar] = {}
        self.regions: dict[tuple, _Region] = {}
        self.reg_pending: dict[tuple, int] = {}
        self.inflight: list[tuple] = []  # (kind, thread, payload) async completions
        self.named: dict[int, set] = {}
        self.named_gen: dict[int, int] = {}
        self.scopes: dict[tuple, I._Scope] = {}
        self._define(self.vi.root, m.body)
        nwg = 1
        for op in block_ops(m.body):
            for d in getattr(op, "dims", ()):
                if d.proc == WG:
                    nwg = max(nwg, int(self.vi.expr(d.extent, self.vi.root, self.env0)))
        producer = any(r == "producer" for r in self.roles.values()) or any(
            getattr(o, "role", "") == "producer" for o in block_ops(m.body))
        self.threads = ([_Thread("producer", "producer", 0)] if producer else []) + [
            _Thread(f"consumer wg{w}", "consumer", w) for w in range(nwg)]

    def fail(self, kind: str, op, msg: str):
        raise ScheduleFailure(Finding(kind, _where(op, self.names) if not isinstance(op, str) else op, msg))

    # -- walking the program, per thread --------------------------------------------
    def scope_for(self, parent: I._Scope, key: tuple, block: N.Block, var: str | None, k) -> I._Scope:
        sc = self.scopes.get((parent.uid,) + key)
        if sc is None:
            sc = I._Scope(parent)
            if var is not None:
                sc.vars[var] = k
            self._define(sc, block)
            self.scopes[(parent.uid,) + key] = sc
        return sc

    @staticmethod
    def _define(sc: I._Scope, block: N.Block) -> None:
        for op in block.ops:
            name = getattr(op, "name", None) or getattr(op, "ev", None)
            if name and not isinstance(op, S.SYNC_OPS):
                sc.defs[name] = op

    def role_of(self, op) -> str:
        if isinstance(op, S.SYNC_OPS):
            return op.role
        return self.roles.get(op.ev, "consumer")

    def walk(self, t: _Thread, b: N.Block, scope: I._Scope, where: str):
        for op in b.ops:
            if isinstance(op, (N.Alloc, N.Let, N.Partition)):
                continue
            if isinstance(op, S.MBarrier):
                st = op.stages
                for s in range(st):
                    self.bars.setdefault((op.name, s), _Bar(op.count))
                continue
            if isinstance(op, (N.For, N.PFor)):
                lo = int(self.vi.expr(op.lo, scope, self.env0))
                hi = int(self.vi.expr(op.hi, scope, self.env0))
                for k in range(lo, hi):
                    sc = self.scope_for(scope, (op.ev, k), op.body, op.var, k)
                    yield from self.walk(t, op.body, sc, f"{where}%{op.var}={k} ")
                continue
            if self.role_of(op) != t.role:
                continue
            envs = self.instances(t, op, scope)
            if not envs:
                continue
            t.pos = f"{_where(op, self.names)} ({where.strip() or 'outside loops'})"
            yield  # every sync op and async issue is a scheduling point
            yield from self.execute(t, op, scope, envs)

    def instances(self, t: _Thread, op, scope) -> list[dict]:
        dims = getattr(op, "dims", ())
        procs = dim_procs(dims)
        if t.role == "consumer" and not any(d.proc == WG for d in dims) and t.wg != 0:
            return []  # per-block op of the consumers: warpgroup 0 is the elected one
        if isinstance(op, (S.Arrive, S.SyncWarp)) and op.when is not None:
            if self.vi.expr(op.when.a, scope, self.env0) < self.vi.expr(op.when.b, scope, self.env0):
                return []
        free, fixed = [], dict(self.env0)
        for p, d in zip(procs, dims):
            if p.proc == BLOCK:
                continue
            if p.proc == WG:
                fixed[p] = t.wg
            else:
                free.append((p, range(int(self.vi.expr(d.extent, scope, self.env0)))))
        out = []
        combos = itertools.product(*[r for _, r in free])
        if not self.values and not isinstance(op, (S.Arrive, S.ArriveExpectTx, N.Copy)):
            combos = itertools.islice(combos, 1)  # the checks only need one instance's view
        for combo in combos:
            e = dict(fixed)
            e.update({p: i for (p, _), i in zip(free, combo)})
            out.append(e)
        return out

    # -- memory tracking ---------------------------------------------------------------
    def region(self, v: N.View, scope, env) -> tuple[str, tuple] | None:
        root = self.sym.root(v)
        alloc = self.sym.allocs[root]
        if alloc.mem not in ("SHARED", "REGISTER"):
            return None
        stage = None
        for p in self.sym.chain(v):
            part = self.sym.parts[p.partition]
            if part.kind == "slices" and isinstance(part.base, N.TRef):
                stage = int(self.vi.expr(p.idx[0], scope, env))
        key = tuple(env.get(p) for p in dim_procs(alloc.dims) if p.proc in (BLOCK, WG))
        return alloc.mem, (root, key, stage)

    def check_read(self, t: _Thread, op, key, retired: bool) -> dict:
        r = self.regions.setdefault(key, _Region())
        w = r.writer
        if w is not None and w["kind"] == "tma":
            if not w["done"]:
                self.fail("race", op, f"reads %{key[0]}{self._st(key)} while the TMA {w['op']} writing it "
                                      f"is in flight ({t.name})")
            bar = w["bar"]
            if t.observed.get(bar, 0) <= w["phase"]:
                self.fail("race", op, f"reads %{key[0]}{self._st(key)} without observing phase {w['phase']} of "
                                      f"%{bar[0]}[{bar[1]}] that its TMA {w['op']} completed ({t.name})")
        rec = {"thread": t, "op": _where(op, self.names), "retired": retired, "tokens": set()}
        r.readers.append(rec)
        return rec

    @staticmethod
    def _st(key) -> str:
        return f"[stage {key[2]}]" if key[2] is not None else ""

    def check_overwrite(self, t: _Thread, op, key) -> _Region:
        r = self.regions.setdefault(key, _Region())
        if r.writer is not None and r.writer["kind"] == "tma" and not r.writer["done"]:
            self.fail("race", op, f"TMA into %{key[0]}{self._st(key)} while TMA {r.writer['op']} into it is "
                                  "in flight")
        for rd in r.readers:
            if rd["thread"] is t and rd["retired"]:  # program order covers a finished own read
                continue
            if not rd["retired"]:
                self.fail("race", op, f"overwrites %{key[0]}{self._st(key)} while {rd['op']} "
                                      f"({rd['thread'].name}) may still read it")
            if not any(t.observed.get(b, 0) > ph for b, ph in rd["tokens"]):
                self.fail("race", op, f"overwrites %{key[0]}{self._st(key)} before the release of "
                                      f"{rd['op']} ({rd['thread'].name}) was observed")
        r.readers = []
        return r

    # -- executing one op -------------------------------------------------------------
    def execute(self, t: _Thread, op, scope, envs):
        vi = self.vi
        if isinstance(op, S.Wait):
            bar = (op.bar, int(vi.expr(op.stage, scope, envs[0])))
            par = int(vi.expr(op.parity, scope, envs[0])) % 2
            b = self.bars.get(bar) or self.fail("deadlock", op, f"%{op.bar} is not initialised")
            if b.phase % 2 == par:  # the phase of parity `par` has not completed yet
                t.ready = lambda: b.phase % 2 != par
                yield
            t.observed[bar] = max(t.observed.get(bar, 0), b.phase)
        elif isinstance(op, (S.Arrive, S.ArriveExpectTx)):
            for e in envs:
                bar = (op.bar, int(vi.expr(op.stage, scope, e)))
                b = self.bars[bar]
                if isinstance(op, S.ArriveExpectTx):
                    b.tx += op.bytes
                for r in self.regions.values():  # this thread's finished reads: released
                    for rd in r.readers:
                        if rd["thread"] is t and rd["retired"]:
                            rd["tokens"].add((bar, b.phase))
                self.arrive(op, bar, b, 1)
        elif isinstance(op, S.CommitGroup):
            if op.unit == "wgmma":
                t.mma_groups.append(t.open_mma)
                t.open_mma = []
            else:
                t.bulk_groups.append(t.open_bulk)
                t.open_bulk = []
        elif isinstance(op, S.WaitGroup):
            if op.unit == "wgmma":
                while len(t.mma_groups) > op.pending:
                    for job in t.mma_groups.pop(0):
                        self.retire_mma(job)
            else:
                live = lambda: sum(any(not j["done"] for j in g) for g in t.bulk_groups)  # noqa: E731
                if live() > op.pending:
                    t.ready = lambda: live() <= op.pending
                    yield
        elif isinstance(op, S.BarSync):
            bid = int(vi.expr(op.id, scope, envs[0]))
            need = max(1, op.threads // 128)
            arrived = self.named.setdefault(bid, set())
            gen = self.named_gen.get(bid, 0)
            arrived.add(t.name)
            if len(arrived) >= need:
                self.named[bid] = set()
                self.named_gen[bid] = gen + 1
            else:
                t.ready = lambda: self.named_gen.get(bid, 0) > gen
                yield
        elif isinstance(op, S.Fence):
            if op.kind == "wgmma":
                t.unfenced_regs.clear()
            else:
                t.dirty.clear()
        elif isinstance(op, S.SyncWarp):
            pass
        elif isinstance(op, N.Copy):
            self.copy(t, op, scope, envs)
        elif isinstance(op, N.Call):
            self.call(t, op, scope, envs)
        else:  # pragma: no cover - PFor inside a block is not produced by the passes
            self.fail("deadlock", op, f"unsupported op {type(op).__name__} in block code")

    def arrive(self, op, bar, b: _Bar, n: int) -> None:
        b.arrivals += n
        if b.arrivals > b.count:
            self.fail("race", op, f"%{bar[0]}[{bar[1]}] receives {b.arrivals} arrivals in one phase "
                                  f"(count {b.count})")
        self.settle(b)

    @staticmethod
    def settle(b: _Bar) -> None:
        if b.arrivals == b.count and b.tx == 0:
            b.phase += 1
            b.arrivals = 0

    def copy(self, t: _Thread, op: N.Copy, scope, envs) -> None:
        for e in envs:
            src, dst = self.region(op.src, scope, e), self.region(op.dst, scope, e)
            if op.bar is not None:  # TMA load: async, completes on the barrier
                bar = (op.bar.bar, int(self.vi.expr(op.bar.stage, scope, e)))
                r = self.check_overwrite(t, op, dst[1])
                nbytes = self._bytes(op.dst, scope, e)
                job = {"kind": "tma", "op": _where(op, self.names), "done": False, "bar": bar,
                       "phase": None, "bytes": nbytes, "run": (op, scope, e)}
                r.writer = job
                self.inflight.append(("tma", t, job))
            elif src is not None and src[0] == "SHARED" and dst is None:  # TMA store: bulk group
                if src[1] in t.dirty:
                    self.fail("race", op, f"TMA store reads %{src[1][0]} written by threads without "
                                          "fence proxy_async")
                rec = self.check_read(t, op, src[1], retired=False)
                job = {"kind": "bulk", "done": False, "run": (op, scope, e), "rec": rec}
                t.open_bulk.append(job)
                self.inflight.append(("bulk", t, job))
            else:
                if src is not None and src[0] == "SHARED":
                    self.check_read(t, op, src[1], retired=True)
                if dst is not None and dst[0] == "SHARED":
                    self.check_overwrite(t, op, dst[1]).writer = {"kind": "simt"}
                    t.dirty.add(dst[1])
                if self.values:
                    self.do_copy(op, scope, e)

    def _bytes(self, v: N.View, scope, env) -> int:
        shape = self.sym.shape(v)
        n = int(np.prod([int(self.vi.expr(x, scope, env)) for x in shape]))
        return n * np.dtype(NUMPY_DTYPES[self.sym.allocs[self.sym.root(v)].dtype]).itemsize

    def do_copy(self, op: N.Copy, scope, env) -> None:
        src, dst = self.vi.view(op.src, scope, env), self.vi.view(op.dst, scope, env)
        dst.write(src.read().reshape(dst.shape))

    def call(self, t: _Thread, op: N.Call, scope, envs) -> None:
        fn = LEAF_FUNCTIONS[op.fn]
        mma = op.fn == "warpgroup_mma"
        regs, recs = set(), []
        views = [(i, a, fn.operands[i] if i < len(fn.operands) else None) for i, a in enumerate(op.args)
                 if isinstance(a, (N.TRef, N.Piece))]
        for e in envs[:1] if mma else envs:  # a wgmma's shared operands are the same per warpgroup
            for i, a, rule in views:
                reg = self.region(a, scope, e)
                if reg is None:
                    continue
                mem, key = reg
                writes = rule is not None and rule.writes
                if mem == "REGISTER":
                    rkey = (key[0], t.wg)
                    if self.reg_pending.get(rkey, 0) and not mma:
                        self.fail("race", op, f"touches %{key[0]} while a wgmma on it is in flight "
                                              f"({t.name}: its group has not retired)")
                    if mma and rkey in t.unfenced_regs:
                        self.fail("race", op, f"wgmma on %{key[0]} written by threads without fence wgmma")
                    regs.add(rkey)
                elif mem == "SHARED":
                    if rule is None or rule.reads:
                        recs.append(self.check_read(t, op, key, retired=not mma))
                    if writes:
                        self.check_overwrite(t, op, key).writer = {"kind": "simt"}
                        t.dirty.add(key)
        if mma:
            for rk in regs:
                self.reg_pending[rk] = self.reg_pending.get(rk, 0) + 1
            t.open_mma.append({"run": (op, scope, envs), "regs": regs, "recs": recs})
            return
        for i, a, rule in views:
            if rule is not None and rule.writes and self.sym.allocs[self.sym.root(a)].mem == "REGISTER":
                t.unfenced_regs.add((self.sym.root(a), t.wg))
        if self.values:
            for e in envs:
                self.vi.call(op, scope, e)

    def retire_mma(self, job) -> None:
        op, scope, envs = job["run"]
        if self.values:
            self.vi.call_group(op, [(scope, e) for e in envs])
        for rk in job["regs"]:
            self.reg_pending[rk] -= 1
        for rec in job["recs"]:
            rec["retired"] = True

    def complete(self, kind: str, t: _Thread, job) -> None:
        op, scope, e = job["run"]
        if kind == "tma":
            b = self.bars[job["bar"]]
            job["phase"] = b.phase
            job["done"] = True
            if self.values:
                self.do_copy(op, scope, e)
            b.tx -= job["bytes"]
            self.settle(b)
        else:
            if self.values:
                self.do_copy(op, scope, e)
            job["done"] = True
            job["rec"]["retired"] = True

    # -- the scheduler ----------------------------------------------------------------
    def run(self) -> None:
        for t in self.threads:
            t.gen = self.walk(t, self.m.body, self.vi.root, "")
        while True:
            runnable = [t for t in self.threads if not t.done and (t.ready is None or t.ready())]
            choices = [("t", t) for t in runnable] + [("a", a) for a in self.inflight]
            if not choices:
                live = [t for t in self.threads if not t.done]
                if not live:
                    return
                pos = "; ".join(f"{t.name} blocked at {t.pos}" for t in live)
                self.fail("deadlock", live[0].pos.split(" (")[0], f"no thread can run: {pos}")
            kind, x = choices[self.rng.randrange(len(choices))]
            if kind == "a":
                self.inflight.remove(x)
                self.complete(x[0], x[1], x[2])
                continue
            x.ready = None
            try:
                next(x.gen)
            except StopIteration:
                x.done = True
                if x.open_mma or x.mma_groups:
                    self.fail("race", "end", f"{x.name} exits with wgmma groups that never retired")
                if any(not j["done"] for g in x.bulk_groups + [x.open_bulk] for j in g):
                    self.fail("race", "end", f"{x.name} exits while a TMA store still reads shared "
                                             "memory")


def run_block(m: N.Module, sizes: dict[str, int], arrays: dict[str, np.ndarray], block: dict,
              seed: int, values: bool = True) -> Finding | None:
    """Run one block (``block``: ``IProc`` → index, see
    :func:`cypressc.ir.schedule_check.grid_blocks`) of the
    synchronized module ``m`` under the random schedule ``seed``, in place on ``arrays``.

    Returns the first deadlock or race :class:`Finding`, or None.  With ``values=False``
    copies and leaf calls are not evaluated (only the synchronization is checked).
    """
    try:
        _Concurrent(m, sizes, arrays, block, seed, values).run()
    except ScheduleFailure as f:
        return f.finding
    return None
