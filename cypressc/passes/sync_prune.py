"""Dropping the ``wait_group N`` ops that sync-insertion placed but an earlier wait made
redundant: at most N wgmma (or bulk) groups can be in flight there on any path, e.g. the wait
after a loop whose every step ends waiting for 0; merging a ``fence wgmma`` into the one
before the same role's previous wgmma when only wgmma issues lie between them; and folding a
named barrier that only orders iterations two or more apart into another one of its loop."""

from __future__ import annotations

from dataclasses import replace

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.kinds import FenceKind, GroupUnit, Via
from cypressc.lang.intrinsics import leaf_of

__all__ = ["prune_wait_groups", "merge_wgmma_fences", "fold_far_barriers"]

_MANY = 1 << 16  # "any number of groups may be in flight"


def _flow(b: N.Block, state: dict) -> dict:
    """Groups possibly in flight per (role, unit) after ``b`` (loops: any trip count)."""
    return prune_wait_groups(b, state)[1]


def _join(a: dict, b: dict) -> dict:
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in set(a) | set(b)}


def _loop_entry(body: N.Block, before: dict) -> dict:
    """The state at the top of a loop body: before the loop, or after any iteration."""
    entry = dict(before)
    for _ in range(4):
        nxt = _join(before, _flow(body, entry))
        if nxt == entry:
            return entry
        entry = nxt
    return {k: (v if v == before.get(k, 0) else _MANY) for k, v in entry.items()}


def prune_wait_groups(b: N.Block, state: dict) -> tuple[N.Block, dict]:
    """Drop each ``wait_group N`` that at most N groups can reach (an earlier wait already
    retired what it would): e.g. the wait after a loop whose every step ends waiting for 0."""
    ops = []
    state = dict(state)
    last: dict[tuple, int] = {}  # (role, unit) -> index in ops of the last wait_group of this block
    for op in b.ops:
        if isinstance(op, S.CommitGroup):
            key = (op.role, op.unit)
            state[key] = min(state.get(key, 0) + 1, _MANY)
            last.pop(
                key, None
            )  # a later wait's groups may include this one: not the earlier wait's
        elif isinstance(op, S.WaitGroup):
            key = (op.role, op.unit)
            if state.get(key, 0) <= op.pending:
                if key in last and ops[last[key]].pending <= op.pending:
                    # the earlier wait realizes these edges too: it is where the registers of
                    # the retired groups may be read again (the kernel fences them there)
                    w = ops[last[key]]
                    ops[last[key]] = replace(w, edges=tuple(dict.fromkeys(w.edges + op.edges)))
                continue
            state[key] = op.pending
            last[key] = len(ops)
        elif isinstance(op, (N.For, N.PFor)):
            body, out = prune_wait_groups(op.body, _loop_entry(op.body, state))
            op = replace(op, body=body)
            state = _join(state, out)
        ops.append(op)
    return N.Block(tuple(ops), b.yields), state


def merge_wgmma_fences(b: N.Block) -> N.Block:
    """Fold each ``fence wgmma`` into the same role's previous one in the block when only
    wgmma issues (and ops that run no code: partitions, allocations) lie between them: no
    thread touched a register since that fence, so it already orders what this one would
    (PTX requires ``wgmma.fence`` between register accesses and the wgmmas that follow, not
    before each wgmma).  The earlier fence takes over the edges."""
    ops: list = []
    last: dict[str, int] = {}  # role -> index in ops of a fence only wgmma issues follow
    for op in b.ops:
        if isinstance(op, S.Fence) and op.kind == FenceKind.WGMMA:
            if op.role in last:
                f = ops[last[op.role]]
                ops[last[op.role]] = replace(f, edges=tuple(dict.fromkeys(f.edges + op.edges)))
                continue
            last[op.role] = len(ops)
        elif isinstance(op, (N.For, N.PFor)):
            op = replace(op, body=merge_wgmma_fences(op.body))
            last.clear()
        elif isinstance(op, S.SYNC_OPS):
            last.pop(
                getattr(op, "role", None), None
            )  # the role's waits and commits end its run of issues
        elif not (
            isinstance(op, N.Call)
            and leaf_of(op).asynchronous
            or isinstance(op, (N.Partition, N.Alloc, N.Let))
        ):
            last.clear()
        ops.append(op)
    return N.Block(tuple(ops), b.yields)


def fold_far_barriers(b: N.Block) -> N.Block:
    """Fold each named barrier of a loop body whose edges all join thread code (or a wgmma)
    to thread code two or more iterations later into another named barrier of the same role
    and threads in that body: a whole iteration runs between the two ends of such an edge, and
    the other barrier meets every thread in it.  An edge from a wgmma needs the wgmma retired
    before the threads meet, so the other barrier must follow a ``wait_group 0`` of the role
    in the body.  (A stage tile written by the threads each step and read by a wgmma: the
    write two steps later waits for the previous step's barrier, not one of its own.)  The
    other barrier takes over the edges."""
    ops = []
    for op in b.ops:
        if isinstance(op, (N.For, N.PFor)):
            body = fold_far_barriers(op.body)
            op = replace(op, body=_fold_in_body(body) if isinstance(op, N.For) else body)
        ops.append(op)
    return N.Block(tuple(ops), b.yields)


def _fold_in_body(body: N.Block) -> N.Block:
    evs = {o.ev: o for o in body.ops if isinstance(o, N.Call)}

    def far(e: S.Edge) -> bool:
        return (
            e.via == Via.CARRIED
            and e.distance >= 2
            and e.src in evs
            and e.dst in evs
            and not leaf_of(evs[e.dst]).asynchronous
        )

    ops = list(body.ops)
    bars = [i for i, o in enumerate(ops) if isinstance(o, S.BarSync)]
    into: dict[int, int] = {}
    for i in bars:
        o = ops[i]
        if not o.edges or i in into.values() or not all(far(e) for e in o.edges):
            continue
        retire = any(leaf_of(evs[e.src]).asynchronous for e in o.edges)
        for j in bars:
            q = ops[j]
            if j == i or j in into or (q.threads, q.role) != (o.threads, o.role):
                continue
            if isinstance(q.id, N.IConst) != isinstance(o.id, N.IConst):
                continue  # one barrier per warpgroup, or one for the block: not the same meeting
            if retire and not any(
                isinstance(w, S.WaitGroup)
                and w.unit == GroupUnit.WGMMA
                and w.pending == 0
                and w.role == o.role
                for w in ops[:j]
            ):
                continue
            into[i] = j
            break
    for i, j in into.items():
        ops[j] = replace(ops[j], edges=tuple(dict.fromkeys(ops[j].edges + ops[i].edges)))
    return N.Block(tuple(o for k, o in enumerate(ops) if k not in into), body.yields)
