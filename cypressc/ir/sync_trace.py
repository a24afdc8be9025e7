"""The sync verifier's run of one trip count (Cypress paper §4.2.6,
:mod:`cypressc.ir.sync_verify`): each role's program (its leaf ops and sync ops, in program
order) for that many iterations of every block-level loop, where each event instance sits
in it, and the **barriers** check of the run: declared barriers and stages in range, wait
parities by phase, arrival counts, whole phases at the end, releases as often as fills,
and ``arrive_expect_tx`` bytes equal to the bytes its copies land.
"""

from __future__ import annotations

from cypressc.diagnostics import VerifyError
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.hazard_deps import Dep, instances
from cypressc.ir.hazards import Program
from cypressc.ir.kinds import BarrierKind, Role, Via
from cypressc.ir.target import cluster_blocks
from cypressc.lang.kinds import Proc

__all__ = ["_Run"]


def _error(msg: str):
    return VerifyError(f"sync: {msg}")


def _inst(dims) -> int:
    n = instances(dims)
    if n is None:
        raise _error("a sync op over a run-time number of warpgroups, warps or threads")
    return n


class _Run:
    """The role traces of one trip count, with their barrier bookkeeping."""

    def __init__(self, m: N.Module, prog: Program, bars: dict[str, S.MBarrier], n: int) -> None:
        self.prog, self.bars, self.n = prog, bars, n
        self.traces: dict[str, list[tuple[object, dict]]] = {}
        self.where: dict[tuple, tuple[str, int]] = {}  # (event, loop values) -> (role, position)
        self.his: list[tuple[N.IExpr, int]] = []
        self.phase: dict[tuple, int] = {}  # a trace item -> the phase it waits for / arrives in
        self.trips: dict[str, int] = {}  # loop event -> iterations in this run
        self.cluster = cluster_blocks(m)  # the blocks an arrive.cluster arrives from
        self.walk(m.body, {})

    # -- evaluation -----------------------------------------------------------------------------
    def val(self, e: N.IExpr, env: dict) -> int:
        for hi, v in self.his:
            if e is hi or (e == hi and not isinstance(hi, N.IConst)):
                return v
        if isinstance(e, N.IConst):
            return e.value
        if isinstance(e, N.IVar):
            if e.name in env:
                return env[e.name]
            if e.name in self.prog.lets:
                return self.val(self.prog.lets[e.name], env)
            raise _error(f"cannot evaluate %{e.name} in a sync op's stage or guard")
        if isinstance(e, N.IProc):
            raise _error("a stage index that depends on the processor")
        a, b = self.val(e.a, env), self.val(e.b, env)
        return {
            "+": a + b,
            "-": a - b,
            "*": a * b,
            "//": a // b if b else 0,
            "%": a % b if b else 0,
            "min": min(a, b),
            "max": max(a, b),
            "cdiv": -(-a // b) if b else 0,
            "/": a // b if b else 0,
        }[e.op]

    def walk(self, b: N.Block, env: dict) -> None:
        for op in b.ops:
            if isinstance(op, S.MBarrier):
                continue
            if isinstance(op, S.SYNC_OPS):
                if (
                    isinstance(op, (S.Arrive, S.SyncWarp))
                    and op.when is not None
                    and self.val(op.when.a, env) < self.val(op.when.b, env)
                ):
                    continue
                self.traces.setdefault(op.role, []).append((op, env))
            elif isinstance(op, (N.Copy, N.Call)):
                lf = self.prog.leaves[op.ev]
                tr = self.traces.setdefault(lf.role, [])
                self.where[(op.ev, tuple(env[lp.var] for lp in lf.loops))] = (lf.role, len(tr))
                tr.append((op, env))
            elif isinstance(op, N.For) and any(d.proc == Proc.BLOCK for d in op.dims):
                # every trip count tried, static bounds included: the drains after a loop
                # name its upper bound (the same object), so they follow
                lo = self.val(op.lo, env)
                self.his.append((op.hi, lo + self.n))
                self.trips[op.ev] = self.n
                for i in range(self.n):
                    self.walk(op.body, {**env, op.var: lo + i})
            elif isinstance(
                op, (N.For, N.PFor)
            ):  # a HOST loop: one iteration is one block's program
                try:
                    lo = self.val(op.lo, env)
                except AssertionError:
                    lo = 0
                self.walk(op.body, {**env, op.var: lo})

    # -- barriers --------------------------------------------------------------------------------
    def barriers(self) -> None:
        arrivals: dict[tuple, int] = {}
        waits: dict[tuple, int] = {}  # (role, bar, stage) -> waits so far
        for role, tr in self.traces.items():
            tx: dict[tuple, list[int]] = {}
            for op, env in tr:
                if isinstance(op, (S.Wait, S.Arrive, S.ArriveExpectTx)):
                    bar = self.bars.get(op.bar)
                    if bar is None:
                        raise _error(f"%{op.bar} is not a declared mbarrier")
                    s = self.val(op.stage, env)
                    if not 0 <= s < bar.stages:
                        raise _error(f"stage {s} of %{op.bar}, which has {bar.stages}")
                    key = (op.bar, s)
                    if isinstance(op, S.Wait):
                        j = waits.get((role,) + key, 0)
                        waits[(role,) + key] = j + 1
                        q = j - bar.lag
                        if self.val(op.parity, env) != q % 2:
                            raise _error(
                                f"wait #{j} on %{op.bar}[{s}] ({role}) has parity "
                                f"{self.val(op.parity, env)}, phase {q} has parity {q % 2}"
                            )
                        self.phase[id(op), tuple(env.items())] = q
                        continue
                    want = (
                        BarrierKind.FULL if isinstance(op, S.ArriveExpectTx) else BarrierKind.EMPTY
                    )
                    if bar.kind != want:
                        raise _error(f"{type(op).__name__} on the {bar.kind} barrier %{op.bar}")
                    # an arrive.cluster arrives from each block of the cluster, which all run
                    # this trace (cluster-multicast: the same pipeline steps)
                    k = _inst(op.dims) * (self.cluster if getattr(op, "cluster", False) else 1)
                    if bar.count % k:
                        raise _error(
                            f"{k} arrivals per op on %{op.bar}, whose phases need {bar.count}"
                        )
                    before = arrivals.get(key, 0)
                    arrivals[key] = before + k
                    self.phase[id(op), tuple(env.items())] = before // bar.count
                    if isinstance(op, S.ArriveExpectTx):
                        self._tx_close(tx, key)
                        tx[key] = [op.bytes, 0]
                elif isinstance(op, N.Copy) and op.bar is not None:
                    key = (op.bar.bar, self.val(op.bar.stage, env))
                    if key not in tx:
                        raise _error(
                            f"TMA copy %{op.ev} completes on %{key[0]}[{key[1]}] with no "
                            "arrive_expect_tx before it"
                        )
                    tx[key][1] += self.prog.nbytes(op.dst) or 0
            for key in list(tx):
                self._tx_close(tx, key)
        fills: dict[tuple, int] = {}
        for key, a in arrivals.items():
            count = self.bars[key[0]].count
            if a % count:
                raise _error(
                    f"%{key[0]}[{key[1]}] ends with a phase of {a % count} of {count} arrivals"
                )
            fills[key] = a // count
        for (role, name, s), j in waits.items():
            need = j - self.bars[name].lag
            if need > fills.get((name, s), 0):
                raise _error(
                    f"{role} waits for phase {need - 1} of %{name}[{s}], which completes "
                    f"{fills.get((name, s), 0)} phase(s)"
                )
        for name, bar in self.bars.items():
            if bar.kind != BarrierKind.EMPTY:
                continue
            full = _full_of(self.bars, bar)
            for s in range(bar.stages):
                f = fills.get((full.name, s), 0) if full else 0
                if fills.get((name, s), 0) != f:
                    raise _error(
                        f"stage {s} of %{name} is released {fills.get((name, s), 0)} time(s) but "
                        f"filled {f} time(s)"
                    )

    @staticmethod
    def _tx_close(tx: dict, key) -> None:
        if key in tx and tx[key][0] != tx[key][1]:
            raise _error(
                f"arrive_expect_tx on %{key[0]}[{key[1]}] announces {tx[key][0]} bytes, its copies "
                f"land {tx[key][1]}"
            )

    # -- positions ---------------------------------------------------------------------------------
    def pos(self, ev: str, vals: tuple) -> tuple[str, int] | None:
        return self.where.get((ev, vals))

    def instances(self, d: Dep):
        """(src position, dst position) pairs of ``d`` in this run (dst None: block end)."""
        p, c = self.prog.leaves[d.src], self.prog.leaves.get(d.dst)
        # to the end of the tile (the next tile's writer comes after it)
        to_end = d.via in (Via.END, Via.TILE)
        for (ev, vals), at in list(self.where.items()):
            if to_end:
                if ev == d.src:
                    yield at, None
                continue
            if ev != d.dst:
                continue
            env = dict(zip((lp.var for lp in c.loops), vals))
            if d.via == Via.AFTER:
                lp = self.prog.loops[d.loop][0]
                if not self.trips.get(lp.ev):
                    continue
                env[lp.var] = self.val(lp.lo, env) + self.trips[lp.ev] - 1
            elif d.via == Via.CARRIED:
                lp = self.prog.loops[d.loop][0]
                env[lp.var] -= d.distance
                if env[lp.var] < self.val(lp.lo, env):
                    continue
            src = self.pos(d.src, tuple(env.get(lp.var) for lp in p.loops))
            if src is not None:
                yield src, at

    def between(self, role: Role, a: int, b: int | None, pred) -> list[int]:
        tr = self.traces[role]
        return [i for i in range(a + 1, len(tr) if b is None else b) if pred(tr[i][0])]


def _full_of(bars: dict[str, S.MBarrier], bar: S.MBarrier) -> S.MBarrier | None:
    """The full barrier the copies of empty barrier ``bar`` complete on (it may hold more copies)."""
    return next(
        (
            b
            for b in bars.values()
            if b.kind == BarrierKind.FULL and set(bar.channel) <= set(b.channel)
        ),
        None,
    )
