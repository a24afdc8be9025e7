"""Processor levels of ``prange`` loops, checked during dependence analysis (E041).

Which level a ``prange``'s launches run on is the mapping's choice (each launched
instance's ``proc``), and how many iterations it has is usually a tunable's; the errors
here blame those YAML values, with a note at the loop (issue #9).  A count the program
writes itself (a literal, a run-time size) stays located at the loop.
"""

from __future__ import annotations

from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir.origin import blame
from cypressc.ir.shapes import static
from cypressc.lang import syntax as S
from cypressc.lang.kinds import Proc
from cypressc.mapping.tasktree import TaskNode, TaskTree

__all__ = ["here", "loop_proc", "check_processors"]


def here(node: TaskNode, what: str) -> str:
    """``what in 'mma_inner' (instance 'mma_warp')``: the wording of a note at a statement."""
    return f"{what} in '{node.variant.name}' (instance '{node.instance.instance}')"


def loop_proc(tree: TaskTree, s: S.Loop, node: TaskNode) -> tuple[Proc, str | None]:
    """The processor level the launches of prange ``s`` (in ``node``) run on, and an
    instance launched there (None when the loop launches nothing: then ``node``'s level).

    Raises E041 at a launched instance's ``proc`` when the launches run on different levels.
    """
    kids = [node.child(st) for st in S.walk(s.body) if isinstance(st, S.Launch)]
    if not kids:
        return node.proc, None
    first = kids[0]
    other = next((k for k in kids if k.proc != first.proc), None)
    if other is not None:
        a, b = first.instance.instance, other.instance.instance
        raise CypressError(
            "E041",
            "a prange launches tasks mapped to different processor levels "
            f"({', '.join(sorted({first.proc, other.proc}))})",
            tree.mapping.instance_loc(b, "proc"),
            hint="map every task launched in one prange to the same processor level",
            notes=(
                (
                    f"'{a}', launched in the same prange, runs on {first.proc}",
                    tree.mapping.instance_loc(a, "proc"),
                ),
                (here(node, "the prange that launches both"), s.loc),
            ),
        )
    return first.proc, first.instance.instance


def check_processors(
    tree: TaskTree, s: S.Loop, node: TaskNode, proc: Proc, kid: str | None, extent: N.IExpr
) -> None:
    """A prange that hands work to the processors inside the current one (warps of a
    warpgroup, threads of a warp) has at most one iteration per processor: vectorization
    turns the loop variable into that processor's index (paper §4.2.2).

    ``proc`` is the level of the launched instance ``kid``; ``extent`` the iteration count
    (an :class:`~cypressc.ir.nodes.IConst` carries the tunables it came from).  A level is
    blamed at ``kid``'s ``proc``, a count set by a tunable at the tunable (E041).
    """
    level = node.proc
    runs = ((f"'{kid}' runs on {proc}", tree.mapping.instance_loc(kid, "proc")),) if kid else ()
    at_loop = ((here(node, f"this prange launches '{kid}'"), s.loc),)
    loc = runs[0][1] if runs else s.loc
    if proc in (Proc.HOST, Proc.BLOCK) or proc == level:
        if proc == Proc.BLOCK and level == Proc.BLOCK:
            raise CypressError(
                "E041",
                "a BLOCK task launches a parallel group of BLOCK tasks",
                loc,
                notes=at_loop if runs else (),
                hint="map the launched tasks to WARPGROUP (or a deeper level)",
            )
        return
    if len(s.vars) > 1:
        raise CypressError(
            "E041",
            f"a {len(s.vars)}-dimensional prange over {proc}s: processors "
            "below BLOCK are numbered in one dimension",
            loc,
            notes=at_loop if runs else (),
            hint="launch over one prange variable and partition in two steps",
        )
    m = tree.machine
    inner, outer = m.level(proc).threads, m.level(level).threads
    if level == Proc.BLOCK or not inner or not outer:
        return
    want = outer // inner
    got = static(extent)
    if got is None or got > want:
        raise blame(
            "E041",
            f"this prange launches {proc} tasks from a {level} task: it may have at most {want} "
            f"iterations (one per {proc.lower()} in a {level.lower()}), it has "
            f"{got if got is not None else 'a run-time number of'}",
            s.loc,
            [extent],
            breaks=here(node, "it sizes this prange"),
            notes=runs,
            hint=(
                f"set the tunable that sizes the prange to at most {want}"
                if getattr(extent, "origin", ())
                else f"launch at most {want} {proc} tasks here, or map them to a deeper level"
            ),
        )


MMA_PIECES = {
    Proc.WARP: 4,
    Proc.THREAD: 32,
}  # partition_by_mma pieces: warps of a warpgroup, lanes of a warp


def check_mma_pieces(
    e: S.Piece,
    part: N.Partition,
    indices: tuple[N.IExpr, ...],
    extents: dict[str, N.IExpr],
    breaks: str,
) -> None:
    """E041 when a piece of a ``partition_by_mma`` is indexed past its piece count (paper
    Fig. 4: 4 pieces at WARP, one per warp of a warpgroup; 32 at THREAD, one per lane of a
    warp), by a number or by a loop variable whose static extent is larger: a ``prange(128)``
    of THREAD tasks from a WARPGROUP task cannot take the THREAD pieces of the warpgroup's
    tile.  Blamed at the tunable that sizes the loop when the mapping set it."""
    proc = part.params[1]
    count = MMA_PIECES.get(proc)
    if count is None:
        return
    for ix in indices:
        n = static(extents[ix.name]) if isinstance(ix, N.IVar) and ix.name in extents else None
        if n is not None and n > count:
            src = extents[ix.name]
            raise blame(
                "E041",
                f"'{e.partition}' has {count} pieces (partition_by_mma at {proc}: one per "
                f"{'warp of a warpgroup' if proc == Proc.WARP else 'lane of a warp'}), but a loop of {n} "
                "iterations indexes it",
                e.loc,
                [src],
                breaks=breaks,
                hint=f"size the loop to {count} (partition by WARP first, then by THREAD)",
            )
        k = static(ix)
        if k is not None and not 0 <= k < count:
            raise CypressError(
                "E041",
                f"piece {k} of '{e.partition}' does not exist: partition_by_mma at "
                f"{proc} has pieces 0..{count - 1}",
                e.loc,
            )
