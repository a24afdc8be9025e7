"""The synchronization verifier (Cypress paper §4.2.6): after ``sync-insertion``, no event
edge is left bare and every barrier is used consistently.

It runs each role's program (its leaf ops and sync ops, in program order) for every
trip count of the block-level loops up to two wrap-arounds of the deepest stage ring — a sequential, per-role rendering of the kernel —
and checks, against the hazards of :class:`cypressc.ir.hazards.Program`:

* **barriers**: every mbarrier op names a declared barrier and a stage inside it; the
  i-th wait of a role on a stage waits for phase i - ``lag`` (:attr:`MBarrier.lag`: 0 for
  a full barrier and a same-tile empty one, 1 for an empty one, whose first wait passes at
  once) with the matching parity, and that phase gets its arrivals; each
  arrival op's instances divide the barrier's count; at the end every stage has
  completed whole phases and has been released as often as it was filled; the bytes an
  ``arrive_expect_tx`` announces are the bytes of the copies completing on that phase;
* **releases**: each arrival on an empty barrier comes after every reader of the stage it
  releases — after a ``wait_group`` that retired a reading wgmma's group, after a
  ``syncwarp`` when thread code read it and warps arrive;
* **edges**: every dependence is realized: a wait on the full barrier of the TMA copy
  (that phase or a later one) before its reader; the producer's wait on the empty barrier
  for the release of the readers D steps back; ``commit_group`` + ``wait_group<N>``
  between a wgmma and thread code touching its operands; ``wgmma.fence`` (with no
  mbarrier wait between it and the wgmma: ptxas re-fences after that control flow),
  ``fence.proxy.async``, ``syncwarp``, a named barrier of the right thread count (ids
  1-7, disjoint); a bulk group waited before the block ends; a wgmma reading a shared
  tensor the next tile's threads write retired and followed by the barrier they meet at
  before the tile ends; the reads of a TMA copy outside the main loop released on its
  one-stage empty barrier (after every instance of the read, retired) and that barrier
  waited before the copy; the earlier readers of bytes a copy of the same tile fills
  released on its one-stage *same-tile* empty barrier, waited for this tile's phase; or a
  path of realized edges implies it;
* **turns** (ping-pong, :mod:`cypressc.passes.sync_turns`): every ``turn`` op realizes
  ``turn`` edges, its barriers are no other named barrier's, and the consumer
  warpgroups' takes and passes, run as named barriers, neither deadlock nor leave an
  arrival behind at the end of the tile.

Raises :class:`cypressc.diagnostics.VerifyError` (a compiler bug, never a user error).
"""

from __future__ import annotations

import re

from cypressc.diagnostics import VerifyError
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.hazard_deps import Dep, instances
from cypressc.ir.hazards import Program
from cypressc.ir.shapes import static

__all__ = ["verify_sync"]


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
            elif isinstance(op, N.For) and any(d.proc == "BLOCK" for d in op.dims):
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
                    want = "full" if isinstance(op, S.ArriveExpectTx) else "empty"
                    if bar.kind != want:
                        raise _error(f"{type(op).__name__} on the {bar.kind} barrier %{op.bar}")
                    k = _inst(op.dims)
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
            if bar.kind != "empty":
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
        for (ev, vals), at in list(self.where.items()):
            if d.via in (
                "end",
                "tile",
            ):  # to the end of the tile (the next tile's writer comes after it)
                if ev == d.src:
                    yield at, None
                continue
            if ev != d.dst:
                continue
            env = dict(zip((lp.var for lp in c.loops), vals))
            if d.via == "after":
                lp = self.prog.loops[d.loop][0]
                if not self.trips.get(lp.ev):
                    continue
                env[lp.var] = self.val(lp.lo, env) + self.trips[lp.ev] - 1
            elif d.via == "carried":
                lp = self.prog.loops[d.loop][0]
                env[lp.var] -= d.distance
                if env[lp.var] < self.val(lp.lo, env):
                    continue
            src = self.pos(d.src, tuple(env.get(lp.var) for lp in p.loops))
            if src is not None:
                yield src, at

    def between(self, role: str, a: int, b: int | None, pred) -> list[int]:
        tr = self.traces[role]
        return [i for i in range(a + 1, len(tr) if b is None else b) if pred(tr[i][0])]


def _full_of(bars: dict[str, S.MBarrier], bar: S.MBarrier) -> S.MBarrier | None:
    """The full barrier the copies of empty barrier ``bar`` complete on (it may hold more copies)."""
    return next(
        (b for b in bars.values() if b.kind == "full" and set(bar.channel) <= set(b.channel)), None
    )


def _structure(m: N.Module) -> dict[str, S.MBarrier]:
    bars: dict[str, S.MBarrier] = {}
    ids: dict[int, object] = {}

    def block(b: N.Block, scope: set[str]) -> None:
        scope = set(scope)
        for op in b.ops:
            if isinstance(op, S.MBarrier):
                if op.name in bars:
                    raise _error(f"mbarrier %{op.name} is declared twice")
                bars[op.name] = op
                scope.add(op.name)
            elif isinstance(op, (S.Wait, S.Arrive, S.ArriveExpectTx)) and op.bar not in scope:
                raise _error(f"{type(op).__name__} on %{op.bar}, which is not declared before it")
            elif isinstance(op, N.Copy) and op.bar is not None and op.bar.bar not in scope:
                raise _error(
                    f"copy %{op.ev} completes on %{op.bar.bar}, which is not declared before it"
                )
            elif isinstance(op, S.Turn):
                wg = next((static(d.extent) for d in op.dims if d.proc == "WARPGROUP"), 1) or 1
                if not op.edges or any(e.hazard != "turn" for e in op.edges):
                    raise _error(f"turn {op.kind} realizes no turn edge")
                for w in range(wg):
                    i = _wg_val(op.id, w)
                    if not 1 <= i <= S.NAMED_BARRIERS or not isinstance(
                        ids.setdefault(i, "turn"), str
                    ):
                        raise _error(
                            f"turn barrier id {i} out of 1..{S.NAMED_BARRIERS} or used by a named barrier"
                        )
            elif isinstance(op, S.BarSync):
                wg = next((static(d.extent) for d in op.dims if d.proc == "WARPGROUP"), 1) or 1
                for w in range(wg):
                    i = _wg_val(op.id, w)
                    if not 1 <= i <= S.NAMED_BARRIERS or ids.setdefault(i, op) is not op:
                        raise _error(
                            f"named barrier id {i} out of 1..{S.NAMED_BARRIERS} or used by two barriers"
                        )
            elif isinstance(op, (N.For, N.PFor)):
                block(op.body, scope)

    block(m.body, set())
    return bars


def _wg_val(e: N.IExpr, wg: int) -> int:
    """A named barrier's id (or a turn op's guard operand) for warpgroup ``wg``."""
    if isinstance(e, N.IConst):
        return int(e.value)
    if isinstance(e, N.IProc) and e.proc == "WARPGROUP":
        return wg
    if isinstance(e, N.IBin) and e.op in ("+", "-", "*", "%"):
        a, b = _wg_val(e.a, wg), _wg_val(e.b, wg)
        return {"+": a + b, "-": a - b, "*": a * b, "%": a % b if b else 0}[e.op]
    raise _error("a named barrier id or guard that is not arithmetic over the warpgroup index")


def _turns(run: "_Run") -> None:
    """Run the consumer warpgroups' turn ops of one trip count as named barriers: a take
    waits for its barrier's phase to complete (two warpgroups: it and a pass), a pass does
    not wait.  Every warpgroup must get through, leaving no barrier half-arrived."""
    ops = [op for op, _ in run.traces.get("consumer", []) if isinstance(op, S.Turn)]
    if not ops:
        return
    wgs = next((static(d.extent) for d in ops[0].dims if d.proc == "WARPGROUP"), 1) or 1
    seqs = [
        [
            (op.kind, _wg_val(op.id, w), op.threads // 128)
            for op in ops
            if op.when is None or _wg_val(op.when.a, w) >= _wg_val(op.when.b, w)
        ]
        for w in range(wgs)
    ]
    pos, arrived, phases, joined = [0] * wgs, {}, {}, [None] * wgs
    progress = True
    while progress:
        progress = False
        for w in range(wgs):
            while pos[w] < len(seqs[w]):
                kind, bid, need = seqs[w][pos[w]]
                if joined[w] is not None:  # a take waiting for the phase it joined
                    if phases.get(bid, 0) <= joined[w]:
                        break
                    joined[w] = None
                    pos[w] += 1
                    progress = True
                    continue
                arrived[bid] = arrived.get(bid, 0) + 1
                gen = phases.get(bid, 0)
                if arrived[bid] == need:
                    arrived[bid], phases[bid] = 0, gen + 1
                elif kind == "take":
                    joined[w] = gen
                    progress = True
                    break
                pos[w] += 1
                progress = True
    stuck = [w for w in range(wgs) if pos[w] < len(seqs[w])]
    if stuck:
        raise _error(
            f"turn barriers deadlock with {run.n} trip(s): warpgroup(s) {stuck} never get their turn"
        )
    left = sorted(b for b, n in arrived.items() if n)
    if left:
        raise _error(
            f"turn barrier(s) {left} keep an arrival at the end of the tile ({run.n} trip(s))"
        )


def verify_sync(m: N.Module, trips=None) -> None:
    """Check the synchronization of ``m`` (see the module docstring); raise VerifyError,
    naming events as ``cypressc explain`` prints them.  ``trips``: the trip counts tried
    for every block-level loop (default 0 .. 2D + 2 for the deepest barrier, D stages: every
    stage wraps around twice)."""
    from cypressc.ir.printer import event_names

    try:
        _verify(m, trips)
    except VerifyError as e:
        names = event_names(m)
        raise VerifyError(
            re.sub(r"%([\w#.]+)", lambda mo: names.get(mo.group(1), mo.group(0)), str(e))
        ) from None


def _verify(m: N.Module, trips) -> None:
    prog = Program(m)
    bars = _structure(m)
    deps = prog.deps()
    if trips is None:
        trips = range(0, 2 * max([b.stages for b in bars.values()] + [1]) + 3)
    for n in trips:
        run = _Run(m, prog, bars, n)
        run.barriers()
        _turns(run)
        _releases(run, prog, deps)
        covered = []
        for d in deps:
            needs = prog.needs(d)
            if d.via == "ring":
                _check_ring(run, prog, d, deps)
                covered.append(d)
            elif "implied" not in needs:
                for a, b in run.instances(d):
                    _check(run, prog, d, needs, a, b)
                covered.append(d)
        for d in deps:
            if "implied" in prog.needs(d) and not prog.is_implied(d, covered):
                raise _error(
                    f"the {d.hazard.upper()} edge %{d.src} -> %{d.dst} on %{d.other} ({d.via}) is "
                    "not synchronized and no path of synchronized edges implies it"
                )


def _fills(run: _Run) -> dict[tuple, list[tuple[str, dict]]]:
    """(full barrier, stage) -> the (copy event, loop values) of each fill, in order."""
    out: dict[tuple, list[tuple[str, dict]]] = {}
    for role, tr in run.traces.items():
        for op, env in tr:
            if isinstance(op, N.Copy) and op.bar is not None:
                out.setdefault((op.bar.bar, run.val(op.bar.stage, env)), []).append((op.ev, env))
    return out


def _raw_readers(prog: Program, deps: list[Dep]) -> dict[str, set[str]]:
    """TMA copy -> the events that read its bytes (its full-barrier edges)."""
    out: dict[str, set[str]] = {}
    for d in deps:
        if d.dst and "full" in prog.needs(d):
            out.setdefault(d.src, set()).add(d.dst)
    return out


def _check_ring(run: _Run, prog: Program, d: Dep, deps: list[Dep]) -> None:
    """A ``ring`` edge (:meth:`Program._ring_deps`): wherever the copy ``d.dst`` refills a
    stage whose previous fill ``d.src`` read, the copy's role waits first on the ring's empty
    barrier for the phase that previous fill's release completes (the release itself, after
    the read retired, :func:`_releases` checks)."""
    name = f"the WAR edge %{d.src} -> %{d.dst} on %{d.other} (ring)"
    ename = next(
        (b.name for b in run.bars.values() if b.kind == "empty" and d.edge() in b.edges), None
    )
    if ename is None:
        raise _error(f"{name}: no empty barrier guards the ring")
    readers, fills = _raw_readers(prog, deps), _fills(run)
    for (ev, _), (role, i) in list(run.where.items()):
        if ev != d.dst:
            continue
        op, env = run.traces[role][i]
        s = run.val(op.bar.stage, env)
        seq = fills.get((op.bar.bar, s), [])
        n = next(j for j, (e, v) in enumerate(seq) if e == ev and v is env)
        if n == 0 or d.src not in readers.get(seq[n - 1][0], ()):
            continue
        ok = [
            j
            for j in run.between(role, -1, i, lambda o: isinstance(o, S.Wait) and o.bar == ename)
            if run.val(run.traces[role][j][0].stage, run.traces[role][j][1]) == s
            and run.phase[id(run.traces[role][j][0]), tuple(run.traces[role][j][1].items())]
            >= n - 1
        ]
        if not ok:
            raise _error(f"{name}: fill #{n} of %{ename}[{s}] does not wait for phase {n - 1}")


def _releases(run: _Run, prog: Program, deps: list[Dep]) -> None:
    """Every arrival on an empty barrier comes after the readers of the fill it releases (on
    a stage ring with members outside its loop: the readers of that fill's copy)."""
    readers: dict[str, list[Dep]] = {}
    for d in deps:
        if prog.needs(d) == ("empty",):
            readers.setdefault(d.dst, []).append(d)
    members = {lf.op.ev for ms in prog.rings().values() for lf in ms}
    copy_fills, raw = _fills(run), _raw_readers(prog, deps)
    fill_of: dict[
        tuple, list[dict]
    ] = {}  # (full barrier, stage) -> loop env of each fill, in order
    for role, tr in run.traces.items():
        for op, env in tr:
            if isinstance(op, S.ArriveExpectTx):
                fill_of.setdefault((op.bar, run.val(op.stage, env)), []).append(env)
    for role, tr in run.traces.items():
        for pos, (op, env) in enumerate(tr):
            if not isinstance(op, S.Arrive):
                continue
            bar = run.bars[op.bar]
            full = _full_of(run.bars, bar)
            s = run.val(op.stage, env)
            q = run.phase[id(op), tuple(env.items())]
            fills = fill_of.get((full.name, s), []) if full else []
            if q >= len(fills):
                raise _error(f"arrival on %{op.bar}[{s}] releases fill #{q}, which never happens")
            if members & set(bar.channel):  # the fill's own copy says who read it
                fev, fenv = copy_fills[(full.name, s)][q]
                for d in {d for ev in bar.channel for d in readers.get(ev, [])}:
                    p = prog.leaves[d.src]
                    if p.role != role or d.src not in raw.get(fev, ()) or d.edge() not in bar.edges:
                        continue
                    at = run.pos(d.src, tuple(fenv.get(lp.var) for lp in p.loops))
                    if at is None or at[1] > pos:
                        raise _error(f"%{op.bar}[{s}] is released before its reader %{d.src} ran")
                    _retired(run, d, at[1], pos, op)
                continue
            for ev in bar.channel:
                for d in readers.get(ev, []):
                    p = prog.leaves[d.src]
                    if (
                        p.role != role or d.edge() not in bar.edges
                    ):  # another empty barrier of the copy's
                        continue
                    if d.via in (
                        "tile",
                        "after",
                    ):  # every read of the tile (or of the loop) comes first
                        for (x, _), (r, i) in list(run.where.items()):
                            if x != d.src or r != role:
                                continue
                            if i > pos:
                                raise _error(
                                    f"%{op.bar}[{s}] is released to the next tile before its "
                                    f"reader %{d.src} ran"
                                )
                            _retired(run, d, i, pos, op)
                        continue
                    at = run.pos(d.src, tuple(fills[q].get(lp.var) for lp in p.loops))
                    if at is None or at[1] > pos:
                        raise _error(f"%{op.bar}[{s}] is released before its reader %{d.src} ran")
                    _retired(run, d, at[1], pos, op)


def _retired(run: _Run, d: Dep, a: int, b: int, arrive: S.Arrive) -> None:
    p = run.prog.leaves[d.src]
    role = p.role
    if p.kind == "wgmma":
        _waited(run, role, a, b, f"the release of %{arrive.bar} after %{d.src}")
    elif p.kind == "tma_store":  # its reads of shared memory retire with its bulk group
        c = run.between(role, a, b, lambda o: isinstance(o, S.CommitGroup) and o.unit == "bulk")
        if not c or not run.between(
            role,
            c[0],
            b,
            lambda o: isinstance(o, S.WaitGroup) and o.unit == "bulk" and o.pending == 0,
        ):
            raise _error(
                f"%{arrive.bar} is released after the TMA store %{d.src} before its bulk group "
                "retired its reads"
            )
    elif any(x.proc in ("WARP", "THREAD") for x in p.op.dims):
        levels = {x.proc for x in arrive.dims}
        if "THREAD" in levels:
            return
        if "WARP" in levels:
            if not run.between(role, a, b, lambda o: isinstance(o, S.SyncWarp)):
                raise _error(
                    f"warps release %{arrive.bar} after thread code %{d.src} with no syncwarp"
                )
        elif not run.between(role, a, b, lambda o: isinstance(o, S.BarSync)):
            raise _error(
                f"one thread per warpgroup releases %{arrive.bar} after thread code %{d.src} "
                "with no barrier"
            )


def _waited(run: _Run, role: str, a: int, b: int | None, what: str) -> int:
    """A wgmma at position ``a`` is committed and retired before position ``b``; the position
    of the ``wait_group`` that retires it."""
    tr = run.traces[role]
    commit = run.between(role, a, b, lambda o: isinstance(o, S.CommitGroup) and o.unit == "wgmma")
    if not commit:
        raise _error(f"{what}: the wgmma's group is never committed")
    for y in run.between(
        role, commit[0], b, lambda o: isinstance(o, S.WaitGroup) and o.unit == "wgmma"
    ):
        later = len(
            run.between(
                role, commit[0], y, lambda o: isinstance(o, S.CommitGroup) and o.unit == "wgmma"
            )
        )
        if later >= tr[y][0].pending:
            return y
    raise _error(f"{what}: no wait_group retires the wgmma's group")


def _check(run: _Run, prog: Program, d: Dep, needs: tuple[str, ...], a, b) -> None:
    role, pa = a
    name = (
        f"the {d.hazard.upper()} edge %{d.src} -> %{d.dst} on %{d.other} ({d.via})"
        if d.dst
        else f"the TMA store %{d.src} reading %{d.other}"
    )
    p = prog.leaves[d.src]
    if "bulk" in needs:
        c = run.between(role, pa, None, lambda o: isinstance(o, S.CommitGroup) and o.unit == "bulk")
        if not c or not run.between(
            role,
            c[0],
            None,
            lambda o: isinstance(o, S.WaitGroup) and o.unit == "bulk" and o.pending == 0,
        ):
            raise _error(
                f"{name}: the TMA store's bulk group is not committed and waited before the end"
            )
        return
    if d.via == "tile" and "empty" in needs:  # the readers release, the next tile's copy waits
        # (a same-tile barrier of the copy orders this tile's earlier readers, not the next tile)
        ename = next(
            (
                b.name
                for b in run.bars.values()
                if b.kind == "empty" and d.edge() in b.edges and b.stages == 1 and not b.same_tile
            ),
            None,
        )
        if ename is None:
            raise _error(f"{name}: no empty barrier hands the buffer to the next tile")
        if not run.between(role, pa, None, lambda o: isinstance(o, S.Arrive) and o.bar == ename):
            raise _error(f"{name}: the reader never releases %{ename} to the next tile")
        crole = prog.leaves[d.dst].role
        at = [i for (x, _), (r, i) in run.where.items() if x == d.dst]
        if not at or not run.between(
            crole, -1, at[0], lambda o: isinstance(o, S.Wait) and o.bar == ename
        ):
            raise _error(
                f"{name}: the copy does not wait on %{ename} for the previous tile's release"
            )
        return
    if d.via == "tile":  # the barrier must follow the retiring wait (a wgmma) or the read
        start = _waited(run, role, pa, None, name) if "wait_group" in needs else pa
        threads = 32 * (prog.warps(d) or 0)
        if "bar_sync" in needs and not run.between(
            role, start, None, lambda o: isinstance(o, S.BarSync) and o.threads == threads
        ):
            raise _error(
                f"{name}: no named barrier of {threads} threads before the end of the tile"
            )
        if "syncwarp" in needs and not run.between(
            role, start, None, lambda o: isinstance(o, S.SyncWarp)
        ):
            raise _error(f"{name}: no syncwarp before the end of the tile")
        return
    crole, pc = b
    if "full" in needs:
        bar = p.op.bar
        if bar is None:
            raise _error(f"{name}: the TMA copy has no completion barrier")
        s = run.val(bar.stage, run.traces[role][pa][1])
        q = max(
            (
                run.phase[id(o), tuple(e.items())]
                for o, e in run.traces[role][:pa]
                if isinstance(o, S.ArriveExpectTx) and o.bar == bar.bar and run.val(o.stage, e) == s
            ),
            default=None,
        )
        if q is None:
            raise _error(f"{name}: no arrive_expect_tx before the copy")
        ok = [
            i
            for i in run.between(
                crole, -1, pc, lambda o: isinstance(o, S.Wait) and o.bar == bar.bar
            )
            if run.val(run.traces[crole][i][0].stage, run.traces[crole][i][1]) == s
            and run.phase[id(run.traces[crole][i][0]), tuple(run.traces[crole][i][1].items())] >= q
        ]
        if not ok:
            raise _error(f"{name}: no wait on %{bar.bar}[{s}] for its phase {q} before the reader")
        return
    if "empty" in needs:
        ename = next(
            (b.name for b in run.bars.values() if b.kind == "empty" and d.edge() in b.edges), None
        )
        if ename is None:
            raise _error(f"{name}: no empty barrier guards the stage")
        c = prog.leaves[d.dst].op
        s = run.val(c.bar.stage, run.traces[crole][pc][1]) if c.bar is not None else None
        rel = [
            i
            for i in run.between(
                role, pa, None, lambda o: isinstance(o, S.Arrive) and o.bar == ename
            )
            if run.val(run.traces[role][i][0].stage, run.traces[role][i][1]) == s
        ]
        if not rel:
            raise _error(f"{name}: the reader never releases %{ename}")
        rop, renv = run.traces[role][rel[0]]
        q = run.phase[id(rop), tuple(renv.items())]
        ok = [
            i
            for i in run.between(crole, -1, pc, lambda o: isinstance(o, S.Wait) and o.bar == ename)
            if run.phase[id(run.traces[crole][i][0]), tuple(run.traces[crole][i][1].items())] >= q
        ]
        if not ok:
            raise _error(f"{name}: the copy does not wait for phase {q} of %{ename}")
        return
    if crole != role:
        raise _error(f"{name}: crosses from {role} to {crole} with no barrier")
    if "wait_group" in needs:
        _waited(run, role, pa, pc, name)
    for need, cls, kind in (
        ("fence_wgmma", S.Fence, "wgmma"),
        ("proxy", S.Fence, "proxy_async"),
        ("syncwarp", S.SyncWarp, None),
    ):
        if need in needs and not run.between(
            role, pa, pc, lambda o: isinstance(o, cls) and (kind is None or o.kind == kind)
        ):
            raise _error(f"{name}: no {need.replace('_', ' ')} between them")
    if "fence_wgmma" in needs:
        last = run.between(role, pa, pc, lambda o: isinstance(o, S.Fence) and o.kind == "wgmma")[-1]
        if run.between(role, last, pc, lambda o: isinstance(o, S.Wait)):
            # the wait's try_wait loop is control flow: ptxas then re-fences the wgmma itself (C7519)
            raise _error(f"{name}: an mbarrier wait lies between the wgmma fence and the wgmma")
    if "bar_sync" in needs:
        threads = 32 * (prog.warps(d) or 0)
        found = run.between(
            role, pa, pc, lambda o: isinstance(o, S.BarSync) and o.threads == threads
        )
        if not found:
            raise _error(f"{name}: no named barrier of {threads} threads between them")
        if "proxy" in needs and not run.between(
            role, pa, found[-1], lambda o: isinstance(o, S.Fence) and o.kind == "proxy_async"
        ):
            raise _error(f"{name}: the proxy fence must come before the barrier")
