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
from cypressc.ir.hazards import Program
from cypressc.ir.kinds import Hazard, Need, Role, TurnKind, Via
from cypressc.ir.shapes import static
from cypressc.ir.sync_edges import _check, _check_ring, _releases
from cypressc.ir.sync_trace import _error, _Run
from cypressc.lang.kinds import Proc

__all__ = ["verify_sync"]


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
                wg = next((static(d.extent) for d in op.dims if d.proc == Proc.WARPGROUP), 1) or 1
                if not op.edges or any(e.hazard != Hazard.TURN for e in op.edges):
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
                wg = next((static(d.extent) for d in op.dims if d.proc == Proc.WARPGROUP), 1) or 1
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
    if isinstance(e, N.IProc) and e.proc == Proc.WARPGROUP:
        return wg
    if isinstance(e, N.IBin) and e.op in ("+", "-", "*", "%"):
        a, b = _wg_val(e.a, wg), _wg_val(e.b, wg)
        return {"+": a + b, "-": a - b, "*": a * b, "%": a % b if b else 0}[e.op]
    raise _error("a named barrier id or guard that is not arithmetic over the warpgroup index")


def _turns(run: "_Run") -> None:
    """Run the consumer warpgroups' turn ops of one trip count as named barriers: a take
    waits for its barrier's phase to complete (two warpgroups: it and a pass), a pass does
    not wait.  Every warpgroup must get through, leaving no barrier half-arrived."""
    ops = [op for op, _ in run.traces.get(Role.CONSUMER, []) if isinstance(op, S.Turn)]
    if not ops:
        return
    wgs = next((static(d.extent) for d in ops[0].dims if d.proc == Proc.WARPGROUP), 1) or 1
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
                elif kind == TurnKind.TAKE:
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
        # every carried edge's distance too (a staging ring may be deeper than the mbarriers)
        far = max([d.distance for d in deps] + [b.stages for b in bars.values()] + [1])
        trips = range(0, 2 * far + 3)
    for n in trips:
        run = _Run(m, prog, bars, n)
        run.barriers()
        _turns(run)
        _releases(run, prog, deps)
        covered = []
        for d in deps:
            needs = prog.needs(d)
            if d.via == Via.RING:
                _check_ring(run, prog, d, deps)
                covered.append(d)
            elif Need.IMPLIED not in needs:
                for a, b in run.instances(d):
                    _check(run, prog, d, needs, a, b)
                covered.append(d)
        for d in deps:
            if Need.IMPLIED in prog.needs(d) and not prog.is_implied(d, covered):
                raise _error(
                    f"the {d.hazard.upper()} edge %{d.src} -> %{d.dst} on %{d.other} ({d.via}) is "
                    "not synchronized and no path of synchronized edges implies it"
                )
