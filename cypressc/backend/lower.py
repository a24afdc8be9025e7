"""Pass 6, ``cuda-lowering`` (Cypress paper §4.2.6): events become Hopper synchronization.

The lowering walks the warp-specialized IR and decides, per event:

* producer GLOBAL→SHARED copy → TMA load completing on ``full[k mod D]``
  (``arrive.expect_tx`` with the stage's bytes); its consumers ``wait(full, phase)``;
* the backward edge of a stage buffer → ``arrive(empty[s])`` by each consumer
  warpgroup once the wgmma group that read it retired (``wait<P>``, P = ``mma_in_flight``);
* Tensor Core calls → ``wgmma.fence`` / ``commit_group`` / ``wait_group``;
* a copy whose precondition broadcasts over the warps and threads of a warpgroup
  (``e[…, wg, :, :]``) → a named barrier over that warpgroup's 128 threads;
* point-wise indexed events → nothing (program order in one thread).

Views become TMA coordinates, shared-memory descriptors and register fragments.  The
result is a :class:`~cypressc.backend.plan.KernelPlan` in ``module.kernel``.
Programs whose IR needs a shape of kernel this backend does not generate yet are
refused with E050 naming the operation.
"""

from __future__ import annotations

from dataclasses import replace

from cypressc.backend import plan as P
from cypressc.backend.cexpr import cexpr, mentions
from cypressc.backend.lower_expr import ExprLowering
from cypressc.backend.lower_host import KernelInterface
from cypressc.backend.lower_mem import MemoryLowering
from cypressc.backend.lower_mma import MmaLowering
from cypressc.backend.lower_rows import RowLowering
from cypressc.backend.lower_simt import SimtLowering
from cypressc.backend.peephole import defer_row_sums, fold_zero_fills, guard_dead_row_sums
from cypressc.backend.refusal import REFUSAL_CODE
from cypressc.backend.refusal import Refuse as _Refuse
from cypressc.backend.refusal import refuse as _refuse
from cypressc.backend.sync_lower import (
    carry_turns,
    defer_store_waits,
    lower_sync,
)
from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.passes.base import ModulePass
from cypressc.ir.target import Target, cluster_shape
from cypressc.ir.analysis import Symbols
from cypressc.ir.printer import event_names, fmt_view
from cypressc.ir.shapes import static
from cypressc.ir.subst import walk_ops
from cypressc.ir import sync as S
from cypressc.ir.sync import SYNC_OPS
from cypressc.lang.intrinsics import IntrinsicKind as K
from cypressc.lang.intrinsics import leaf_of
from cypressc.ir.kinds import BarrierKind, Role
from cypressc.lang.kinds import Mem, Proc

__all__ = ["cuda_lowering", "REFUSAL_CODE"]


class _Lower(KernelInterface, ExprLowering, SimtLowering, MemoryLowering, MmaLowering, RowLowering):
    """The lowering of one warp-specialized module to a :class:`~cypressc.backend.plan.KernelPlan`
    (state of the walk; raises :class:`~cypressc.backend.refusal.Refuse` for E050)."""

    def __init__(self, m: N.Module) -> None:
        self.m = m
        self.target = m.target or Target.default(m.name)
        self.sym = Symbols(m)
        self.lets = {o.name: o.value for o in walk_ops(m.body) if isinstance(o, N.Let)}
        self.names = event_names(m)
        self.kvar: str | None = None
        self.host_var: str | None = None  # a parallelized HOST loop (see _host_loop)
        self.host_lo: N.IExpr = N.IConst(0)
        self.host_dim = 0  # its grid dimension: after the main loop's BLOCK dims
        self.last_only: set[str] = set()  # tensors whose writes only its last iteration keeps
        self.thread_index: dict[
            str, N.IExpr
        ] = {}  # WARP/THREAD -> kernel expression, inside SIMT code
        self.kname = "kb"  # the main-loop variable in the kernel ("kn": a load issued STAGES - 1 steps ahead)
        self.lp: N.For | None = None  # the main loop whose statements are being lowered
        self.loop_no = 0  # ... its place among the block's main loops
        self.section = "loop"  # before / loop / after: where in the tile the statement lies
        self.persistent = False
        self.warpspecialize = True
        self.plan: P.KernelPlan | None = None
        self.role = Role.CONSUMER  # the role whose statement is being lowered

    # -- the kernel --------------------------------------------------------------------

    def _one_element_operands_in_global(self) -> None:
        """A ``tensor[(1,), …]`` operand of an external leaf is one element each thread loads
        from global memory (``lower_simt``); refused here, before the shared buffers are laid
        out, when the mapping puts it elsewhere."""
        for o in walk_ops(self.m.body):
            ext = leaf_of(o).external if isinstance(o, N.Call) else None
            if ext is None:
                continue
            for a, prm in zip(o.args, ext.params):
                if ext.broadcast(prm.name) and self.sym.mem(a) != Mem.GLOBAL:
                    _refuse(
                        f"{o.fn}() reads {fmt_view(a)} in {self.sym.mem(a)} as its one-element "
                        f"operand '{prm.name}': a tensor[(1,), ...] operand is read from global "
                        "memory (map it GLOBAL)"
                    )

    def run(self) -> P.KernelPlan:
        m = self.m
        body = list(m.body.ops)
        host = [o for o in body if isinstance(o, N.For) and not o.dims]
        if host:
            if len(host) > 1 or any(isinstance(o, (N.Copy, N.Call, N.PFor)) for o in body):
                _refuse("HOST code other than one sequential loop around the blocks")
            body = self._host_loop(host[0])
        loops = [o for o in body if isinstance(o, N.For)]
        # no main loop: the block runs its statements once, in program order, as if after an
        # empty main loop (direct loads and stores, no TMA, no pipeline)
        flat = not loops
        lp = loops[0] if loops else None
        self.kvar = lp.var if lp is not None else None
        grid_dims = self._grid_dims(body) if flat else [d for d in lp.dims if d.proc == Proc.BLOCK]
        if not flat and (not grid_dims or len(grid_dims) != len(lp.dims)):
            _refuse("the main loop must run once per block")
        for other in loops[1:]:
            if other.dims != lp.dims:
                _refuse("main loops that do not all run once per block")
            if (other.pipeline or 1) != (lp.pipeline or 1):
                _refuse("main loops with different pipeline depths (one `pipeline:` per block)")
        self.host_dim = len(grid_dims)
        inst = self.target.block
        ws = bool(m.schedule is not None and m.schedule.warpspecialize)
        stages = (lp.pipeline or 1) if lp is not None else 1
        if flat and ws:
            _refuse(
                "a block program without a main loop under `warpspecialize: true` (no loads for "
                "a producer warpgroup to issue); map the block with `warpspecialize: false`"
            )
        tensors = [
            P.GlobalTensor(
                a.name, a.dtype, tuple(cexpr(self.k(s)) for s in a.shape), *self._privileges(a.name)
            )
            for a in m.params
        ]
        consumers = 1
        for o in walk_ops(m.body):
            for d in getattr(o, "dims", ()):
                if d.proc == Proc.WARPGROUP:
                    consumers = static(d.extent)
                    if consumers is None or consumers < 1:
                        _refuse("a run-time or empty number of warpgroups")
        grid = [d.extent for d in grid_dims]
        if self.host_var is not None:
            grid.append(N.ibin("-", host[0].hi, host[0].lo))
        trips = [N.ibin("-", x.hi, x.lo) for x in loops]
        steps = trips[0] if trips else N.IConst(0)
        for t in trips[1:]:
            steps = N.ibin("+", steps, t)
        plan = P.KernelPlan(
            name=m.name,
            tensors=tensors,
            sizes=list(m.scalars),
            floats=list(m.floats),
            size_aliases=dict(m.size_aliases),
            grid=[self.k(g) for g in grid],
            grid_exprs=[self._sized(g) for g in grid],
            trip_expr=self._sized(steps),
            host_loop=self.host_var,
            raster=inst.raster or 16,
            persistent=bool(inst.persistent),
            consumers=consumers,
            stages=stages,
            trips=[self.k(t) for t in trips],
            maps=[],
            buffers=[],
            loads=[],
            fragments=[],
            producer_registers=inst.producer_registers or 40,
            consumer_registers=inst.consumer_registers or (240 if consumers == 1 else 232),
            mma_in_flight=1 if inst.mma_in_flight is None else inst.mma_in_flight,
            warpspecialize=ws,
        )
        self._one_element_operands_in_global()
        if stages < 2 and not flat:
            _refuse("`pipeline:` below 2 (one stage cannot overlap copies with wgmma)")
        if not flat and not 0 <= plan.mma_in_flight < stages:
            _refuse(
                f"`mma_in_flight: {plan.mma_in_flight}` with {stages} stages: a stage stays "
                "read while its wgmma group is in flight, so it must be below `pipeline:`"
            )
        if not ws and len(loops) > 1:
            _refuse(
                "more than one main loop without warp specialization (the issuer thread runs one "
                "loop's loads ahead); map the block with `warpspecialize: true`"
            )
        if not ws and plan.mma_in_flight > 1:
            _refuse(
                "`mma_in_flight` above 1 without warp specialization (thread 0 refills the stage "
                "of the previous step)"
            )
        if not ws and any(isinstance(o, S.Turn) for o in walk_ops(m.body)):
            # the IR's turns and the concurrent interpreter do not see the issuer's loads, which
            # the backend moves into a consumer warpgroup (found hanging on an H100)
            _refuse(
                "`pingpong` without warp specialization: the issuer thread, in a consumer warpgroup, "
                "loads STAGES - 1 steps ahead and waits there for the other warpgroup to release a "
                "stage, while its warpgroup holds the turn that the other one waits for (a deadlock); "
                "map the block with `warpspecialize: true`, or drop `pingpong`"
            )
        regs = m.resources.register_budget if m.resources is not None else None
        if regs is not None:
            plan.producer_registers, plan.consumer_registers = regs
        self.plan, self.lp, self.persistent, self.warpspecialize = plan, lp, plan.persistent, ws
        plan.smem_bytes = m.resources.smem_bytes if m.resources is not None else 0
        self._barriers(plan, body)
        smem = m.resources.smem if m.resources is not None else {}
        at = [body.index(x) for x in loops] + [len(body)]
        sections = [("before", 0, body[: at[0]])] if not flat else [("after", 0, body)]
        for n, x in enumerate(loops):
            sections += [("loop", n, list(x.body.ops)), ("after", n, body[at[n] + 1 : at[n + 1]])]
        for code in (plan.producer, plan.consumer):
            code.loops, code.afters = [[] for _ in loops or [0]], [[] for _ in loops or [0]]
        roles = m.role_map()
        for sec, n, ops in sections:
            self.lp = loops[n] if loops else None
            self.kvar, self.loop_no, self.section = self.lp and self.lp.var, n, sec
            for o in ops:
                if isinstance(o, N.For):
                    _refuse("a sequential loop inside the main loop")
                role = (
                    o.role
                    if isinstance(o, SYNC_OPS) and hasattr(o, "role")
                    else roles.get(getattr(o, "ev", ""), Role.CONSUMER)
                )
                ahead = not ws and sec == "loop" and role != Role.PRODUCER and self._issues_loads(o)
                self.kname = "kn" if ahead else "kb"
                self.role = Role.PRODUCER if role == Role.PRODUCER else Role.CONSUMER
                try:
                    st = self._stmt(plan, o, sec, role, smem)
                finally:
                    self.kname = "kb"
                if st is None:
                    continue
                if ahead:  # the frame runs these on the issuer thread
                    plan.issue_ahead.append(replace(st, who=None) if isinstance(st, P.Sync) else st)
                else:
                    code = plan.producer if role == Role.PRODUCER else plan.consumer
                    (
                        code.before
                        if sec == "before"
                        else (code.loops if sec == "loop" else code.afters)[n]
                    ).append(st)
        self.lp, self.kvar, self.loop_no, self.section = lp, lp and lp.var, 0, "loop"
        plan.ring_extra = [x.ring_extra for x in loops]
        for code in (plan.consumer, plan.producer):
            code.before = fold_zero_fills(code.before)
            code.loops = [fold_zero_fills(x) for x in code.loops]
            code.afters = [fold_zero_fills(x) for x in code.afters]
        if getattr(self, "_pending_stage", None) is not None:
            _refuse("a register fragment copied into shared memory that is never stored")
        if not flat and not any(
            isinstance(st, P.Load)
            for sec in (*plan.producer.loops, *plan.consumer.loops, plan.issue_ahead)
            for st in sec
        ):
            _refuse("no GLOBAL->SHARED copies in the main loop")
        if plan.persistent:
            try:
                defer_store_waits(plan.consumer, plan.exit)
                carry_turns(plan, body)
            except ValueError as e:
                _refuse(str(e))
        if plan.persistent and any(static(x.hi) is not None for x in loops):
            _refuse(
                "a persistent block whose main loop has a static trip count: its pipeline positions "
                "after the loop are folded to constants, which are wrong from the block's second tile "
                "on; map the block with `persistent: false`"
            )
        if m.resources is not None and m.resources.war and plan.persistent:
            # the next tile rewrites shared bytes only through a copy that waits on its tile
            # channel's empty mbarrier (resource allocation shares only such a copy's bytes)
            reloaded = {
                self.sym.root(self.sym.events[ev].dst)
                for b in self._mbarriers(body)
                if b.kind == BarrierKind.EMPTY and b.stages == 1 and not b.same_tile
                for ev in b.channel
            }
            if any(not set(pair) & reloaded for pair in m.resources.war):
                _refuse(
                    "shared tensors that share bytes in a persistent kernel, neither of them "
                    "loaded once per tile on an empty mbarrier"
                )
        if plan.ordered and plan.persistent:
            # a persistent block may walk its tiles out of the order along the grid's last
            # dimension (the long + short pairs) and then wait for a tile it has yet to run
            _refuse(
                "an ordered reduce-add (deterministic: true) in a persistent kernel; map the "
                "block with `persistent: false`"
            )
        self._cluster(plan)
        guard_dead_row_sums(plan)
        defer_row_sums(plan)
        plan.requires = self._requires(plan)
        plan.flops = self._flops(plan)
        return plan

    def _cluster(self, plan: P.KernelPlan) -> None:
        """The mapping's ``cluster`` when a copy is multicast (cluster-multicast), and what
        the tile walk of a cluster cannot do: the clusters walk their tiles together, one
        cluster tile at a time, so every block of a cluster runs the same pipeline steps."""
        shape = cluster_shape(self.m)
        if not any(ld.multicast for ld in plan.loads):
            return
        if plan.ordered:
            _refuse("an ordered reduce-add (deterministic: true) in a kernel of clusters")
        if plan.host_loop is not None:
            _refuse("a HOST loop run as a grid dimension in a kernel of clusters")
        if any(mentions(t, f"b{i}") for t in plan.trips for i in range(len(plan.grid))):
            _refuse(
                "a kernel of clusters with a main loop whose trip count depends on the block "
                "(the blocks of a cluster run the same pipeline steps); drop `cluster:`"
            )
        plan.cluster = tuple(shape)

    @staticmethod
    def _grid_dims(body: list) -> list[N.Dim]:
        """The BLOCK dimensions of a block program without a main loop: those every statement
        of it runs over (its leading ones)."""
        grids = {
            tuple(d for d in o.dims if d.proc == Proc.BLOCK)
            for o in body
            if isinstance(o, (N.Call, N.Copy)) and getattr(o, "dims", ())
        }
        if len(grids) != 1 or not next(iter(grids)):
            _refuse("a block program without a main loop whose statements run over other blocks")
        return list(grids.pop())

    def _barriers(self, plan: P.KernelPlan, body: list) -> None:
        """The IR's mbarrier arrays, laid out after the tensors (resource allocation and
        sync-insertion reserved their bytes there)."""
        off = self.m.resources.barrier_offset if self.m.resources is not None else 0
        self.bar_kind = {}
        self.tile_bars = S.once_per_tile(N.Block(tuple(body), ()))  # one phase per tile: `^ tphase`
        for b in self._mbarriers(body):
            plan.barriers.append(
                P.Barrier(
                    b.name,
                    b.kind,
                    b.stages,
                    b.count,
                    off,
                    "channel of " + ", ".join(self.en(e) for e in b.channel),
                )
            )
            self.bar_kind[b.name] = b.kind
            off += 8 * b.stages

    @staticmethod
    def _mbarriers(body: list) -> list:
        return [
            o
            for b in body
            for o in ([b] if not isinstance(b, N.For) else b.body.ops)
            if isinstance(o, S.MBarrier)
        ]

    def _issues_loads(self, o) -> bool:
        """A TMA load with the ops that start it (the wait for its stage, the expected bytes):
        without a producer warpgroup these run STAGES - 1 steps ahead on the issuer thread."""
        if isinstance(o, N.Copy):
            return self.sym.mem(o.src) == Mem.GLOBAL and self.sym.mem(o.dst) == Mem.SHARED
        if isinstance(o, S.ArriveExpectTx):
            return True
        return isinstance(o, S.Wait) and self.bar_kind.get(o.bar) == BarrierKind.EMPTY

    def _stmt(self, plan: P.KernelPlan, o, sec: str, role: str, smem):
        """The kernel statement of IR op ``o`` in section ``sec`` of the tile (None: nothing)."""
        bar = o.bar.bar if isinstance(o, N.Copy) and o.bar is not None else getattr(o, "bar", None)
        if isinstance(bar, str) and bar not in self.bar_kind:
            _refuse(f"mbarrier %{bar} is used but not declared")
        if isinstance(o, SYNC_OPS):
            return lower_sync(self, o, sec, role)
        if isinstance(o, (N.Partition, N.Alloc, N.Let)):
            return None
        if isinstance(o, N.Copy):
            if o.reduce and self.sym.mem(o.src) == Mem.REGISTER:
                return self._reduce_direct(plan, o)
            if sec == "loop" and not self._issues_loads(o):
                return self._store(plan, o, smem, in_loop=True)
            if sec == "loop":
                return self._load(plan, o, smem)
            if sec == "after" and not self._issues_loads(o):
                if self._is_row_vector(o.src):
                    return self._row_store(plan, o)
                return self._store(plan, o, smem)
            return self._load_once(plan, o, smem, role)
        if isinstance(o, N.Call):
            if leaf_of(o).external is not None:
                st = self._external(plan, o)
                if sec != "loop":
                    (plan.prologue if sec == "before" else plan.epilogue).append(st)
                return st
            kind = leaf_of(o).kind
            if leaf_of(o).over_rows or kind in (K.FILL, K.COPY) and self._is_row_vector(o.args[0]):
                return self._row_op(plan, o, sec)
            if sec != "loop" and kind is K.COPY and self.sym.mem(o.args[0]) == Mem.GLOBAL:
                self._whole_warpgroups(o)
                return self._load_direct(plan, o)
            if (
                sec != "loop" and leaf_of(o).asynchronous
            ):  # a step peeled off the loop (software pipelining)
                self._whole_warpgroups(o)
                return self._mma(plan, o)
            if (
                sec != "loop"
                and kind is K.COPY
                and self.sym.mem(o.args[1]) == Mem.REGISTER
                and not self._is_vector(o.args[0])
            ):
                return self._simt_loop(plan, o)
            if sec != "loop":
                return self._simt(plan, o, sec == "before", smem)
            if kind is K.ROW_SUM:
                return self._row_sum(plan, o)
            if kind is K.COPY and self.sym.mem(o.args[1]) == Mem.SHARED:
                if self._staged_for_store(o.args[1]):
                    return self._stage_write(plan, o, smem, in_loop=True)
                return self._write_shared(plan, o, smem)
            if kind in (K.FILL, K.COPY) and not self._is_vector(o.args[0]):
                return self._simt_loop(plan, o)
            if not leaf_of(o).asynchronous:
                _refuse(f"leaf {o.fn}() inside the main loop")
            self._whole_warpgroups(o)
            return self._mma(plan, o)
        _refuse(f"{type(o).__name__} {'inside' if sec == 'loop' else sec} the main loop")
        return None

    def _simt(self, plan: P.KernelPlan, o: N.Call, before: bool, smem):
        if o.args and self._is_vector(o.args[0]):
            return self._simt_vector(plan, o, before)
        kind = leaf_of(o).kind
        if kind is K.FILL and before and self.sym.mem(o.args[0]) == Mem.SHARED:
            plan.prologue.append(self._fill_shared(plan, o, smem))
            return plan.prologue[-1]
        self._whole_warpgroups(o)
        if kind is K.FILL and before:
            f = self._fragment(plan, o.args[0])
            plan.prologue.append(P.Fill(self.en(o.ev), f.name, self.k(o.args[1])))
        elif kind is K.FILL:  # after the main loop (a block without one: its only section)
            f = self._fragment(plan, o.args[0])
            plan.epilogue.append(P.Fill(self.en(o.ev), f.name, self.k(o.args[1])))
        elif kind in (K.ADD, K.MUL) and not before:
            f = self._fragment(plan, o.args[0])
            g = self._fragment(plan, o.args[1])
            plan.epilogue.append(
                P.Add(self.en(o.ev), f.name, g.name, "+" if kind is K.ADD else "*")
            )
        elif kind is K.SCALE and not before:
            f = self._fragment(plan, o.args[0])
            plan.epilogue.append(P.Scale(self.en(o.ev), f.name, self.k(o.args[1])))
        elif kind is K.COPY and not before and self.sym.mem(o.args[1]) == Mem.SHARED:
            self._stage_write(plan, o, smem)
        elif kind is K.COPY and not before:
            self._store_direct(plan, o)
        else:
            _refuse(f"leaf {o.fn}() {'before' if before else 'after'} the main loop")
        return plan.epilogue[-1] if not before else plan.prologue[-1]


def _refuse_reductions(m: N.Module) -> None:
    """E050 at the first ``copy.add`` that adds neither a register fragment (lowered to
    ``red.global.add``: :meth:`MemoryLowering._reduce_direct`) nor a shared tile (a TMA
    reduce-add: :meth:`MemoryLowering._store`) into global memory."""
    sym = Symbols(m)
    red = next(
        (
            o
            for o in walk_ops(m.body)
            if isinstance(o, N.Copy)
            and o.reduce
            and (sym.mem(o.src) not in (Mem.REGISTER, Mem.SHARED) or sym.mem(o.dst) != Mem.GLOBAL)
        ),
        None,
    )
    if red is None:
        return
    site = m.sites.tensors.get(N.view_root(red.src, sym.parts)) if m.sites else None
    raise CypressError(
        REFUSAL_CODE,
        f"the CUDA backend cannot lower this program yet: a reduce copy (copy.{red.reduce} "
        f"into {fmt_view(red.dst)}) of a reduces= argument",
        site.loc if site is not None else (m.target or Target.default(m.name)).loc,
        hint="the IR passes, the interpreters and `cypressc explain` still work; the backend "
        "adds register fragments or shared tiles into global memory",
    )


def cuda_lowering(m: N.Module) -> N.Module:
    """Lower events and views to a :class:`KernelPlan` (paper §4.2.6) for ``m.target``; E050,
    located at the mapping's BLOCK instance, if unsupported (a reduction, ``copy.add``, at
    the launch whose ``reduces=`` argument it adds back)."""
    _refuse_reductions(m)
    try:
        plan = _Lower(m).run()
    except _Refuse as r:
        raise CypressError(
            REFUSAL_CODE,
            f"the CUDA backend cannot lower this program yet: {r}",
            (m.target or Target.default(m.name)).loc,
            hint="the IR passes and `cypressc explain` still work; see docs/language.md "
            "for the kernel shapes the backend generates",
        ) from None
    return replace(m, kernel=plan)


class CudaLowering(ModulePass):
    """The pass object of :func:`cuda_lowering`: the last step of the pipeline (paper §4.2.6),
    the module's ``kernel`` set to its :class:`KernelPlan`."""

    name, section = "cuda-lowering", "§4.2.6"

    def apply(self, m: N.Module) -> N.Module:
        return cuda_lowering(m)
