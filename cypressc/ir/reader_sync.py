"""Read the synchronization ops of the printed event IR (Cypress paper §4.2.6;
:mod:`cypressc.ir.sync`, as :func:`cypressc.ir.printer.sync_line` writes them), with the event
edges each realizes (``from %e3 -> %e5 (raw %A, 1 iteration(s) later); …``).

Event names are kept as written (``e3`` for ``%e3``); :mod:`cypressc.ir.reader` checks that
each names an event of the module.  A sync op whose ``per`` lists no BLOCK dimension runs
over the block program's (:func:`cypressc.ir.printer.block_grid`): the reader adds them once
the whole body is read.
"""

from __future__ import annotations

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.kinds import BarrierKind, FenceKind, GroupUnit, Hazard, TurnKind, Via
from cypressc.ir.printer import VIA_TEXT
from cypressc.ir.reader_lex import Cursor, Tok

__all__ = ["SYNC_KEYWORDS", "sync_op", "mbarrier"]

SYNC_KEYWORDS = (
    "arrive_expect_tx",
    "wait",
    "arrive",
    "commit_group",
    "wait_group",
    "syncwarp",
    "bar_sync",
    "turn",
    "fence",
)


def _bar(c: Cursor) -> tuple[str, N.IExpr]:
    """``%bar[stage]``."""
    t = c.kind("sym", "an mbarrier stage (%bar[stage])")
    c.expect("[")
    stage = c.expr()
    c.expect("]")
    return t.name, stage


def _when(c: Cursor) -> S.Guard | None:
    if not c.accept("if"):
        return None
    a = c.expr()
    c.expect(">=", "a guard is `if a >= b`")
    return S.Guard(a, c.expr())


def _per(c: Cursor) -> tuple[N.Dim, ...]:
    return c.dims() if c.accept("per") else ()


def _events(c: Cursor, refs: list[Tok]) -> tuple[str, ...]:
    """``%e1, %e2, …`` (at least one)."""
    out = [c.kind("sym", "an event (%e1)")]
    while c.accept(","):
        out.append(c.kind("sym", "an event (%e1)"))
    refs += out
    return tuple(t.name for t in out)


def _edge_tail(c: Cursor) -> tuple[Via, int]:
    """How an edge reaches its consumer: the text after the hazard (:data:`VIA_TEXT`)."""
    if not c.accept(","):
        return Via.SAME, 0
    for via in (Via.ENTRY, Via.AFTER, Via.TILE):  # fixed phrases: `, into the loop`
        if c.at(VIA_TEXT[via].split()[1]):
            c.words(VIA_TEXT[via][1:])
            return via, 1 if via == Via.TILE else 0  # a tile edge reaches the next tile
    if c.accept("its"):
        c.words("stage's next fill,")
        n = c.integer("the ring distance")
        c.words("ring position(s) on")
        return Via.RING, n
    n = c.integer("the iterations an edge is carried")
    c.words("iteration(s) later")
    return Via.CARRIED, n


def edges(c: Cursor, refs: list[Tok]) -> tuple[S.Edge, ...]:
    """``from SRCS -> DST (DETAIL); …`` (after ``from``), in the order the printer groups
    them, so that printing them again gives the same text."""
    out: list[S.Edge] = []
    while True:
        srcs = []
        while True:
            if c.accept("start"):
                srcs.append("")
            else:
                t = c.kind("sym", "an event (%e1) or start")
                refs.append(t)
                srcs.append(t.name)
            if not c.accept(","):
                break
        c.expect("->")
        if c.accept("end"):  # the end of the block program: a TMA store's bytes read
            c.words("(the TMA store reads")
            tensor = c.kind("sym", "the stored tensor").name
            c.expect(")")
            out += [S.Edge(s, "", Hazard.END, tensor, Via.END) for s in srcs]
        else:
            d = c.kind("sym", "an event (%e1) or end")
            refs.append(d)
            c.expect("(")
            at = c.peek()
            if c.accept("turn"):
                hz, tensor = [Hazard.TURN], ""
            else:
                hz = [c.tag(Hazard, "a hazard")]
                while c.accept("+"):
                    hz.append(c.tag(Hazard, "a hazard"))
                tensor = c.kind("sym", "the tensor of the hazard").name
            via, dist = _edge_tail(c)
            c.expect(")")
            for s in srcs:
                for h in hz:
                    try:
                        out.append(S.Edge(s, d.name, h, tensor, via, dist))
                    except ValueError as e:
                        raise c.error(f"bad edge: {e}", at) from None
        if not c.accept(";"):
            return tuple(out)


def _from(c: Cursor, refs: list[Tok]) -> tuple[S.Edge, ...]:
    return edges(c, refs) if c.accept("from") else ()


def mbarrier(c: Cursor, name: str, refs: list[Tok]) -> S.MBarrier:
    """``mbarrier[D] full arrivals(n) arrive @R wait @R [(this tile)] [per …] channel of …
    [from …]`` (after ``%name =``)."""
    c.expect("mbarrier")
    c.expect("[")
    stages = c.integer("the stage count")
    c.expect("]")
    kind = c.tag(BarrierKind, "an mbarrier kind")
    c.expect("arrivals")
    c.expect("(")
    count = c.integer("the arrival count")
    c.expect(")")
    c.expect("arrive")
    arrive = c.roles()
    c.expect("wait")
    wait = c.roles()
    same = c.accept("(") is not None
    if same:
        c.words("this tile)")
    dims = _per(c)
    c.words("channel of")
    channel = _events(c, refs)
    return S.MBarrier(name, kind, stages, count, arrive, wait, channel, _from(c, refs), dims, same)


def sync_op(c: Cursor, refs: list[Tok]):
    """One sync op line starting with its keyword (:data:`SYNC_KEYWORDS`); ``refs`` collects
    the event tokens it names."""
    kw = c.kind("name", "a sync op").text
    if kw == "arrive_expect_tx":
        bar, stage = _bar(c)
        n = c.integer("the transaction bytes")
        c.expect("bytes")
        dims = _per(c)
        return S.ArriveExpectTx(bar, stage, n, c.role(), _from(c, refs), dims)
    if kw == "wait":
        bar, stage = _bar(c)
        c.expect("parity")
        parity = c.expr()
        dims = _per(c)
        return S.Wait(bar, stage, parity, c.role(), _from(c, refs), dims)
    if kw == "arrive":
        cluster = c.accept(".") is not None
        if cluster:
            t = c.kind("name", "cluster")
            if t.text != "cluster":
                raise c.error(f"unknown arrive.{t.text}", t, "write arrive.cluster")
        bar, stage = _bar(c)
        when, dims = _when(c), _per(c)
        return S.Arrive(bar, stage, c.role(), when, _from(c, refs), dims, cluster)
    if kw == "commit_group":
        unit = c.tag(GroupUnit, "a group unit")
        dims = _per(c)
        role = c.role()
        c.words("closes the group of")
        return S.CommitGroup(unit, role, _events(c, refs), dims)
    if kw == "wait_group":
        unit = c.tag(GroupUnit, "a group unit")
        pending = c.integer("the groups left in flight")
        dims = _per(c)
        return S.WaitGroup(unit, pending, c.role(), _from(c, refs), dims)
    if kw == "syncwarp":
        when, dims = _when(c), _per(c)
        return S.SyncWarp(c.role(), _from(c, refs), dims, when)
    if kw == "bar_sync":
        ident = c.expr()
        c.expect(",")
        threads = c.integer("the thread count")
        dims = _per(c)
        return S.BarSync(ident, threads, c.role(), _from(c, refs), dims)
    if kw == "turn":
        kind = c.tag(TurnKind, "a turn kind")
        ident = c.expr()
        c.expect(",")
        threads = c.integer("the thread count")
        when, dims = _when(c), _per(c)
        return S.Turn(kind, ident, threads, c.role(), when, _from(c, refs), dims)
    if kw == "fence":
        kind = c.tag(FenceKind, "a fence kind")
        dims = _per(c)
        return S.Fence(kind, c.role(), _from(c, refs), dims)
    raise c.error(f"unknown op '{kw}'", c.line.toks[c.i - 1])
