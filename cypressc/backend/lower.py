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
result is a :class:`~cypressc.backend.plan.KernelPlan` in ``module.attrs["kernel"]``.
Programs whose IR needs a shape of kernel this backend does not generate yet are
refused with E050 naming the operation.
"""

from __future__ import annotations

from dataclasses import replace

from cypressc.backend import plan as P
from cypressc.backend.lower_host import KernelInterface
from cypressc.backend.lower_simt import SimtLowering
from cypressc.backend.peephole import fold_zero_fills
from cypressc.backend.refusal import REFUSAL_CODE
from cypressc.backend.refusal import Refuse as _Refuse
from cypressc.backend.refusal import refuse as _refuse
from cypressc.backend.sync_lower import KBASE, at_step, counted, defer_store_waits, lower_sync
from cypressc.diagnostics import CypressError, Loc
from cypressc.ir import nodes as N
from cypressc.ir.analysis import Symbols
from cypressc.ir.hazards import evaluate
from cypressc.ir.printer import event_names, fmt_view
from cypressc.ir.shapes import static
from cypressc.ir.subst import walk_ops
from cypressc.ir import sync as S
from cypressc.ir.sync import SYNC_OPS
from cypressc.lang.intrinsics import atom as lookup_atom

__all__ = ["cuda_lowering", "REFUSAL_CODE"]

class _Lower(KernelInterface, SimtLowering):
    def __init__(self, m: N.Module, ctx) -> None:
        self.m, self.ctx = m, ctx
        self.sym = Symbols(m)
        self.lets = {o.name: o.value for o in walk_ops(m.body) if isinstance(o, N.Let)}
        self.block = ctx.tree.block_node()
        self.names = event_names(m)
        self.kvar: str | None = None
        self.host_var: str | None = None  # a parallelized HOST loop (see _host_loop)
        self.host_lo: N.IExpr = N.IConst(0)
        self.host_dim = 0  # its grid dimension: after the main loop's BLOCK dims
        self.last_only: set[str] = set()  # tensors whose writes only its last iteration keeps
        self.thread_index: dict[str, str] = {}  # WARP/THREAD -> C expression, inside SIMT code
        self.kname = "kb"  # the main-loop variable in C ("kn": a load issued STAGES - 1 steps ahead)
        self.lp: N.For | None = None
        self.persistent = False
        self.warpspecialize = True
        self.plan: P.KernelPlan | None = None
        self.role = "consumer"  # the role whose statement is being lowered

    def en(self, ev: str) -> str:
        """The event as `cypressc explain` prints it, for comments in the CUDA."""
        return self.names.get(ev, ev)

    # -- expressions -------------------------------------------------------------------
    def c(self, e: N.IExpr) -> str:
        if self.lp is not None and e == self.lp.hi and static(self.lp.lo) == 0:
            return "num_k"  # the main loop's trip count, computed once per kernel
        if isinstance(e, N.IConst):
            return str(e.value)
        if isinstance(e, N.IProc):
            if e.proc == "BLOCK":
                return f"b{e.dim}"
            if e.proc == "WARPGROUP":
                return "cw"
            if e.proc in self.thread_index:
                return self.thread_index[e.proc]
            _refuse(f"an address depends on the {e.proc.lower()} index")
        if isinstance(e, N.IVar):
            if e.name in self.lets:
                return self.c(self.lets[e.name])
            if e.name == self.kvar:
                return self.kname
            if e == KBASE:
                return "kbase"
            if e.name == self.host_var:
                lo = static(self.host_lo)
                return f"b{self.host_dim}" if lo == 0 else f"({self.c(self.host_lo)} + b{self.host_dim})"
            return e.name
        assert isinstance(e, N.IBin)
        a, b = self.c(e.a), self.c(e.b)
        if e.op == "cdiv":
            return f"cdiv({a}, {b})"
        if e.op in ("min", "max"):
            return f"{e.op}({a}, {b})"
        return f"({a} {'/' if e.op == '//' else e.op} {b})"

    def pos(self, e: N.IExpr, after: bool = False) -> str:
        """A pipeline position of the IR (stage index, phase parity) in C: over the block's
        running step in a persistent block (see :mod:`cypressc.backend.sync_lower`)."""
        if self.lp is not None and self.lp.pipeline and static(self.lp.lo) == 0:
            names = ("istage", "iphase") if self.kname == "kn" else ("stage", "phase")
            out = counted(e, self.kvar, self.lp.hi, self.lp.pipeline, after, *names)
            if out is not None:
                self.plan.counters.add((self.role, names[0]))
                return out
        if self.persistent and self.lp is not None:
            e = at_step(e, self.kvar, self.lp.hi, after)
            self.plan.counters.add((self.role, "kbase"))
        return self.c(e)

    def fragments_of(self, edges) -> tuple[str, ...]:
        """The register fragments among the tensors of ``edges`` (what a wgmma fence orders)."""
        return tuple(dict.fromkeys(e.tensor for e in edges if e.tensor in {f.name for f in self.plan.fragments}))

    def origin(self, v: N.View) -> tuple[str, list[N.IExpr], list[bool], list]:
        """Root, element origin per root dim, kept dims, and the mma partitions on the way."""
        chain = self.sym.chain(v)
        root = self.sym.root(v)
        rank = len(self.sym.allocs[root].shape)
        org: list[N.IExpr] = [N.IConst(0)] * rank
        keep = [True] * rank
        mmas = []
        for piece in reversed(chain):
            p = self.sym.parts[piece.partition]
            logical = [d for d in range(rank) if keep[d]]
            if p.kind == "blocks":
                for d, i, b in zip(logical, piece.idx, p.params):
                    org[d] = N.ibin("+", org[d], N.ibin("*", i, b))
            elif p.kind == "slices":
                d = logical[int(p.params[0].value)]
                org[d] = N.ibin("+", org[d], piece.idx[0])
                keep[d] = False
            else:
                mmas.append((p, piece))
        return root, org, keep, mmas

    def shape2(self, v: N.View) -> tuple[int, int]:
        s = [static(x) for x in self.sym.shape(v)]
        if len(s) != 2 or None in s:
            _refuse(f"{fmt_view(v)} is not a static 2-D tile")
        return s[0], s[1]  # type: ignore[return-value]

    # -- the kernel --------------------------------------------------------------------
    def run(self) -> P.KernelPlan:
        m = self.m
        body = list(m.body.ops)
        host = [o for o in body if isinstance(o, N.For) and not o.dims]
        if host:
            if len(host) > 1 or any(isinstance(o, (N.Copy, N.Call, N.PFor)) for o in body):
                _refuse("HOST code other than one sequential loop around the blocks")
            body = self._host_loop(host[0])
        loops = [o for o in body if isinstance(o, N.For)]
        if len(loops) != 1:
            _refuse(f"the block program has {len(loops)} sequential main loops; this backend "
                    "generates kernels with exactly one")
        lp = loops[0]
        self.kvar = lp.var
        grid_dims = [d for d in lp.dims if d.proc == "BLOCK"]
        if not grid_dims or len(grid_dims) != len(lp.dims):
            _refuse("the main loop must run once per block")
        self.host_dim = len(grid_dims)
        inst = self.block.instance
        ws = bool(m.attrs.get("warpspecialize"))
        stages = lp.pipeline or 1
        tensors = [P.GlobalTensor(a.name, a.dtype, tuple(self.c(s) for s in a.shape),
                                  *self._privileges(a.name)) for a in m.params]
        consumers = 1
        for o in walk_ops(m.body):
            for d in getattr(o, "dims", ()):
                if d.proc == "WARPGROUP":
                    consumers = static(d.extent)
                    if consumers is None or consumers < 1:
                        _refuse("a run-time or empty number of warpgroups")
        grid = [d.extent for d in grid_dims]
        if self.host_var is not None:
            grid.append(N.ibin("-", host[0].hi, host[0].lo))
        trip = N.ibin("-", lp.hi, lp.lo)
        plan = P.KernelPlan(
            name=m.name, tensors=tensors, sizes=list(m.scalars), grid=[self.c(g) for g in grid],
            grid_exprs=[self._sized(g) for g in grid], trip_expr=self._sized(trip), host_loop=self.host_var,
            raster=inst.raster or 16, persistent=bool(inst.persistent), consumers=consumers,
            stages=stages, trip_count=self.c(trip), maps=[], buffers=[], loads=[],
            fragments=[], producer_registers=inst.producer_registers or 40,
            consumer_registers=inst.consumer_registers or (240 if consumers == 1 else 232),
            mma_in_flight=1 if inst.mma_in_flight is None else inst.mma_in_flight,
            warpspecialize=ws)
        if stages < 2:
            _refuse("`pipeline:` below 2 (one stage cannot overlap copies with wgmma)")
        if not 0 <= plan.mma_in_flight < stages:
            _refuse(f"`mma_in_flight: {plan.mma_in_flight}` with {stages} stages: a stage stays "
                    "read while its wgmma group is in flight, so it must be below `pipeline:`")
        if not ws and plan.mma_in_flight > 1:
            _refuse("`mma_in_flight` above 1 without warp specialization (thread 0 refills the stage "
                    "of the previous step)")
        regs = m.attrs.get("register_budget")
        if regs is not None:
            plan.producer_registers, plan.consumer_registers = regs
        self._check_names(plan)
        self.plan, self.lp, self.persistent, self.warpspecialize = plan, lp, plan.persistent, ws
        plan.smem_bytes = int(m.attrs.get("smem_bytes", 0))
        self._barriers(plan, body)
        smem = m.attrs.get("smem", {})
        i = body.index(lp)
        roles = m.role_map()
        for sec, ops in (("before", body[:i]), ("loop", list(lp.body.ops)), ("after", body[i + 1:])):
            for o in ops:
                if isinstance(o, N.For):
                    _refuse("a second sequential loop")
                role = o.role if isinstance(o, SYNC_OPS) and hasattr(o, "role") else \
                    roles.get(getattr(o, "ev", ""), "consumer")
                ahead = not ws and sec == "loop" and role != "producer" and self._issues_loads(o)
                self.kname = "kn" if ahead else "kb"
                self.role = "producer" if role == "producer" else "consumer"
                try:
                    st = self._stmt(plan, o, sec, role, smem)
                finally:
                    self.kname = "kb"
                if st is None:
                    continue
                if ahead:  # the frame runs these on the issuer thread
                    plan.issue_ahead.append(replace(st, who=None) if isinstance(st, P.Sync) else st)
                else:
                    getattr(getattr(plan, "producer" if role == "producer" else "consumer"), sec).append(st)
        for code in (plan.consumer, plan.producer):
            code.before, code.loop, code.after = (fold_zero_fills(x) for x in (code.before, code.loop, code.after))
        if getattr(self, "_pending_stage", None) is not None:
            _refuse("a register fragment copied into shared memory that is never stored")
        if not any(isinstance(st, P.Load) for sec in (plan.producer.loop, plan.consumer.loop, plan.issue_ahead)
                   for st in sec):
            _refuse("no GLOBAL->SHARED copies in the main loop")
        if plan.persistent:
            try:
                defer_store_waits(plan.consumer, plan.exit)
            except ValueError as e:
                _refuse(str(e))
        if m.attrs.get("war") and plan.persistent:
            _refuse("shared tensors that share bytes in a persistent kernel")
        plan.requires = self._requires(plan)
        plan.flops = self._flops(plan)
        plan.flops_c = self._size_c(plan.flops)
        return plan

    def _barriers(self, plan: P.KernelPlan, body: list) -> None:
        """The IR's mbarrier arrays, laid out after the tensors (resource allocation and
        sync-insertion reserved their bytes there)."""
        off = int(self.m.attrs.get("barrier_offset", 0))
        self.bar_kind = {}
        for b in self._mbarriers(body):
            plan.barriers.append(P.Barrier(b.name, b.kind, b.stages, b.count, off,
                                           "channel of " + ", ".join(self.en(e) for e in b.channel)))
            self.bar_kind[b.name] = b.kind
            off += 8 * b.stages

    @staticmethod
    def _mbarriers(body: list) -> list:
        return [o for b in body for o in ([b] if not isinstance(b, N.For) else b.body.ops)
                if isinstance(o, S.MBarrier)]

    def _issues_loads(self, o) -> bool:
        """A TMA load with the ops that start it (the wait for its stage, the expected bytes):
        without a producer warpgroup these run STAGES - 1 steps ahead on the issuer thread."""
        if isinstance(o, N.Copy):
            return self.sym.mem(o.src) == "GLOBAL" and self.sym.mem(o.dst) == "SHARED"
        if isinstance(o, S.ArriveExpectTx):
            return True
        return isinstance(o, S.Wait) and self.bar_kind.get(o.bar) == "empty"

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
            if sec == "loop":
                return self._load(plan, o, smem)
            if sec == "after":
                return self._store(plan, o, smem)
            return self._load_once(plan, o, smem, role)
        if isinstance(o, N.Call):
            if sec != "loop":
                return self._simt(plan, o, sec == "before", smem)
            if o.fn == "row_sum":
                return self._row_sum(plan, o)
            if o.fn in ("fill", "copy") and not self._is_vector(o.args[0]):
                return self._simt_loop(plan, o)
            if o.fn != "warpgroup_mma":
                _refuse(f"leaf {o.fn}() inside the main loop")
            self._whole_warpgroups(o)
            return self._mma(plan, o)
        _refuse(f"{type(o).__name__} {'inside' if sec == 'loop' else sec} the main loop")
        return None

    def _buffer(self, plan: P.KernelPlan, v: N.View, smem) -> tuple[P.StageBuffer, list[N.IExpr]]:
        root, org, keep, _ = self.origin(v)
        a = self.sym.allocs[root]
        existing = {b.name: b for b in plan.buffers}
        if root not in existing:
            shape = [static(s) for s in a.shape]
            if None in shape or len(shape) not in (2, 3):
                _refuse(f"shared tensor %{root} is not a static (stages x) rows x cols tile")
            rows, cols = shape[-2], shape[-1]
            sw = P.swizzle_for(cols)
            if sw is None:
                _refuse(f"shared tile %{root} has {cols} columns ({2 * cols}-byte rows); TMA and wgmma "
                        "swizzle rows of 128, 64 or 32 bytes, so a tile needs a multiple of 16 columns "
                        "(16-bit elements)")
            if rows % 8:
                _refuse(f"shared tile %{root} has {rows} rows; swizzled tiles are whole 8-row atoms")
            st = shape[0] if len(shape) == 3 else 1
            existing[root] = P.StageBuffer(root, a.dtype, rows, cols, st, smem.get(root, (0, 0, 1))[0], sw)
            plan.buffers.append(existing[root])
        return existing[root], org

    def _stage(self, buf: P.StageBuffer, org: list[N.IExpr]) -> str:
        """The stage index of a view of a pipelined buffer, as a pipeline position in C."""
        return self.pos(org[0]) if buf.stages > 1 and len(org) == 3 else "0"

    def _load_once(self, plan: P.KernelPlan, o: N.Copy, smem, role: str) -> P.Load:
        """A GLOBAL->SHARED copy before the main loop (a tile every step reads, like
        FlashAttention's Q): one TMA load per tile on its own unstaged buffer and barrier, phase
        0, issued by the producer (without one, by the issuer thread).  A persistent block runs
        its tiles on the same barrier and buffer: the phase would be the count of tiles done so
        far, and the next tile's load would overwrite the panel while the last steps of the
        previous tile may still read it (a hazard across tiles the per-tile IR does not show),
        so that is refused."""
        where = f"copy {fmt_view(o.src)} -> {fmt_view(o.dst)} before the main loop"
        if self.sym.mem(o.src) != "GLOBAL" or self.sym.mem(o.dst) != "SHARED":
            _refuse(where)
        if self.persistent:
            _refuse(f"{where} ({self.en(o.ev)}) in a persistent block: its tiles would share the "
                    "copy's mbarrier and buffer, and the next tile's copy would overwrite the buffer "
                    "while the previous tile may still read it; map the block with `persistent: false`")
        ld = self._load(plan, o, smem, where)
        if role != "producer" and not self.warpspecialize:
            ld = replace(ld, who="issuer")
            plan.loads[-1] = ld
        return ld

    def _load(self, plan: P.KernelPlan, o: N.Copy, smem, where: str = "") -> P.Load:
        if self.sym.mem(o.src) != "GLOBAL" or self.sym.mem(o.dst) != "SHARED":
            _refuse(where or f"copy {fmt_view(o.src)} -> {fmt_view(o.dst)} in the main loop")
        buf, dorg = self._buffer(plan, o.dst, smem)
        if o.bar is None:
            _refuse(f"TMA copy {self.en(o.ev)} completes on no mbarrier")
        root, org, keep, mmas = self.origin(o.src)
        if mmas:
            _refuse("a TMA load of an mma partition")
        box = []
        kept = [d for d, k in enumerate(keep) if k]
        if len(kept) != 2:
            _refuse(f"{fmt_view(o.src)} is not a 2-D tile")
        if kept != [len(keep) - 2, len(keep) - 1]:
            _refuse(f"{fmt_view(o.src)}: a TMA tile must span the two innermost dimensions of %{root}")
        if buf.rows > 256:
            _refuse(f"a {buf.rows}-row shared tile: one TMA box spans at most 256 rows")
        for d, k in enumerate(keep):  # one box per chunk: its inner extent is one swizzle row
            box.append(1 if not k else (buf.rows if d == kept[0] else buf.chunk_cols))
        tmap = f"tm_{root}_{buf.rows}x{buf.chunk_cols}"
        if tmap not in {t.name for t in plan.maps}:
            plan.maps.append(P.TmaMap(tmap, root, tuple(box), buf.swizzle))
        ld = P.Load(self.en(o.ev), tmap, buf.name, tuple(self.c(x) for x in org), buf.chunks,
                    self._stage(buf, dorg), o.bar.bar, self.pos(o.bar.stage))
        plan.loads.append(ld)
        return ld

    def _fragment(self, plan: P.KernelPlan, v: N.View) -> P.Fragment:
        if not isinstance(v, N.TRef) or self.sym.allocs[v.name].mem != "REGISTER":
            _refuse(f"{fmt_view(v) if isinstance(v, (N.TRef, N.Piece)) else v} is not a register fragment")
        a = self.sym.allocs[v.name]
        for f in plan.fragments:
            if f.name == a.name:
                return f
        _, _, _, mmas = self.origin(a.layout) if a.layout is not None else (None, None, None, [])
        if not mmas or mmas[0][0].params[1] != "WARP" or mmas[0][0].params[2] not in ("A", "C"):
            _refuse(f"register tensor %{a.name} is not laid out by partition_by_mma(..., WARP, \"C\")")
        rows, cols = self.shape2(mmas[0][0].base)
        if a.dtype != "f32" and (a.dtype not in ("f16", "bf16") or cols % 16):
            _refuse(f"register tensor %{a.name}: a {a.dtype} fragment (registers hold f32 accumulators, "
                    "or f16/bf16 wgmma A operands of whole k16 steps)")
        f = P.Fragment(a.name, rows, cols, a.dtype)
        plan.fragments.append(f)
        return f

    def _wg_tile(self, v: N.View) -> N.View:
        """The warpgroup's whole tile behind a wgmma operand piece: a thread's piece of a
        ``partition_by_mma`` is what it holds, the instruction reads the tile."""
        while True:
            if isinstance(v, N.Piece) and self.sym.parts[v.partition].kind == "mma":
                v = self.sym.parts[v.partition].base
                continue
            lay = self.sym.allocs[v.name].layout if isinstance(v, N.TRef) else None
            if isinstance(lay, N.Piece) and self.sym.parts[lay.partition].kind == "mma" \
                    and self.sym.mem(lay) == self.sym.allocs[v.name].mem:
                v = lay
                continue
            return v

    def _mma(self, plan: P.KernelPlan, o: N.Call) -> P.Mma:
        at, c, a, b = o.args
        f = self._fragment(plan, c)
        atom = lookup_atom(at.name)
        if atom.n != f.cols:
            _refuse(f"{at.name} on a {f.rows}x{f.cols} accumulator: this backend needs the atom's N "
                    "to equal the warpgroup tile's columns")
        b = self._wg_tile(b)
        bbuf, borg = self._buffer(plan, b, {})
        kb, nb = self.shape2(b)
        if self.sym.mem(a) == "REGISTER":
            fa = self._fragment(plan, a)
            if fa.dtype not in ("f16", "bf16") or fa.rows != f.rows or fa.cols != kb or nb != f.cols:
                _refuse(f"wgmma operand shapes {fa.rows}x{fa.cols} {fa.dtype} (registers) x {kb}x{nb} do not "
                        f"match the {f.rows}x{f.cols} accumulator")
            if static(borg[-2]) != 0:
                _refuse("a wgmma B operand that starts inside its stage tile along K (a K sub-tile)")
            mm = P.Mma(self.en(o.ev), f.name, "", "0", bbuf.name, self._b_chunk(bbuf, borg), kb,
                       atom.n, fa.dtype, "0", self._stage(bbuf, borg), "0", a_frag=fa.name)
            plan.body.append(mm)
            return mm
        a = self._wg_tile(a)
        abuf, aorg = self._buffer(plan, a, {})
        ma, ka = self.shape2(a)
        if ka != kb or nb != f.cols or ma != f.rows:
            _refuse(f"wgmma operand shapes {self.shape2(a)} x {self.shape2(b)} do not match the "
                    f"{f.rows}x{f.cols} accumulator")
        if static(borg[-2]) != 0 or (static(aorg[-1]) != 0 and abuf.stages > 1):
            _refuse("a wgmma operand that starts inside its stage tile along K (a K sub-tile)")
        if ka % 16:
            _refuse(f"a K tile of {ka}: wgmma consumes K in steps of 16")
        a_col = self._k_slice(abuf, aorg[-1], ka)
        a_row = self.c(aorg[-2])
        b_chunk = self._b_chunk(bbuf, borg)
        dt = self.sym.allocs[abuf.name].dtype
        mm = P.Mma(self.en(o.ev), f.name, abuf.name, a_row, bbuf.name, b_chunk, ka, atom.n,
                   dt, self._stage(abuf, aorg), self._stage(bbuf, borg), a_col)
        plan.body.append(mm)
        return mm

    @staticmethod
    def _b_chunk(bbuf: P.StageBuffer, borg: list[N.IExpr]) -> int:
        """The swizzle chunk of ``bbuf`` a wgmma B operand starts at (its first column must be
        a static chunk boundary)."""
        b_col = static(borg[-1])
        if b_col is None or b_col % bbuf.chunk_cols:
            _refuse(f"B operand columns must start on a {bbuf.chunk_cols}-column boundary (a chunk of "
                    f"the {bbuf.swizzle}-byte-swizzled %{bbuf.name})")
        return b_col // bbuf.chunk_cols

    def _k_slice(self, buf: P.StageBuffer, col: N.IExpr, k: int) -> str:
        """The first column (C) of a wgmma A operand in an unstaged shared tile: a K slice of a
        tile every step reads (an A panel copied in before the main loop).  At every step of
        the main loop the slice must start on a k16 step and end inside the tile."""
        if static(col) == 0:
            return "0"
        lp = self.lp
        lo, hi = (static(lp.lo), static(lp.hi)) if lp is not None else (None, None)
        for step in range(lo, hi) if lo is not None and hi is not None and hi - lo <= 1 << 16 else (None,):
            try:
                c0 = evaluate(col, {lp.var: step} if step is not None else {}, self.lets)
            except (KeyError, ZeroDivisionError):
                _refuse(f"a wgmma A operand at column {self.c(col)} of %{buf.name}: a K slice of a shared "
                        "tile needs a column that depends only on the main loop's variable, over a "
                        "static trip count")
            if not isinstance(c0, int) or c0 % 16 or not 0 <= c0 <= buf.cols - k:
                _refuse(f"a wgmma A operand at column {c0} (step {step}) of the {buf.cols}-column "
                        f"%{buf.name}: a {k}-column K slice must start on a multiple of 16 inside the tile")
        return self.c(col)

    @staticmethod
    def _whole_warpgroups(o: N.Call) -> None:
        """Thread-level code must run on every thread of each consumer warpgroup (the fragment
        layouts and the wgmma instruction assume 4 warps of 32 threads)."""
        inner = [(d.proc, static(d.extent)) for d in o.dims if d.proc in ("WARP", "THREAD")]
        if inner != [("WARP", 4), ("THREAD", 32)]:
            _refuse(f"{o.fn}() runs on {inner or 'no'} warps/threads of a warpgroup; the backend "
                    "needs all 4 warps x 32 threads")

    def _simt(self, plan: P.KernelPlan, o: N.Call, before: bool, smem):
        if o.args and self._is_vector(o.args[0]):
            return self._simt_vector(plan, o, before)
        self._whole_warpgroups(o)
        if o.fn == "fill" and before:
            f = self._fragment(plan, o.args[0])
            plan.prologue.append(P.Fill(self.en(o.ev), f.name, self.c(o.args[1])))
        elif o.fn == "add" and not before:
            f = self._fragment(plan, o.args[0])
            g = self._fragment(plan, o.args[1])
            plan.epilogue.append(P.Add(self.en(o.ev), f.name, g.name))
        elif o.fn == "copy" and not before and self.sym.mem(o.args[1]) == "SHARED":
            f = self._fragment(plan, o.args[0])
            root, _, _, mmas = self.origin(o.args[1])
            dt = self.sym.allocs[root].dtype
            if not mmas or dt not in ("f16", "bf16"):
                _refuse(f"copy of a register fragment into {fmt_view(o.args[1])}: the backend stages "
                        "16-bit tiles laid out like the fragment")
            self._pending_stage = (o, f, root, dt)
            plan.epilogue.append(P.StageWrite(self.en(o.ev), f.name, root, smem.get(root, (0, 0, 1))[0], dt))
        elif o.fn == "copy" and not before:
            f = self._fragment(plan, o.args[0])
            dst = o.args[1]
            root, org, keep, mmas = self.origin(dst)
            if not mmas:
                _refuse(f"copy of a register fragment into {fmt_view(dst)}, which is not laid out "
                        "like it")
            kept = [d for d, k in enumerate(keep) if k]
            batch = [self.c(org[d]) for d, k in enumerate(keep) if not k]
            row0, col0 = self.c(org[kept[0]]), self.c(org[kept[1]])
            mem = self.sym.allocs[root].mem
            dt = self.sym.allocs[root].dtype
            if dt not in ("f16", "bf16"):
                _refuse(f"an epilogue storing {dt} (the backend stores 16-bit outputs)")
            if kept != [len(keep) - 2, len(keep) - 1]:
                _refuse(f"{fmt_view(dst)}: a stored tile must span the two innermost dimensions")
            if mem != "GLOBAL":
                _refuse(f"copy into {mem}")
            plan.epilogue.append(P.StoreDirect(self.en(o.ev), f.name, root, row0, col0,
                                               batch[0] if batch else None, dt, self._when(root)))
        else:
            _refuse(f"leaf {o.fn}() {'before' if before else 'after'} the main loop")
        return plan.epilogue[-1] if not before else plan.prologue[-1]

    def _store(self, plan: P.KernelPlan, o: N.Copy, smem) -> P.TmaStore:
        pend = getattr(self, "_pending_stage", None)
        if pend is None or self.sym.mem(o.src) != "SHARED" or self.sym.mem(o.dst) != "GLOBAL":
            _refuse(f"copy {fmt_view(o.src)} -> {fmt_view(o.dst)} after the main loop")
        call, f, sroot, dt = pend
        if self.sym.root(o.src) != sroot:
            _refuse("a shared staging tile stored from a different tensor")
        root, org, keep, _ = self.origin(o.dst)
        if root in self.last_only:
            _refuse(f"a last-iteration write of %{root} through a staged TMA store")
        kept = [d for d, k in enumerate(keep) if k]
        if kept != [len(keep) - 2, len(keep) - 1]:
            _refuse(f"{fmt_view(o.dst)}: a stored tile must span the two innermost dimensions")
        batch = [self.c(org[d]) for d, k in enumerate(keep) if not k]
        tmap = f"tm_{root}_64x64"
        if tmap not in {t.name for t in plan.maps}:
            plan.maps.append(P.TmaMap(tmap, root, tuple(1 if not k else 64 for k in keep)))
        off = smem.get(sroot, (0, 0, 1))[0]
        st = P.TmaStore(self.en(o.ev), f.name, sroot, tmap, off, self.c(org[kept[0]]), self.c(org[kept[1]]),
                        batch[0] if batch else None)
        plan.epilogue.append(st)
        self._pending_stage = None
        return st

def cuda_lowering(m: N.Module, ctx) -> N.Module:
    """Lower events and views to a :class:`KernelPlan` (paper §4.2.6); E050 if unsupported."""
    try:
        plan = _Lower(m, ctx).run()
    except _Refuse as r:
        block = ctx.tree.block_node()
        loc = ctx.tree.mapping.instance_loc(block.instance.instance, "instance") if block else Loc(ctx.mapping_path)
        raise CypressError(REFUSAL_CODE, f"the CUDA backend cannot lower this program yet: {r}", loc,
                           hint="the IR passes and `cypressc explain` still work; see docs/language.md "
                           "for the kernel shapes the backend generates") from None
    attrs = dict(m.attrs)
    attrs["kernel"] = plan
    return replace(m, attrs=attrs)
