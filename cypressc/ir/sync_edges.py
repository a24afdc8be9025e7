"""The sync verifier's **releases** and **edges** checks on one run (Cypress paper §4.2.6,
:mod:`cypressc.ir.sync_verify`): each arrival on an empty barrier comes after the readers
of the fill it releases, retired; and each dependence that needs synchronization is
realized in the run by what :meth:`cypressc.ir.hazards.Program.needs` names (a full or
empty barrier wait of the right phase, a ``wait_group`` that retires the wgmma's group,
fences, a warp or named barrier, a bulk group waited before the block ends).
"""

from __future__ import annotations

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.hazard_deps import Dep
from cypressc.ir.hazards import Program
from cypressc.ir.kinds import BarrierKind, FenceKind, GroupUnit, Need, OpKind, Role, Via
from cypressc.ir.sync_trace import _error, _full_of, _Run
from cypressc.lang.kinds import Proc


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
        if d.dst and Need.FULL in prog.needs(d):
            out.setdefault(d.src, set()).add(d.dst)
    return out


def _check_ring(run: _Run, prog: Program, d: Dep, deps: list[Dep]) -> None:
    """A ``ring`` edge (:meth:`Program._ring_deps`): wherever the copy ``d.dst`` refills a
    stage whose previous fill ``d.src`` read, the copy's role waits first on the ring's empty
    barrier for the phase that previous fill's release completes (the release itself, after
    the read retired, :func:`_releases` checks)."""
    name = f"the WAR edge %{d.src} -> %{d.dst} on %{d.other} (ring)"
    ename = next(
        (b.name for b in run.bars.values() if b.kind == BarrierKind.EMPTY and d.edge() in b.edges),
        None,
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
        if prog.needs(d) == (Need.EMPTY,):
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
                        Via.TILE,
                        Via.AFTER,
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
    if p.kind == OpKind.WGMMA:
        _waited(run, role, a, b, f"the release of %{arrive.bar} after %{d.src}")
    elif p.kind == OpKind.TMA_STORE:  # its reads of shared memory retire with its bulk group
        c = run.between(
            role, a, b, lambda o: isinstance(o, S.CommitGroup) and o.unit == GroupUnit.BULK
        )
        if not c or not run.between(
            role,
            c[0],
            b,
            lambda o: isinstance(o, S.WaitGroup) and o.unit == GroupUnit.BULK and o.pending == 0,
        ):
            raise _error(
                f"%{arrive.bar} is released after the TMA store %{d.src} before its bulk group "
                "retired its reads"
            )
    elif any(x.proc in (Proc.WARP, Proc.THREAD) for x in p.op.dims):
        levels = {x.proc for x in arrive.dims}
        if Proc.THREAD in levels:
            return
        if Proc.WARP in levels:
            if not run.between(role, a, b, lambda o: isinstance(o, S.SyncWarp)):
                raise _error(
                    f"warps release %{arrive.bar} after thread code %{d.src} with no syncwarp"
                )
        elif not run.between(role, a, b, lambda o: isinstance(o, S.BarSync)):
            raise _error(
                f"one thread per warpgroup releases %{arrive.bar} after thread code %{d.src} "
                "with no barrier"
            )


def _waited(run: _Run, role: Role, a: int, b: int | None, what: str) -> int:
    """A wgmma at position ``a`` is committed and retired before position ``b``; the position
    of the ``wait_group`` that retires it."""
    tr = run.traces[role]
    commit = run.between(
        role, a, b, lambda o: isinstance(o, S.CommitGroup) and o.unit == GroupUnit.WGMMA
    )
    if not commit:
        raise _error(f"{what}: the wgmma's group is never committed")
    for y in run.between(
        role, commit[0], b, lambda o: isinstance(o, S.WaitGroup) and o.unit == GroupUnit.WGMMA
    ):
        later = len(
            run.between(
                role,
                commit[0],
                y,
                lambda o: isinstance(o, S.CommitGroup) and o.unit == GroupUnit.WGMMA,
            )
        )
        if later >= tr[y][0].pending:
            return y
    raise _error(f"{what}: no wait_group retires the wgmma's group")


def _bulk_retired(run: _Run, role: Role, a: int, b: int, what: str) -> int:
    """The TMA store at position ``a`` is committed and its bulk group's reads retired before
    position ``b``, by the store's own issuing thread (commits and waits of the store's
    processor dims): the position of the ``wait_group bulk N`` that retires them (at most N
    of that thread's groups committed after its own)."""
    dims = run.traces[role][a][0].dims
    is_commit = lambda o: (  # noqa: E731
        isinstance(o, S.CommitGroup) and o.unit == GroupUnit.BULK and o.dims == dims
    )
    commit = run.between(role, a, b, is_commit)
    if not commit:
        raise _error(f"{what}: the TMA store's bulk group is never committed")
    tr = run.traces[role]
    for y in run.between(
        role,
        commit[0],
        b,
        lambda o: isinstance(o, S.WaitGroup) and o.unit == GroupUnit.BULK and o.dims == dims,
    ):
        if len(run.between(role, commit[0], y, is_commit)) >= tr[y][0].pending:
            return y
    raise _error(f"{what}: no wait_group bulk retires the TMA store's reads before it")


def _check(run: _Run, prog: Program, d: Dep, needs: tuple[str, ...], a, b) -> None:
    role, pa = a
    name = (
        f"the {d.hazard.upper()} edge %{d.src} -> %{d.dst} on %{d.other} ({d.via})"
        if d.dst
        else f"the TMA store %{d.src} reading %{d.other}"
    )
    p = prog.leaves[d.src]
    if Need.BULK in needs:
        c = run.between(
            role, pa, None, lambda o: isinstance(o, S.CommitGroup) and o.unit == GroupUnit.BULK
        )
        if not c or not run.between(
            role,
            c[0],
            None,
            lambda o: isinstance(o, S.WaitGroup) and o.unit == GroupUnit.BULK and o.pending == 0,
        ):
            raise _error(
                f"{name}: the TMA store's bulk group is not committed and waited before the end"
            )
        return
    if d.via == Via.TILE and Need.EMPTY in needs:  # the readers release, the next tile's copy waits
        # (a same-tile barrier of the copy orders this tile's earlier readers, not the next tile)
        ename = next(
            (
                b.name
                for b in run.bars.values()
                if b.kind == BarrierKind.EMPTY
                and d.edge() in b.edges
                and b.stages == 1
                and not b.same_tile
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
    if d.via == Via.TILE:  # the barrier must follow the retiring wait (a wgmma) or the read
        start = _waited(run, role, pa, None, name) if Need.WAIT_GROUP in needs else pa
        threads = 32 * (prog.warps(d) or 0)
        if Need.BAR_SYNC in needs and not run.between(
            role, start, None, lambda o: isinstance(o, S.BarSync) and o.threads == threads
        ):
            raise _error(
                f"{name}: no named barrier of {threads} threads before the end of the tile"
            )
        if Need.SYNCWARP in needs and not run.between(
            role, start, None, lambda o: isinstance(o, S.SyncWarp)
        ):
            raise _error(f"{name}: no syncwarp before the end of the tile")
        return
    crole, pc = b
    if Need.FULL in needs:
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
    if Need.EMPTY in needs:
        ename = next(
            (
                b.name
                for b in run.bars.values()
                if b.kind == BarrierKind.EMPTY and d.edge() in b.edges
            ),
            None,
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
    if Need.WAIT_GROUP in needs:
        _waited(run, role, pa, pc, name)
    if Need.BULK_READ in needs:
        retired = _bulk_retired(run, role, pa, pc, name)
        threads = 32 * (prog.warps(d) or 0)
        if Need.BAR_SYNC in needs and not run.between(
            role, retired, pc, lambda o: isinstance(o, S.BarSync) and o.threads == threads
        ):
            raise _error(f"{name}: no named barrier of {threads} threads after the bulk wait")
        if Need.SYNCWARP in needs and not run.between(
            role, retired, pc, lambda o: isinstance(o, S.SyncWarp)
        ):
            raise _error(f"{name}: no syncwarp after the bulk wait")
    for need, cls, kind in (
        (Need.FENCE_WGMMA, S.Fence, FenceKind.WGMMA),
        (Need.PROXY, S.Fence, FenceKind.PROXY_ASYNC),
        (Need.SYNCWARP, S.SyncWarp, None),
    ):
        if need in needs and not run.between(
            role, pa, pc, lambda o: isinstance(o, cls) and (kind is None or o.kind == kind)
        ):
            raise _error(f"{name}: no {need.replace('_', ' ')} between them")
    if Need.FENCE_WGMMA in needs:
        last = run.between(
            role, pa, pc, lambda o: isinstance(o, S.Fence) and o.kind == FenceKind.WGMMA
        )[-1]
        if run.between(role, last, pc, lambda o: isinstance(o, S.Wait)):
            # the wait's try_wait loop is control flow: ptxas then re-fences the wgmma itself (C7519)
            raise _error(f"{name}: an mbarrier wait lies between the wgmma fence and the wgmma")
    if Need.BAR_SYNC in needs:
        threads = 32 * (prog.warps(d) or 0)
        found = run.between(
            role, pa, pc, lambda o: isinstance(o, S.BarSync) and o.threads == threads
        )
        if not found:
            raise _error(f"{name}: no named barrier of {threads} threads between them")
        if Need.PROXY in needs and not run.between(
            role,
            pa,
            found[-1],
            lambda o: isinstance(o, S.Fence) and o.kind == FenceKind.PROXY_ASYNC,
        ):
            raise _error(f"{name}: the proxy fence must come before the barrier")
