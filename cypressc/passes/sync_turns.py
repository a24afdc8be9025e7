"""Ping-pong between consumer warpgroups, the last step of ``sync-insertion`` when the mapping
asks for it (``pingpong: true`` on the kernel's BLOCK instance; issue #12; FlashAttention-3
§3.1, "pingpong scheduling").

The consumer warpgroups of a block issue the same wgmmas on different rows.  Left alone,
they reach the Tensor Core together and then all do their thread code (a softmax) while it
idles.  With ping-pong they take *turns*: each warpgroup's run of wgmma issues starts once
the previous warpgroup issued its own, so one warpgroup's GEMMs run while the others do
their thread code.  The Tensor Core is the resource here, not a tensor: the mapping's knob
adds a ``turn`` edge from the last wgmma of a run (issued by warpgroup ``w - 1``) to the
first wgmma of the same run (issued by ``w``), and this module realizes those edges with
named barriers, one per consumer warpgroup (ids after sync-insertion's own):

* a **run** is a maximal sequence of the consumers' wgmma issues with no ``wait_group``
  between them (the synchronized program decides where the waits are); a loop body whose
  first run starts before any wait and whose last run ends after the last one joins them
  across the back edge (FlashAttention-2's O += P·V of step k with S = Q·Kᵀ of step
  k + 1), the loop's first and last iterations then taking and passing the turn before
  and after the loop;
* ``turn take`` (``bar.sync base + w, 256``) before the run's first wgmma (after the
  mbarrier waits for its operands: a warpgroup holding the turn never waits for data the
  others could use the Tensor Core for), ``turn pass`` (``bar.arrive base + (w + 1) %
  WGS, 256``) after the commit that closes its last wgmma;
* the last warpgroup passes warpgroup 0 the tile's first turn at the start of the block
  program, and does not pass the turn after the tile's last run: every turn barrier is empty
  when the tile ends, and in a persistent block warpgroup 0 cannot take the next tile's first
  turn (nor pass turns on) before the last warpgroup has taken all of this tile's turns
  (with warpgroup 0 passing to itself, it could run a tile ahead and complete a barrier's
  phase with two passes: a deadlock).  A persistent kernel runs that first pass right after
  the last warpgroup's last run of the tile before, not after its epilogue
  (:func:`cypressc.ir.sync.carried_turns`).

Every warpgroup runs the same runs, so the takes and passes pair up and the ring cannot
deadlock; :mod:`cypressc.ir.sync_verify` checks the pairing and the concurrent
interpreter runs it (a phase completed by passes alone, or an arrival left at the end of a
tile, is a finding).  A run that crosses a loop boundary other than its own back edge, a
loop nested in the main loop, or a tile whose last run is inside a loop is refused
(:class:`Refuse`, E050).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.hazards import Program
from cypressc.ir.kinds import FenceKind, GroupUnit, Hazard, OpKind, Role, TurnKind, Via
from cypressc.ir.shapes import static
from cypressc.lang.kinds import Proc
from cypressc.passes.sync_placement import Refuse

__all__ = ["place_turns", "TURN_THREADS"]

TURN_THREADS = 256  # a take (128 threads of one warpgroup) + a pass (128 of another)
WG = N.IProc(Proc.WARPGROUP)


@dataclass
class _Run:
    head: N.Call  # first wgmma issue
    tail: N.Call  # last wgmma issue


def _is_block_loop(op) -> bool:
    return isinstance(op, N.For) and any(d.proc == Proc.BLOCK for d in op.dims)


class _Turns:
    def __init__(self, prog: Program, base: int) -> None:
        self.prog, self.base = prog, base
        self.wgmma = {
            ev
            for ev, lf in prog.leaves.items()
            if lf.kind == OpKind.WGMMA and lf.role == Role.CONSUMER
        }
        dims = next((prog.leaves[ev].op.dims for ev in sorted(self.wgmma)), ())
        self.dims = tuple(d for d in dims if d.proc in (Proc.BLOCK, Proc.WARPGROUP))
        wg = next((d for d in dims if d.proc == Proc.WARPGROUP), None)
        self.wgs = static(wg.extent) if wg is not None else None
        if not self.wgmma or not self.wgs or self.wgs < 2:
            raise Refuse(
                "pingpong needs the consumers' wgmmas issued by two or more consumer warpgroups "
                "(set the tunable that splits the tile over warpgroups to 2 or 3, or drop pingpong)"
            )
        if base + self.wgs - 1 > S.NAMED_BARRIERS:
            raise Refuse(
                f"more than {S.NAMED_BARRIERS} named barriers (pingpong takes one per consumer "
                "warpgroup)"
            )
        self.before: dict[int, list] = {}  # id(op) -> turn ops placed right before it
        self.after: dict[int, list] = {}  # id(op) -> turn ops placed right after it

    # -- the ops ------------------------------------------------------------------------
    def _edge(self, r: _Run, via: Via) -> S.Edge:
        return S.Edge(r.tail.ev, r.head.ev, Hazard.TURN, "", via)

    def take(self, r: _Run, via: Via = Via.SAME) -> S.Turn:
        return S.Turn(
            TurnKind.TAKE,
            N.ibin("+", N.IConst(self.base), WG),
            TURN_THREADS,
            Role.CONSUMER,
            None,
            (self._edge(r, via),),
            self.dims,
        )

    def pass_(self, r: _Run, via: Via = Via.SAME) -> S.Turn:
        nxt = N.ibin("%", N.ibin("+", WG, N.IConst(1)), N.IConst(self.wgs))
        return S.Turn(
            TurnKind.PASS,
            N.ibin("+", N.IConst(self.base), nxt),
            TURN_THREADS,
            Role.CONSUMER,
            None,
            (self._edge(r, via),),
            self.dims,
        )

    # -- runs ---------------------------------------------------------------------------
    def _items(self, b: N.Block) -> list:
        """The block's consumer wgmma issues, wgmma waits and block-level loops, in order."""
        out = []
        for op in b.ops:
            if isinstance(op, N.Call) and op.ev in self.wgmma:
                out.append(op)
            elif (
                isinstance(op, S.WaitGroup)
                and op.unit == GroupUnit.WGMMA
                and op.role == Role.CONSUMER
            ):
                out.append(op)
            elif _is_block_loop(op):
                out.append(op)
        return out

    @staticmethod
    def _split(items: list) -> list[list[N.Call]]:
        """The maximal sequences of wgmma issues (a wait or a loop ends one), non-empty."""
        runs: list[list[N.Call]] = [[]]
        for it in items:
            if isinstance(it, N.Call):
                runs[-1].append(it)
            else:
                runs.append([])
        return [r for r in runs if r]

    def block(self, b: N.Block) -> None:
        """The block program's top level: its loops, then its own runs."""
        items = self._items(b)
        for i, it in enumerate(items):
            if not isinstance(it, N.For):
                continue
            self.loop(it)
            prev = items[i - 1] if i else None
            if isinstance(prev, N.Call):
                raise Refuse(
                    f"pingpong: wgmma %{prev.ev} is issued right before a loop with no wait "
                    "in between (its run of wgmmas would cross the loop)"
                )
            nxt = items[i + 1] if i + 1 < len(items) else None
            if isinstance(nxt, N.Call) and self._wraps(it):
                raise Refuse(
                    f"pingpong: wgmma %{nxt.ev} follows loop %{it.ev} with no wait in between "
                    "(its run of wgmmas would cross the loop)"
                )
        for calls in self._split(items):
            r = _Run(calls[0], calls[-1])
            self._place(r.head, TurnKind.TAKE, self.take(r))
            self._place(r.tail, TurnKind.PASS, self.pass_(r))

    def _wraps(self, lp: N.For) -> bool:
        items = self._items(lp.body)
        calls = [i for i, it in enumerate(items) if isinstance(it, N.Call)]
        return bool(calls) and calls[-1] == len(items) - 1

    def loop(self, lp: N.For) -> None:
        items = self._items(lp.body)
        if any(isinstance(it, N.For) for it in items):
            raise Refuse(
                f"pingpong: loop %{lp.ev} has a loop inside it (turns are placed per main-loop step)"
            )
        runs = self._split(items)
        if not runs:
            return
        starts_open, ends_open = isinstance(items[0], N.Call), isinstance(items[-1], N.Call)
        if len(runs) == 1 and starts_open and ends_open:
            # no wait in the body: one run over the whole loop
            r = _Run(runs[0][0], runs[0][-1])
            self._place(lp, TurnKind.TAKE, self.take(r, Via.ENTRY))
            self._place(lp, TurnKind.PASS, self.pass_(r, Via.AFTER))
            return
        if starts_open and ends_open:  # the last run goes on into the next iteration's first
            first, last = runs[0], runs[-1]
            r = _Run(last[0], first[-1])
            self._place(
                lp, TurnKind.TAKE, self.take(r, Via.ENTRY)
            )  # the first iteration's first run
            self._place(first[-1], TurnKind.PASS, self.pass_(r))
            self._place(last[0], TurnKind.TAKE, self.take(r))
            self._place(
                lp, TurnKind.PASS, self.pass_(r, Via.AFTER)
            )  # the last iteration's last run
            runs = runs[1:-1]
        for calls in runs:
            r = _Run(calls[0], calls[-1])
            self._place(r.head, TurnKind.TAKE, self.take(r))
            self._place(r.tail, TurnKind.PASS, self.pass_(r))

    def _place(self, anchor, kind: TurnKind, op: S.Turn) -> None:
        (self.before if kind == TurnKind.TAKE else self.after).setdefault(id(anchor), []).append(op)

    # -- the rebuilt blocks -------------------------------------------------------------
    def rebuild(self, b: N.Block) -> N.Block:
        ops: list = []
        pending_after: list = []
        for op in b.ops:
            if isinstance(op, S.CommitGroup) and pending_after and op.unit == GroupUnit.WGMMA:
                ops.append(op)  # the pass goes after the commit that closes the run's last wgmma
                ops += pending_after
                pending_after = []
                continue
            takes = self.before.get(id(op), [])
            if takes:
                # after the operand waits, before the wgmma fence of the run's first wgmma
                at = len(ops)
                while (
                    at and isinstance(ops[at - 1], S.Fence) and ops[at - 1].kind == FenceKind.WGMMA
                ):
                    at -= 1
                ops[at:at] = takes
            later = self.after.get(id(op), [])
            if isinstance(op, N.For):
                op = replace(op, body=self.rebuild(op.body))
            ops.append(op)
            if later and isinstance(op, N.Call):
                pending_after += later
            else:
                ops += later
        if pending_after:
            raise Refuse("pingpong: a run's last wgmma is not followed by its commit_group")
        return N.Block(tuple(ops), b.yields)


def place_turns(body: N.Block, prog: Program, base: int) -> tuple[N.Block, int]:
    """The synchronized block program ``body`` with the ping-pong turns of its consumer
    warpgroups (see the module docstring); named barriers ``base .. base + WGS - 1``.
    Returns the new body and the next free named-barrier id.  Raises :class:`Refuse`."""
    t = _Turns(prog, base)
    t.block(body)
    out = t.rebuild(body)
    turns = [(top, i, op) for top, i, op in _turn_ops(out, True)]
    if not turns:
        raise Refuse("pingpong: the consumers issue no wgmma")
    top, i, last = [x for x in turns if x[2].kind == TurnKind.PASS][-1]
    if not top:
        raise Refuse(
            "pingpong: the tile's last run of wgmmas is inside a loop (its last pass would need "
            "the iteration); issue a wgmma after the loop or drop pingpong"
        )
    # the last warpgroup passes nothing after the tile's last run, and passes warpgroup 0 the
    # tile's first turn when it starts the tile: a persistent block's warpgroup 0 then takes the
    # next tile's first turn only once the last one has taken all of this tile's turns
    ops = list(out.ops)
    ops[i] = replace(last, when=S.Guard(N.IConst(t.wgs - 2), WG))
    first = next(op for _, _, op in turns if op.kind == TurnKind.TAKE)
    start = S.Turn(
        TurnKind.PASS,
        N.IConst(base),
        TURN_THREADS,
        Role.CONSUMER,
        S.Guard(WG, N.IConst(t.wgs - 1)),
        (S.Edge("", first.edges[0].dst, Hazard.TURN),),
        t.dims,
    )
    return N.Block((start, *ops), out.yields), base + t.wgs


def _turn_ops(b: N.Block, top: bool):
    """(at the top level, index in its block, op) of every turn op, in program order."""
    for i, op in enumerate(b.ops):
        if isinstance(op, S.Turn):
            yield top, i, op
        elif isinstance(op, N.For):
            yield from _turn_ops(op.body, False)
