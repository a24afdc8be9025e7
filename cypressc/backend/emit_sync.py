"""Print a :class:`~cypressc.backend.plan.Sync` statement as CUDA C++: exactly its IR op
(:mod:`cypressc.ir.sync`; :mod:`cypressc.backend.sync_lower` decided its threads, stage and
parity), with a one-line comment of what it makes safe (``cypressc explain`` lists the event
edges behind it)."""

from __future__ import annotations

from cypressc.backend import plan as P
from cypressc.backend.emit_base import atom, c, cond, frag, per_atom
from cypressc.backend.names import sym
from cypressc.ir import sync as S
from cypressc.ir.kinds import FenceKind, GroupUnit, TurnKind

__all__ = ["emit_sync"]


def _fence_acc(w, p: P.KernelPlan, accs) -> None:
    """Order the compiler's accesses of the accumulators around an async wgmma point."""
    for acc in accs:
        atoms = frag(p, acc).rows // 64
        per_atom(w, atoms, f"cypress::fence_acc({sym(acc)}[{atom(atoms)}]);", unroll=False)


def _line(w, code: str, who, note: str) -> None:
    tail = f"  // {note}" if note else ""
    w(f"if ({cond(who)}) {code}{tail}" if who is not None else f"{code}{tail}")


def emit_sync(w, p: P.KernelPlan, st: P.Sync) -> None:
    """Print sync statement ``st`` of plan ``p`` with writer ``w`` (``w(line)``, ``w.open``,
    ``w.close``).  Raises AssertionError for an op the kernel has no CUDA for."""
    op = st.op
    if st.when is not None:
        w.open(f"if ({cond(st.when)})")
    bar = f"&{sym(st.bar)}[{c(st.stage, top=True)}]" if st.bar else ""
    if isinstance(op, S.Wait):
        _line(w, f"cypress::wait({bar}, {c(st.parity, top=True)});", st.who, st.note)
    elif isinstance(op, S.ArriveExpectTx):
        _line(w, f"cypress::arrive_expect_tx({bar}, {op.bytes});", st.who, st.note)
    elif isinstance(op, S.Arrive) and op.cluster:  # the stage of every block of the cluster
        _line(w, f"cypress::arrive_cluster<CLUSTER>({bar});", st.who, st.note)
    elif isinstance(op, S.Arrive):
        _line(w, f"cypress::arrive({bar});", st.who, st.note)
    elif isinstance(op, S.Fence) and op.kind == FenceKind.WGMMA:
        w(f"// wgmma.fence: {st.note}")
        _fence_acc(w, p, st.accs)
        _line(w, "cypress::wgmma_fence();", st.who, "")
    elif isinstance(op, S.Fence):
        _line(w, "cypress::fence_proxy_async();", st.who, st.note)
    elif isinstance(op, S.CommitGroup):
        call = (
            "cypress::commit();" if op.unit == GroupUnit.WGMMA else "cypress::tma_store_commit();"
        )
        _line(w, call, st.who, st.note)
    elif isinstance(op, S.WaitGroup) and op.unit == GroupUnit.WGMMA:
        _line(w, f"cypress::wait<{op.pending}>();", st.who, st.note)
        _fence_acc(w, p, st.accs)  # the registers' next reads stay after the wait
    elif isinstance(op, S.WaitGroup):
        _line(w, f"cypress::tma_store_wait<{op.pending}>();", st.who, st.note)
        if st.deferred and st.barrier is not None:
            bid, threads = st.barrier
            w(
                f"cypress::named_sync({c(bid)}, {threads});  // the other writers learn the store is done"
            )
    elif isinstance(op, S.SyncWarp):
        _line(w, "__syncwarp();", st.who, st.note)
    elif isinstance(op, S.BarSync):
        _line(w, f"cypress::named_sync({c(st.stage)}, {op.threads});", st.who, st.note)
    elif isinstance(op, S.Turn):  # ping-pong: wait for this warpgroup's turn / hand it to the next
        call = "named_sync" if op.kind == TurnKind.TAKE else "named_arrive"
        _line(w, f"cypress::{call}({c(st.stage)}, {op.threads});", st.who, st.note)
    else:
        raise AssertionError(f"no CUDA for {type(op).__name__}")
    if st.when is not None:
        w.close()
