"""What each op does in the concurrent interpreter (:mod:`cypressc.ir.concurrent`): the
hardware semantics of the sync ops (mbarrier waits, arrivals and transaction bytes, wgmma and
bulk groups, named barriers, fences) and of the asynchronous work (TMA loads and stores,
wgmma), with the values computed by the sequential interpreter."""

from __future__ import annotations

import numpy as np

from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.concurrent_state import Bar, RaceChecks, Thread, op_label
from cypressc.ir.kinds import FenceKind, GroupUnit, TurnKind
from cypressc.ir.target import tma_copy_bytes
from cypressc.lang.intrinsics import DTYPE_BYTES, leaf_of
from cypressc.lang.kinds import Mem

__all__ = ["OpSemantics"]


class OpSemantics(RaceChecks):
    """Executing one op of one thread (:meth:`execute`, a generator that yields where the op
    blocks) and completing asynchronous work.  The interpreter sets, besides
    :class:`RaceChecks`' attributes, ``bars`` ((barrier, stage) -> :class:`Bar`),
    ``reg_pending`` (register tensor and warpgroup -> wgmmas in flight on it), ``inflight``
    (async completions), ``named`` / ``named_gen`` (named barriers), ``turns`` (ping-pong
    barriers: id -> [arrivals in the open phase, phases completed, takes in the open phase])
    and ``values``."""

    def execute(self, t: Thread, op, scope, envs):
        vi = self.vi
        if isinstance(op, S.Wait):
            bar = self.bar_key(op.bar, int(vi.expr(op.stage, scope, envs[0])))
            par = int(vi.expr(op.parity, scope, envs[0])) % 2
            if op.bar in self.tile_bars:
                par ^= t.tile % 2
            b = self.bars.get(bar) or self.fail("deadlock", op, f"%{op.bar} is not initialised")
            if b.phase % 2 == par:  # the phase of parity `par` has not completed yet
                t.ready = lambda: b.phase % 2 != par
                yield
            t.observed[bar] = max(t.observed.get(bar, 0), b.phase)
            if self.hb is not None:
                self.hb.on_wait(t, bar, b.phase)
        elif isinstance(op, (S.Arrive, S.ArriveExpectTx)):
            # arrive.cluster: on the stage of every block of the cluster (run_cluster)
            blocks = self.cluster if getattr(op, "cluster", False) else [self]
            for e in envs:
                stage = int(vi.expr(op.stage, scope, e))
                for blk in blocks:
                    bar = blk.bar_key(op.bar, stage)
                    b = blk.bars[bar]
                    if isinstance(op, S.ArriveExpectTx):
                        b.tx += op.bytes
                    for r in self.regions.values():  # this thread's finished reads: released
                        for rd in r.readers:
                            if rd["thread"] is t and rd["retired"]:
                                rd["tokens"].add((bar, b.phase))
                    if self.hb is not None:
                        self.hb.on_arrive(t, bar, b.phase)
                    blk.arrive(op, bar, b, 1)
        elif isinstance(op, S.CommitGroup):
            if op.unit == GroupUnit.WGMMA:
                t.mma_groups.append(t.open_mma)
                t.open_mma = []
            else:
                t.bulk_groups.append(t.open_bulk)
                t.open_bulk = []
        elif isinstance(op, S.WaitGroup):
            if op.unit == GroupUnit.WGMMA:
                while len(t.mma_groups) > op.pending:
                    for job in t.mma_groups.pop(0):
                        self.retire_mma(job)
                        if self.hb is not None:
                            self.hb.on_retire(t, job)
            else:
                # PTX: every group but the most recent `pending` complete (groups may complete
                # out of order, so not "at most `pending` groups in flight")
                older = t.bulk_groups[: max(0, len(t.bulk_groups) - op.pending)]
                done = lambda: all(j["done"] for g in older for j in g)  # noqa: E731
                if not done():
                    t.ready = done
                    yield
                if self.hb is not None:  # every group but the newest `pending` has completed
                    for g in older:
                        for j in g:
                            if j["done"]:
                                self.hb.on_retire(t, j)
        elif isinstance(op, S.BarSync):
            bid = int(vi.expr(op.id, scope, envs[0]))
            need = max(1, op.threads // 128)
            arrived = self.named.setdefault(bid, set())
            gen = self.named_gen.get(bid, 0)
            token = (("named", bid), gen)  # what the others observe once this generation completes
            for r in self.regions.values():  # this thread's finished reads: released to the others
                for rd in r.readers:
                    if rd["thread"] is t and rd["retired"]:
                        rd["tokens"].add(token)
            if self.hb is not None:
                self.hb.on_named_arrive(t, ("named", bid, gen))
            arrived.add(t.name)
            if len(arrived) >= need:
                self.named[bid] = set()
                self.named_gen[bid] = gen + 1
            else:
                t.ready = lambda: self.named_gen.get(bid, 0) > gen
                yield
            t.observed[token[0]] = max(t.observed.get(token[0], 0), gen + 1)
            if self.hb is not None:
                self.hb.on_named_pass(t, ("named", bid, gen))
        elif isinstance(op, S.Turn):
            # a named barrier of `threads`: each warpgroup's take (bar.sync) or pass (bar.arrive)
            # is 128 of them; a phase completes at `threads`, and only a take waits for that
            bid = int(vi.expr(op.id, scope, envs[0]))
            # [warpgroups arrived in this phase, phases done, takes among the arrivals]
            st = self.turns.setdefault(bid, [0, 0, 0])
            gen = st[1]
            if self.hb is not None:
                self.hb.on_named_arrive(t, ("turn", bid, gen))
            st[0] += 1
            st[2] += op.kind == TurnKind.TAKE
            if st[0] == max(1, op.threads // 128):
                if not st[2]:  # passes alone completed it: two warpgroups hold the turn at once
                    self.fail(
                        "race",
                        op,
                        f"turn barrier {bid} completes a phase that no warpgroup took: "
                        "the warpgroups' turns on the Tensor Core are out of step",
                    )
                st[0], st[1], st[2] = 0, gen + 1, 0
            elif op.kind == TurnKind.TAKE:
                t.ready = lambda: st[1] > gen
                yield
            if self.hb is not None and op.kind == TurnKind.TAKE:
                self.hb.on_named_pass(t, ("turn", bid, gen))
        elif isinstance(op, S.Fence):
            if op.kind == FenceKind.WGMMA:
                t.unfenced_regs.clear()
            else:
                t.dirty.clear()
        elif isinstance(op, S.SyncWarp):
            pass
        elif isinstance(op, N.Copy):
            self.copy(t, op, scope, envs)
        elif isinstance(op, N.Call):
            self.call(t, op, scope, envs)
        else:  # pragma: no cover - PFor inside a block is not produced by the passes
            self.fail("deadlock", op, f"unsupported op {type(op).__name__} in block code")

    def arrive(self, op, bar, b: Bar, n: int) -> None:
        b.arrivals += n
        if b.arrivals > b.count:
            self.fail(
                "race",
                op,
                f"%{bar[0]}[{bar[1]}] receives {b.arrivals} arrivals in one phase "
                f"(count {b.count})",
            )
        self.settle(b)

    @staticmethod
    def settle(b: Bar) -> None:
        if b.arrivals == b.count and b.tx == 0:
            b.phase += 1
            b.arrivals = 0

    def copy(self, t: Thread, op: N.Copy, scope, envs) -> None:
        if op.multicast and op.bar is not None and self.rank is not None:
            # the group's first block issues it for every block of the group, into each one's
            # storage and onto each one's barrier; the others issue nothing
            if any(self.rank[d] for d in op.multicast):
                return
            for blk in self.cluster:
                if all(blk.rank[d] == r for d, r in enumerate(self.rank) if d not in op.multicast):
                    sc = blk.scope_like(self, scope)
                    envs_b = [{**e, **blk.tiles[t.tile]} for e in envs]
                    # the issuer's tile lands in each block (the source at the issuer's indices)
                    blk.tma_load(t, op, sc, envs_b, [(self, scope, e) for e in envs])
            return
        if op.bar is not None:
            self.tma_load(t, op, scope, envs)
            return
        for e in envs:
            src, dst = self.regions_of(op.src, scope, e), self.regions_of(op.dst, scope, e)
            if src and src[0][0] == Mem.SHARED and not dst:  # TMA store: bulk group
                recs = []
                for _, key in src:
                    if key in t.dirty:
                        self.fail(
                            "race",
                            op,
                            f"TMA store reads %{key[0]} written by threads without "
                            "fence proxy_async",
                        )
                    recs.append(self.check_read(t, op, key, retired=False))
                job = {
                    "kind": "bulk",
                    "op": op_label(op, self.names),
                    "done": False,
                    "run": (op, scope, e),
                    "recs": recs,
                    "block": self,
                }
                if self.hb is not None:  # a copy.add from shared: a TMA reduce-add, as a store
                    lbl = op_label(op, self.names)
                    red = op.reduce is not None
                    self.hb.on_issue(
                        t,
                        job,
                        [(op.src, scope, e, False, lbl), (op.dst, scope, e, True, lbl, red)],
                    )
                t.open_bulk.append(job)
                self.inflight.append(("bulk", t, job))
            else:
                for mem, key in src:
                    if mem == Mem.SHARED:
                        self.check_read(t, op, key, retired=True)
                for mem, key in dst:
                    if mem == Mem.SHARED:
                        self.check_overwrite(t, op, key).writer = {"kind": "simt"}
                        t.dirty.add(key)
                if (
                    self.hb is not None and e is envs[0]
                ):  # the lanes' union: one instance's stripped view
                    lbl = op_label(op, self.names)
                    self.hb.thread_access(t, op.src, scope, e, False, lbl)
                    self.hb.thread_access(t, op.dst, scope, e, True, lbl, op.reduce is not None)
                if self.values:
                    self.do_copy(op, scope, e)

    def tma_load(self, t: Thread, op: N.Copy, scope, envs, sources=None) -> None:
        """A TMA load of thread ``t`` (of this block, or of the first block of a multicast
        group, :meth:`copy`: ``sources``, per instance, the issuing block, scope and indices
        its source is read at) into this block's storage: in flight until the scheduler
        completes it on this block's barrier."""
        for i, e in enumerate(envs):
            dst = self.regions_of(op.dst, scope, e)
            bar = self.bar_key(op.bar.bar, int(self.vi.expr(op.bar.stage, scope, e)))
            nbytes = self._bytes(op.dst, scope, e)
            job = {
                "kind": "tma",
                "op": op_label(op, self.names),
                "done": False,
                "bar": bar,
                "phase": None,
                "bytes": nbytes,
                "run": (op, scope, e),
                "block": self,
                "source": sources[i] if sources else None,
            }
            for _, key in dst:
                self.check_overwrite(t, op, key).writer = job
            if self.hb is not None:
                lbl = op_label(op, self.names)
                self.hb.on_issue(
                    t, job, [(op.src, scope, e, False, lbl), (op.dst, scope, e, True, lbl)]
                )
            self.inflight.append(("tma", t, job))

    def _bytes(self, v: N.View, scope, env) -> int:
        shape = self.sym.shape(v)
        n = int(np.prod([int(self.vi.expr(x, scope, env)) for x in shape]))
        # the GPU's bytes, what expect_tx counts
        return tma_copy_bytes(n * DTYPE_BYTES[self.sym.allocs[self.sym.root(v)].dtype], len(shape))

    def do_copy(self, op: N.Copy, scope, env, source=None) -> None:
        """``op`` at ``scope``/``env`` (``source``: the block, scope and indices its source is
        read at instead, a multicast copy's issuer)."""
        at, s_scope, s_env = source if source is not None else (self, scope, env)
        src, dst = at.vi.view(op.src, s_scope, s_env), self.vi.view(op.dst, scope, env)
        value = src.read().reshape(dst.shape)
        if op.reduce == "add":  # copy.add: an atomic dst += src when the copy completes
            value = dst.read().reshape(dst.shape) + value
        dst.write(value)

    def call(self, t: Thread, op: N.Call, scope, envs) -> None:
        fn = leaf_of(op)
        mma = fn.asynchronous
        regs, recs = set(), []
        views = [
            (i, a, fn.operands[i] if i < len(fn.operands) else None)
            for i, a in enumerate(op.args)
            if isinstance(a, (N.TRef, N.Piece))
        ]
        for e in envs[:1] if mma else envs:  # a wgmma's shared operands are the same per warpgroup
            for i, a, rule, (mem, key) in [
                (i, a, rule, reg) for i, a, rule in views for reg in self.regions_of(a, scope, e)
            ]:
                writes = rule is not None and rule.writes
                if mem == Mem.REGISTER:
                    rkey = (key[0], t.wg)
                    if self.reg_pending.get(rkey, 0) and not mma:
                        self.fail(
                            "race",
                            op,
                            f"touches %{key[0]} while a wgmma on it is in flight "
                            f"({t.name}: its group has not retired)",
                        )
                    if mma and rkey in t.unfenced_regs:
                        self.fail(
                            "race", op, f"wgmma on %{key[0]} written by threads without fence wgmma"
                        )
                    regs.add(rkey)
                elif mem == Mem.SHARED:
                    if mma and any(key in u.dirty for u in self.threads):
                        self.fail(
                            "race",
                            op,
                            f"wgmma reads %{key[0]} written by threads without fence "
                            "proxy_async (the async proxy may not see the writes)",
                        )
                    if rule is None or rule.reads:
                        recs.append(self.check_read(t, op, key, retired=not mma))
                    if writes:
                        self.check_overwrite(t, op, key).writer = {"kind": "simt"}
                        t.dirty.add(key)
        if self.hb is not None:
            lbl = op_label(op, self.names)
            acc = []  # (view, scope, env, writes, label): reads first, then writes
            for _, a, rule in views:
                if rule is None or rule.reads:
                    acc.append((a, scope, envs[0], False, lbl))
                if rule is not None and rule.writes:
                    acc.append((a, scope, envs[0], True, lbl))
        if mma:
            for rk in regs:
                self.reg_pending[rk] = self.reg_pending.get(rk, 0) + 1
            job = {
                "run": (op, scope, envs),
                "regs": regs,
                "recs": recs,
                "op": op_label(op, self.names),
            }
            if self.hb is not None:
                self.hb.on_issue(t, job, acc)
            t.open_mma.append(job)
            return
        if self.hb is not None:
            for a, sc, e, w, lbl in acc:
                self.hb.thread_access(t, a, sc, e, w, lbl)
        for i, a, rule in views:
            if (
                rule is not None
                and rule.writes
                and self.sym.allocs[self.sym.root(a)].mem == Mem.REGISTER
            ):
                t.unfenced_regs.add((self.sym.root(a), t.wg))
        if self.values:
            if fn.collective:  # a row reduction: the warpgroup's lanes together
                self.vi.call_group(op, [(scope, e) for e in envs])
            else:
                for e in envs:
                    self.vi.call(op, scope, e)

    def retire_mma(self, job) -> None:
        op, scope, envs = job["run"]
        if self.values:
            self.vi.call_group(op, [(scope, e) for e in envs])
        for rk in job["regs"]:
            self.reg_pending[rk] -= 1
        for rec in job["recs"]:
            rec["retired"] = True

    def complete(self, kind: str, t: Thread, job) -> None:
        if job.get("block", self) is not self:  # a multicast copy's share of another block
            job["block"].complete(kind, t, job)
            return
        op, scope, e = job["run"]
        if kind == "tma":
            b = self.bars[job["bar"]]
            job["phase"] = b.phase
            job["done"] = True
            if self.hb is not None:
                self.hb.on_complete_tma(job, job["bar"], b.phase)
            if self.values:
                self.do_copy(op, scope, e, job.get("source"))
            b.tx -= job["bytes"]
            self.settle(b)
        else:
            if self.values:
                self.do_copy(op, scope, e)
            job["done"] = True
            for rec in job["recs"]:
                rec["retired"] = True
