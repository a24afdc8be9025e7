"""Dropping the ``wait_group N`` ops that sync-insertion placed but an earlier wait made
redundant: at most N wgmma (or bulk) groups can be in flight there on any path, e.g. the wait
after a loop whose every step ends waiting for 0; and merging a ``fence wgmma`` into the one
before the same role's previous wgmma when only wgmma issues lie between them."""

from __future__ import annotations

from dataclasses import replace

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.kinds import FenceKind
from cypressc.lang.intrinsics import leaf_of

__all__ = ["prune_wait_groups", "merge_wgmma_fences"]

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
