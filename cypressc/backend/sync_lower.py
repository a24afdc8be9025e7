"""``cuda-lowering``, the synchronization half (Cypress paper §4.2.6): the sync ops that
``sync-insertion`` placed in the IR become kernel statements, one per op, in IR order.

Nothing here decides *whether* to synchronize: every :class:`~cypressc.backend.plan.Sync`
statement is one op of :mod:`cypressc.ir.sync`, and an IR without an op gives a kernel
without its statement.  What the lowering decides is *how* an op runs on Hopper:

* **which threads** run it, from the op's processor dimensions: one thread per
  warpgroup (``leader``) for ``per [(n, WARPGROUP)]``, lane 0 of each warp for
  ``per [.., (4, WARP)]``, every thread for ``per [.., (32, THREAD)]``; a block-level op
  of the consumers runs once, on the first consumer warpgroup's leader (the ``issuer``
  thread when there is no producer warpgroup);
* **pipeline positions**: a block that walks several tiles (persistent) keeps its
  mbarriers and stage buffers, so step ``k`` of a tile's main loop is step ``kbase + k``
  of the block's pipeline (``kbase``: the steps of the earlier tiles).  Stage indices and
  phase parities, which the IR writes over one tile, are kept in a running pipeline state
  of the role (``pipe``, a ``cypress::PipelineState``: stage ``index`` and ``phase``;
  ``pipe_ahead`` for loads issued ahead) advanced once per step -- :func:`counted` -- or,
  in any other form, printed over ``kbase + k``; guards stay per tile.  A barrier of copies outside the main loop (FlashAttention's Q
  panel, its full and its empty barrier) completes one phase per tile, so its waits flip
  their parity on the block's odd tiles (``^ tphase``);
* **a TMA store's completion in a persistent block**: the IR's ``wait_group bulk`` for
  the edge to the end of the block program runs, in a block that goes on to another
  tile, before the next write of the staging tile (the edge's hazard is that write) and
  once after the last tile; only the thread that committed the group can wait on it, so
  the warpgroup's named barrier that orders the writes before the store lets the other
  writers go after it;
* **ping-pong turns in a persistent block** (:func:`carry_turns`): the IR passes the
  tile's first turn to warpgroup 0 at the start of the tile program (the last warpgroup
  passes nothing after the tile's last run).  A block that goes on to another tile runs
  that pass once before its first tile and, for each next tile, right after the last
  warpgroup's last run of the tile before: the same op on the same barrier, earlier, so
  warpgroup 0 starts the next tile's GEMMs while the last warpgroup does its epilogue.
"""

from __future__ import annotations

from dataclasses import replace

from cypressc.backend import plan as P
from cypressc.backend.cexpr import KVar, PipeAt
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.kinds import FenceKind, GroupUnit, Hazard, Role
from cypressc.ir.subst import subst_expr
from cypressc.lang.kinds import Proc

__all__ = [
    "KBASE",
    "TPHASE",
    "MORE",
    "LEADER",
    "at_step",
    "counted",
    "who",
    "lower_sync",
    "defer_store_waits",
    "carry_turns",
]

# pipeline steps of the block's earlier tiles: an IR name (at_step writes it into the IR's
# positions) that the lowering turns into the loop's kernel variable, `kbase`
KBASE = N.IVar("$kbase")
TPHASE = KVar("tphase")  # the parity of the tiles a persistent block has run
MORE = KVar("more")  # a persistent block goes on to another tile after this one


def _replace(e: N.IExpr, old: N.IExpr, new: N.IExpr) -> N.IExpr:
    if e == old:
        return new
    if isinstance(e, N.IBin):
        return N.IBin(e.op, _replace(e.a, old, new), _replace(e.b, old, new))
    return e


def at_step(e: N.IExpr, kvar: str, hi: N.IExpr, after: bool) -> N.IExpr:
    """Pipeline position ``e`` of one tile (a stage index or parity over loop variable
    ``kvar``; after the loop, over its bound ``hi``) as a position of the block's pipeline."""
    if after:
        return _replace(e, hi, N.IBin("+", hi, KBASE))
    return subst_expr(e, {kvar: N.IBin("+", N.IVar(kvar), KBASE)})


def _offset(e: N.IExpr, kvar: str) -> int | None:
    """``c`` when ``e`` is ``kvar + c`` (or ``kvar - c``, or ``kvar``), else None."""
    if isinstance(e, N.IVar) and e.name == kvar:
        return 0
    if (
        isinstance(e, N.IBin)
        and e.op in ("+", "-")
        and isinstance(e.a, N.IVar)
        and e.a.name == kvar
        and isinstance(e.b, N.IConst)
    ):
        return e.b.value if e.op == "+" else -e.b.value
    return None


def _from_lo(e: N.IExpr, lo: N.IExpr, kvar: str) -> N.IExpr:
    """``e`` with each unfolded ``lo + c`` (a stage ring member's position before the loop,
    :mod:`cypressc.passes.rings`) counted from the loop variable: ``kvar + c``."""
    if isinstance(e, N.IBin):
        if e.op == "+" and e.a == lo and isinstance(e.b, N.IConst):
            return N.IBin("+", N.IVar(kvar), e.b)
        return N.IBin(e.op, _from_lo(e.a, lo, kvar), _from_lo(e.b, lo, kvar))
    return e


def counted(
    e: N.IExpr,
    kvar: str,
    hi: N.IExpr,
    depth: int,
    after: bool,
    pipe: str,
    before: N.IExpr | None = None,
) -> N.IExpr | None:
    """Pipeline position ``e`` through the running pipeline state ``pipe`` of the role (a
    ``cypress::PipelineState``: ``index`` = (steps so far) mod ``depth``, ``phase`` = its
    parity), which the kernel advances once per step (so a persistent block's tiles run
    on).  Matches the forms sync-insertion writes -- ``(k + c) % D`` and
    ``((k + c) // D + p) % 2`` for ``|c| < D``, over the loop bound ``hi`` after the loop,
    over ``before`` (the loop's lower bound) before it, where the state still holds the
    tile's first position -- and returns None for any other (then kept as it is).  The
    result is a kernel expression without a division: the state ``c`` steps on
    (:class:`~cypressc.backend.cexpr.PipeAt`), a parity flipped (``^ 1``) for ``p`` odd."""
    if after:
        e = _replace(e, hi, N.IVar(kvar))
    elif before is not None:
        e = _from_lo(e, before, kvar)
    if not (isinstance(e, N.IBin) and e.op == "%" and isinstance(e.b, N.IConst)):
        return None
    if e.b.value == depth and (c := _offset(e.a, kvar)) is not None and abs(c) < depth:
        return PipeAt(pipe, "index", c)
    if e.b.value != 2:
        return None
    q, p = e.a, 0
    if isinstance(q, N.IBin) and q.op == "+" and isinstance(q.b, N.IConst):
        q, p = q.a, q.b.value
    if not (
        isinstance(q, N.IBin) and q.op == "//" and isinstance(q.b, N.IConst) and q.b.value == depth
    ):
        return None
    c = _offset(q.a, kvar)
    if c is None or abs(c) >= depth:
        return None
    out = PipeAt(pipe, "phase", c)
    return N.IBin("^", out, N.IConst(1)) if p % 2 else out


LEADER = KVar("leader")  # the kernel's `threadIdx.x % 128 == 0`: one thread per warpgroup


def who(role: str, dims: tuple[N.Dim, ...], issuer: bool) -> N.IExpr | None:
    """The condition (a kernel expression) selecting the thread(s) of ``role`` that run an
    op over ``dims``; None: every thread of the role."""
    procs = {d.proc for d in dims}
    if Proc.THREAD in procs:
        return None
    if Proc.WARP in procs:
        return N.IBin("==", N.IBin("%", KVar("threadIdx.x"), N.IConst(32)), N.IConst(0))
    if Proc.WARPGROUP in procs:
        return LEADER
    if role == Role.PRODUCER:
        return None  # the producer's code runs on one elected thread already
    # once per block: the first consumer warpgroup's leader (the issuer without a producer)
    return KVar("issuer") if issuer else N.IBin("&&", LEADER, N.IBin("==", KVar("cw"), N.IConst(0)))


def _note(op, names) -> str:
    """The one-line comment of the statement of sync op ``op``: what its edges make safe, by
    tensor -- ``%K ready (raw)`` (a read after the write it waits for), ``%S free (war/waw)``
    (a write or a release after the accesses it waits for), ``%D stored`` (a TMA store's
    read of its staging tile) -- or the Tensor Core turn it takes or passes; a commit names
    the events of its group (``names``: the IR's event names).  Never the edge list, which
    ``cypressc explain`` prints next to each op."""
    if isinstance(op, S.CommitGroup):
        return "closes the group of " + ", ".join(names.get(e, e) for e in op.events)
    if isinstance(op, S.Turn):
        return f"{op.kind} the Tensor Core turn"
    hazards: dict[str, set[str]] = {}
    for e in getattr(op, "edges", ()):
        hazards.setdefault(e.tensor or "", set()).add(e.hazard)
    ready = [t for t, hs in hazards.items() if Hazard.RAW in hs]
    free = [
        t for t, hs in hazards.items() if hs & {Hazard.WAR, Hazard.WAW} and Hazard.RAW not in hs
    ]
    stored = [t for t, hs in hazards.items() if Hazard.END in hs]
    kinds = "/".join(sorted({h for t in free for h in hazards[t]} & {Hazard.WAR, Hazard.WAW}))
    named = lambda ts: ", ".join(f"%{t}" if t else "start" for t in ts)  # noqa: E731
    parts = [
        *([f"{named(ready)} ready (raw)"] if ready else []),
        *([f"{named(free)} free ({kinds})"] if free else []),
        *([f"{named(stored)} stored"] if stored else []),
        *(["the Tensor Core turn"] if any(Hazard.TURN in hs for hs in hazards.values()) else []),
    ]
    return "; ".join(parts)


def lower_sync(lw, op, section: str, role: str) -> P.Sync | None:
    """One sync op as a statement of ``role`` (None for a declaration: barriers are
    laid out by :func:`cypressc.backend.lower`).  ``lw`` is the lowering (``lw.k`` for an
    expression over the kernel's variables, ``lw.pos`` for pipeline positions,
    ``lw.fragments_of`` for the accumulators an edge orders)."""
    if isinstance(op, S.MBarrier):
        return None
    note = _note(op, lw.names)
    issuer = not lw.warpspecialize
    run = who(role, op.dims, issuer)
    after = section == "after"
    guard = getattr(op, "when", None)
    when = S.Guard(lw.k(guard.a), lw.k(guard.b)) if guard is not None else None
    if isinstance(op, (S.Wait, S.ArriveExpectTx, S.Arrive)):
        parity = lw.pos(op.parity, after) if isinstance(op, S.Wait) else None
        if parity is not None and lw.persistent and op.bar in lw.tile_bars:
            parity = N.IBin(
                "^", parity, TPHASE
            )  # the IR's parity is the tile's: flipped on odd tiles
            lw.plan.counters.add((role, "tphase"))
        return P.Sync(
            op, note, stage=lw.pos(op.stage, after), parity=parity, when=when, who=run, bar=op.bar
        )
    if isinstance(op, S.Fence) and op.kind == FenceKind.WGMMA:
        return P.Sync(op, note, who=run, accs=lw.fragments_of(op.edges))
    if isinstance(op, S.WaitGroup) and op.unit == GroupUnit.WGMMA:
        # only registers the edges protect: a fence on the others would be a register access
        # between two wgmmas, which makes ptxas insert a warpgroup.arrive (C7519)
        return P.Sync(op, note, who=run, accs=lw.fragments_of(op.edges))
    if isinstance(op, S.BarSync):
        return P.Sync(op, note, stage=lw.k(op.id), who=run)
    if isinstance(op, S.Turn):  # every thread of the warpgroup: a named barrier counts warps
        return P.Sync(op, note, stage=lw.k(op.id), when=when)
    return P.Sync(op, note, who=run, when=when)


def _writes(stmt, tensor: str) -> bool:
    return isinstance(stmt, P.StageWrite) and stmt.tensor == tensor


def defer_store_waits(code: P.RoleCode, exit_code: list) -> None:
    """In a persistent block, move each ``wait_group bulk`` whose edges all end the block
    program to the next tile's first write of the tiles its stores read, and after the
    last tile (see the module docstring).  Refuses (ValueError) when no named barrier of
    the warpgroup orders the writes before the store."""
    for sec in code.sections():
        for st in list(sec):
            op = st.op if isinstance(st, P.Sync) else None
            if not (
                isinstance(op, S.WaitGroup)
                and op.unit == GroupUnit.BULK
                and op.edges
                and all(e.hazard == Hazard.END for e in op.edges)
            ):
                continue
            tensors = {e.tensor for e in op.edges}
            stmts = code.all()
            writes = [i for i, s in enumerate(stmts) if any(_writes(s, t) for t in tensors)]
            if not writes:
                raise ValueError("a TMA store of a staging tile that no statement writes")
            first = writes[0]
            bar = next(
                (
                    s
                    for s in stmts[first:]
                    if isinstance(s, P.Sync) and isinstance(s.op, S.BarSync) and s.who is None
                ),
                None,
            )
            if bar is None:
                raise ValueError("a staged TMA store without a warpgroup barrier before it")
            sec.remove(st)
            moved = P.Sync(
                op,
                st.note + " (before the next tile writes it)",
                who=st.who,
                deferred=True,
                barrier=(N.IConst(0) if bar.stage is None else bar.stage, bar.op.threads),
            )
            for part in code.sections():
                if stmts[first] in part:
                    part.insert(part.index(stmts[first]), moved)
                    break
            exit_code.append(P.Sync(op, st.note + " (after the last tile)", who=st.who))


def carry_turns(plan: P.KernelPlan, ops) -> None:
    """In a persistent block with ping-pong, pass the next tile's first turn as soon as the
    last warpgroup has issued this tile's last run (see the module docstring and
    :func:`cypressc.ir.sync.carried_turns`, which finds the two ops among the block
    program's top-level ``ops``): the tile's first pass moves to ``plan.entry`` (before the
    block's first tile) and a copy of it follows the tile's last pass; both are guarded by
    ``more`` as well, the kernel's flag that a tile follows (the first one: a block of the
    grid may have none), so no pass is left over when the block ends.

    The turn ops each warpgroup runs, and their order, are unchanged: the last warpgroup
    has no turn op between its last pass of one tile and its first pass of the next, and a
    pass (``bar.arrive``) never waits, so running it earlier cannot deadlock; warpgroup 0
    took its last turn of the tile before the last warpgroup's last run could start, so the
    early pass cannot complete a phase of warpgroup 0's barrier that no take opened.  No-op
    without ping-pong.  Raises ValueError when the statements of the two ops are not found
    once each outside the main loops."""
    pair = S.carried_turns(ops)
    if pair is None:
        return
    code = plan.consumer
    tops = [sec for sec in code.sections() if all(sec is not lp for lp in code.loops)]
    found = [
        [
            (sec, i)
            for sec in tops
            for i, st in enumerate(sec)
            if isinstance(st, P.Sync) and st.op is op
        ]
        for op in pair
    ]
    if any(len(f) != 1 for f in found) or found[0][0][0] is not code.before:
        raise ValueError(
            "ping-pong: the tile's first turn or its last pass is not one statement outside the "
            "main loops"
        )
    (_, i0), (sec, i1) = found[0][0], found[1][0]
    first = code.before.pop(i0)
    # `more`: the block has a tile (before the first; a block of the grid may have none) or
    # another one after this, so no pass is left over when the block ends
    when = N.IBin("&&", first.when, MORE)
    plan.entry.append(replace(first, when=when, note=first.note + " (the block's first tile)"))
    if sec is code.before and i0 < i1:
        i1 -= 1
    sec.insert(
        i1 + 1,
        replace(
            first,
            when=when,
            note=first.note + " (the next tile's, after this tile's last run)",
        ),
    )
    plan.counters.add((Role.CONSUMER, "more"))
