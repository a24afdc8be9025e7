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

import re
from dataclasses import replace

from cypressc.backend import plan as P
from cypressc.diagnostics import CypressError, Loc
from cypressc.ir import nodes as N
from cypressc.ir.analysis import Symbols, free_vars, views_of
from cypressc.ir.printer import event_names, fmt_view
from cypressc.ir.shapes import static
from cypressc.ir.subst import walk_ops
from cypressc.ir.sync import SYNC_OPS
from cypressc.lang.intrinsics import atom as lookup_atom

__all__ = ["cuda_lowering", "REFUSAL_CODE"]

REFUSAL_CODE = "E050"  # a program whose IR needs a kernel shape this backend does not generate


class _Refuse(Exception):
    pass


def _refuse(msg: str) -> None:
    raise _Refuse(msg)


class _Lower:
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

    def en(self, ev: str) -> str:
        """The event as `cypressc explain` prints it, for comments in the CUDA."""
        return self.names.get(ev, ev)

    # -- expressions -------------------------------------------------------------------
    def c(self, e: N.IExpr) -> str:
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
                return "kb"
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
    def _mentions(self, e: N.IExpr, var: str) -> bool:
        """Whether ``e`` depends on ``var``, through Lets too."""
        return any(n == var or (n in self.lets and self._mentions(self.lets[n], var)) for n in free_vars(e))

    def _when(self, root: str) -> str | None:
        """The condition writes of ``root`` are kept under (a last-iteration write), or None."""
        return f"b{self.host_dim} == tiles{self.host_dim} - 1" if root in self.last_only else None

    def _host_loop(self, hl: N.For) -> list[N.Op]:
        """A sequential HOST loop around the block program becomes the last grid dimension.

        Its iterations may run in parallel when (1) no iteration reads a global tensor that
        an iteration writes, (2) every write whose view depends on the loop variable ``j``
        goes to a piece ``P[.., j, ..]`` of a blocks partition (disjoint for distinct j),
        and (3) loop bounds and shapes inside do not depend on ``j``.  A write whose view
        does not depend on ``j`` goes to the same elements in every iteration and nothing
        reads them, so sequentially only the last iteration's write survives: it is kept
        under ``j == last`` (lastprivate) — the programs' result, not an approximation.
        """
        j = hl.var
        params = {a.name for a in self.m.params}
        reads: set[str] = set()
        writes: dict[str, list[N.View]] = {}
        for o in walk_ops(hl.body):
            for e in [getattr(o, "lo", None), getattr(o, "hi", None),
                      *(d.extent for d in getattr(o, "dims", ())),
                      *(getattr(o, "shape", ()) or ()),
                      *(x for x in (getattr(o, "params", ()) if isinstance(o, N.Partition) else ())
                        if isinstance(x, (N.IConst, N.IVar, N.IBin, N.IProc)))]:
                if e is not None and self._mentions(e, j):
                    _refuse(f"a loop bound, shape or tile size inside the HOST loop over {j} depends on {j}")
            for v, r, w in views_of(o):
                root = self.sym.root(v)
                if root not in params:
                    continue
                if r:
                    reads.add(root)
                if w:
                    writes.setdefault(root, []).append(v)
        both = sorted(reads & set(writes))
        if both:
            _refuse(f"iterations of the HOST loop over {j} read {', '.join(both)}, which iterations "
                    "write: they cannot run as parallel blocks")
        for root, views in writes.items():
            dep = [any(self._mentions(i, j) for p in self.sym.chain(v) for i in p.idx) for v in views]
            if not any(dep):
                self.last_only.add(root)
                continue
            for v, d in zip(views, dep):
                ok = False
                for piece in self.sym.chain(v):
                    part = self.sym.parts[piece.partition]
                    for i in piece.idx:
                        if isinstance(i, N.IVar) and i.name == j and part.kind == "blocks":
                            ok = True
                        elif self._mentions(i, j):
                            _refuse(f"{fmt_view(v)} indexes with an expression of {j}; "
                                    f"iterations of the HOST loop must write disjoint pieces P[.., {j}, ..]")
                if not (d and ok):
                    _refuse(f"%{root} is written both at pieces that depend on {j} and at pieces that "
                            "do not")
        self.host_var, self.host_lo = j, hl.lo
        return list(hl.body.ops)

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
        grid = [self.c(d.extent) for d in grid_dims]
        if self.host_var is not None:
            grid.append(self.c(N.ibin("-", host[0].hi, host[0].lo)))
        plan = P.KernelPlan(
            name=m.name, tensors=tensors, sizes=list(m.scalars), grid=grid, host_loop=self.host_var,
            raster=inst.raster or 16, persistent=bool(inst.persistent), consumers=consumers,
            stages=stages, trip_count=self.c(N.ibin("-", lp.hi, lp.lo)), maps=[], buffers=[], loads=[],
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
        smem = m.attrs.get("smem", {})
        # stage buffers and TMA loads
        for o in lp.body.ops:
            if isinstance(o, N.Copy):
                self._load(plan, o, smem)
            elif isinstance(o, N.Call):
                if o.fn == "row_sum":
                    self._row_sum(plan, o)
                    continue
                if o.fn != "warpgroup_mma":
                    _refuse(f"leaf {o.fn}() inside the main loop")
                self._whole_warpgroups(o)
                self._mma(plan, o)
            elif not isinstance(o, (N.Partition, N.Alloc, N.Let, *SYNC_OPS)):
                _refuse(f"{type(o).__name__} inside the main loop")
        before = True
        for o in body:
            if o is lp:
                before = False
                continue
            if isinstance(o, N.Call):
                self._simt(plan, o, before, smem)
            elif isinstance(o, N.Copy):
                self._store(plan, o, smem)
            elif isinstance(o, N.For):
                _refuse("a second sequential loop")
        if getattr(self, "_pending_stage", None) is not None:
            _refuse("a register fragment copied into shared memory that is never stored")
        if not plan.loads:
            _refuse("no GLOBAL->SHARED copies in the main loop")
        plan.smem_bytes = int(m.attrs.get("smem_bytes", 0))
        # resource allocation let tensors with disjoint live ranges share bytes: the WAR
        # edge from the last readers (every consumer's wgmmas) to the next writer
        plan.war_barrier = bool(m.attrs.get("war"))
        if plan.war_barrier and plan.persistent:
            _refuse("shared tensors that share bytes in a persistent kernel")
        for t in tensors:
            if t.reads or any(isinstance(s, P.StoreStaged) and s.map.startswith(f"tm_{t.name}_")
                              for s in plan.epilogue):
                plan.requires.append((f"{t.dims[-1]} % 8 == 0",
                                      f"the innermost extent of {t.name} ({t.dims[-1]}) must be a multiple "
                                      "of 8: TMA needs 16-byte row strides"))
            elif t.writes and t.dtype in ("f16", "bf16"):
                plan.requires.append((f"{t.dims[-1]} % 2 == 0",
                                      f"the innermost extent of {t.name} ({t.dims[-1]}) must be even"))
            out_dims = {d for o in tensors if o.writes for d in o.dims}
            if t.reads:  # an empty output needs no launch; an empty reduction dim has no TMA map
                for d in dict.fromkeys(x for x in t.dims if x not in out_dims):
                    plan.requires.append((f"{d} > 0", f"{t.name} is read through TMA, which needs a "
                                          f"non-empty tensor ({d} > 0)"))
        plan.requires = list(dict.fromkeys(plan.requires))
        plan.flops = self._flops(plan) or "0.0"
        return plan

    RESERVED = {"s", "t", "r", "c", "a", "b", "e", "i", "j", "kb", "kk", "kn", "cw", "wg", "ls", "dev",
                "grid", "sms", "full", "empty", "smem", "smem_raw", "phase", "lphase", "prev_s", "leader",
                "issuer", "num_k", "num_tiles", "tiles", "stage_c", "box", "rc", "da", "db", "per", "u",
                "v", "group", "first", "rows", "stream", "cdiv", "min", "max", "tw", "rr", "STAGES", "CONSUMERS",
                "THREADS", "RASTER", "STAGE_TX", "SMEM_BYTES"}

    def _check_names(self, plan: P.KernelPlan) -> None:
        """Size and tensor names become C++ identifiers next to the kernel's own locals."""
        for name in [*plan.sizes, *(t.name for t in plan.tensors)]:
            if name in self.RESERVED or re.fullmatch(r"b\d+|tiles\d*", name) \
                    or name.startswith(("tm_", "s_")):
                _refuse(f"the name '{name}' clashes with an identifier of the generated kernel; rename it")

    def _flops(self, plan: P.KernelPlan) -> str:
        """Useful multiply-adds: for each wgmma, 2 x (rows of A) x (columns of B) x K, over
        the global tensors its operands are loaded from (batch dimensions multiply)."""
        src = {ld.buffer: next(m.tensor for m in plan.maps if m.name == ld.map) for ld in plan.loads}
        dims = {t.name: t.dims for t in plan.tensors}
        terms = []
        for mm in plan.body:
            a, b = dims[src[mm.a_buf]], dims[src[mm.b_buf]]
            terms.append(" * ".join(["2.0", *a[:-2], a[-2], b[-1], a[-1]]))
        return " + ".join(terms)

    def _access(self, name: str, writes: bool) -> bool:
        """Whether any copy or leaf reads (or writes) global tensor ``name``, by the
        leaf functions' operand rules."""
        return any(self.sym.root(v) == name and (w if writes else r)
                   for o in walk_ops(self.m.body) for v, r, w in views_of(o))

    def _privileges(self, name: str) -> tuple[bool, bool]:
        """(reads, writes) of a kernel parameter.  A parameter no operation touches (a program
        whose entry task declares it but never passes it on) keeps its declared privilege: the
        kernel takes it and leaves it alone."""
        reads, writes = self._reads(name), self._writes(name)
        if not (reads or writes):
            root = self.ctx.tree.root.variant
            writes = name in root.writes
            reads = not writes or name in root.reads
        return reads, writes

    def _reads(self, name: str) -> bool:
        return self._access(name, writes=False)

    def _writes(self, name: str) -> bool:
        return self._access(name, writes=True)

    def _buffer(self, plan: P.KernelPlan, v: N.View, smem) -> tuple[P.StageBuffer, list[N.IExpr]]:
        root, org, keep, _ = self.origin(v)
        a = self.sym.allocs[root]
        existing = {b.name: b for b in plan.buffers}
        if root not in existing:
            shape = [static(s) for s in a.shape]
            if None in shape or len(shape) not in (2, 3):
                _refuse(f"shared tensor %{root} is not a static (stages x) rows x cols tile")
            rows, cols = shape[-2], shape[-1]
            if cols % 64:
                _refuse(f"shared tile %{root} has {cols} columns; 128-byte-swizzled tiles need a "
                        "multiple of 64 (16-bit elements)")
            st = shape[0] if len(shape) == 3 else 1
            existing[root] = P.StageBuffer(root, a.dtype, rows, cols, st, smem.get(root, (0, 0, 1))[0])
            plan.buffers.append(existing[root])
        return existing[root], org

    def _load(self, plan: P.KernelPlan, o: N.Copy, smem) -> None:
        if self.sym.mem(o.src) != "GLOBAL" or self.sym.mem(o.dst) != "SHARED":
            _refuse(f"copy {fmt_view(o.src)} -> {fmt_view(o.dst)} in the main loop")
        buf, _ = self._buffer(plan, o.dst, smem)
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
        for d, k in enumerate(keep):
            box.append(1 if not k else (buf.rows if d == kept[0] else 64))
        tmap = f"tm_{root}_{buf.rows}x{64}"
        if tmap not in {t.name for t in plan.maps}:
            plan.maps.append(P.TmaMap(tmap, root, tuple(box)))
        plan.loads.append(P.Load(self.en(o.ev), tmap, buf.name, tuple(self.c(x) for x in org), buf.cols // 64))

    def _fragment(self, plan: P.KernelPlan, v: N.View) -> P.Fragment:
        if not isinstance(v, N.TRef) or self.sym.allocs[v.name].mem != "REGISTER":
            _refuse(f"{fmt_view(v) if isinstance(v, (N.TRef, N.Piece)) else v} is not a register fragment")
        a = self.sym.allocs[v.name]
        for f in plan.fragments:
            if f.name == a.name:
                return f
        _, _, _, mmas = self.origin(a.layout) if a.layout is not None else (None, None, None, [])
        if not mmas or mmas[0][0].params[1] != "WARP" or mmas[0][0].params[2] != "C":
            _refuse(f"register tensor %{a.name} is not laid out by partition_by_mma(..., WARP, \"C\")")
        rows, cols = self.shape2(mmas[0][0].base)
        f = P.Fragment(a.name, rows, cols)
        plan.fragments.append(f)
        return f

    def _mma(self, plan: P.KernelPlan, o: N.Call) -> None:
        at, c, a, b = o.args
        f = self._fragment(plan, c)
        atom = lookup_atom(at.name)
        if atom.n != f.cols:
            _refuse(f"{at.name} on a {f.rows}x{f.cols} accumulator: this backend needs the atom's N "
                    "to equal the warpgroup tile's columns")
        abuf, aorg = self._buffer(plan, a, {})
        bbuf, borg = self._buffer(plan, b, {})
        ma, ka = self.shape2(a)
        kb, nb = self.shape2(b)
        if ka != kb or nb != f.cols or ma != f.rows:
            _refuse(f"wgmma operand shapes {self.shape2(a)} x {self.shape2(b)} do not match the "
                    f"{f.rows}x{f.cols} accumulator")
        if static(aorg[-1]) != 0 or static(borg[-2]) != 0:
            _refuse("a wgmma operand that starts inside its stage tile along K (a K sub-tile)")
        if ka % 16:
            _refuse(f"a K tile of {ka}: wgmma consumes K in steps of 16")
        a_row = self.c(aorg[-2])
        b_col = static(borg[-1])
        if b_col is None or b_col % 64:
            _refuse("B operand columns must start on a 64-column boundary")
        dt = self.sym.allocs[abuf.name].dtype
        plan.body.append(P.Mma(self.en(o.ev), f.name, abuf.name, a_row, bbuf.name, b_col // 64, ka, atom.n, dt))

    @staticmethod
    def _whole_warpgroups(o: N.Call) -> None:
        """Thread-level code must run on every thread of each consumer warpgroup (the fragment
        layouts and the wgmma instruction assume 4 warps of 32 threads)."""
        inner = [(d.proc, static(d.extent)) for d in o.dims if d.proc in ("WARP", "THREAD")]
        if inner != [("WARP", 4), ("THREAD", 32)]:
            _refuse(f"{o.fn}() runs on {inner or 'no'} warps/threads of a warpgroup; the backend "
                    "needs all 4 warps x 32 threads")

    def _simt(self, plan: P.KernelPlan, o: N.Call, before: bool, smem) -> None:
        if o.args and self._is_vector(o.args[0]):
            self._simt_vector(plan, o, before)
            return
        self._whole_warpgroups(o)
        if o.fn == "fill" and before:
            f = self._fragment(plan, o.args[0])
            plan.prologue.append(P.Fill(self.en(o.ev), f.name, self.c(o.args[1])))
        elif o.fn == "add" and not before:
            f = self._fragment(plan, o.args[0])
            g = self._fragment(plan, o.args[1])
            plan.epilogue.append(P.Add(self.en(o.ev), f.name, g.name))
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
            if mem == "GLOBAL":
                plan.epilogue.append(P.StoreDirect(self.en(o.ev), f.name, root, row0, col0,
                                                   batch[0] if batch else None, dt, self._when(root)))
            elif mem == "SHARED":
                self._pending_stage = (o, f, root, dt)
            else:
                _refuse(f"copy into {mem}")
        else:
            _refuse(f"leaf {o.fn}() {'before' if before else 'after'} the main loop")

    def _store(self, plan: P.KernelPlan, o: N.Copy, smem) -> None:
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
        plan.epilogue.append(P.StoreStaged(self.en(call.ev), f.name, tmap, off, self.c(org[kept[0]]),
                                           self.c(org[kept[1]]), batch[0] if batch else None, dt, self.en(o.ev)))
        self._pending_stage = None

    # -- SIMT code on per-thread register vectors ------------------------------------------
    def _is_vector(self, v) -> bool:
        """A 1-D register tensor not laid out by an mma partition: per-thread SIMT state."""
        if not isinstance(v, N.TRef) or v.name not in self.sym.allocs:
            return False
        a = self.sym.allocs[v.name]
        if a.mem != "REGISTER" or len(a.shape) != 1:
            return False
        return not (a.layout is not None and self.origin(a.layout)[3])

    def _vector(self, plan: P.KernelPlan, v: N.TRef) -> P.Vector:
        a = self.sym.allocs[v.name]
        n = static(a.shape[0])
        if n is None or not 1 <= n <= 64 or a.dtype != "f32":
            _refuse(f"register vector %{a.name} must be f32 with 1 to 64 static elements per thread")
        for x in plan.vectors:
            if x.name == a.name:
                return x
        x = P.Vector(a.name, n)
        plan.vectors.append(x)
        return x

    def _threads(self, o: N.Call) -> str:
        """Which threads of a consumer warpgroup run SIMT op ``o`` (a C condition), with
        ``self.thread_index`` set to the C expressions of its WARP / THREAD indices."""
        inner = [(d.proc, static(d.extent)) for d in o.dims if d.proc in ("WARP", "THREAD")]
        if any(e is None for _, e in inner):
            _refuse(f"{o.fn}() over a run-time number of warps or threads")
        if [p for p, _ in inner] == ["THREAD"] and inner[0][1] <= 128:
            self.thread_index = {"THREAD": "tw"}
            return "true" if inner[0][1] == 128 else f"tw < {inner[0][1]}"
        if [p for p, _ in inner] == ["WARP", "THREAD"] and inner[0][1] <= 4 and inner[1][1] <= 32:
            self.thread_index = {"WARP": "(tw / 32)", "THREAD": "(tw % 32)"}
            conds = [c for c, full in ((f"tw / 32 < {inner[0][1]}", inner[0][1] == 4),
                                       (f"tw % 32 < {inner[1][1]}", inner[1][1] == 32)) if not full]
            return " && ".join(conds) or "true"
        _refuse(f"{o.fn}() runs on {inner or 'no'} warps/threads of a warpgroup; SIMT code needs "
                "up to 128 threads, or up to 4 warps of up to 32 threads")
        return ""

    def _row_sum(self, plan: P.KernelPlan, o: N.Call) -> None:
        y, a = o.args
        if not self._is_vector(y):
            _refuse("row_sum() into something other than a per-thread register vector")
        vec = self._vector(plan, y)
        if self.sym.mem(a) != "SHARED":
            _refuse("row_sum() of a tile that is not a pipelined shared-memory stage")
        active = self._threads(o)
        try:
            buf, org = self._buffer(plan, a, {})
            rows, cols = self.shape2(a)
            col0 = static(org[-1])
            if col0 is None or col0 % 64 or cols % 64:
                _refuse("row_sum() over columns that are not whole 64-column chunks of the stage tile")
            if rows != vec.n:
                _refuse(f"row_sum() of {rows} row(s) per thread into {vec.n} element(s)")
            plan.simt_body.append(P.RowSum(self.en(o.ev), vec.name, buf.name, self.c(org[-2]), rows,
                                           col0, cols, self.sym.allocs[buf.name].dtype, active))
        finally:
            self.thread_index = {}

    def _simt_vector(self, plan: P.KernelPlan, o: N.Call, before: bool) -> None:
        active = self._threads(o)
        try:
            vec = self._vector(plan, o.args[0])
            if o.fn == "fill" and before:
                plan.prologue.append(P.FillVector(self.en(o.ev), vec.name, self.c(o.args[1])))
            elif o.fn == "copy" and not before:
                root, org, keep, mmas = self.origin(o.args[1])
                t = next((t for t in plan.tensors if t.name == root), None)
                if t is None or mmas or len(org) != 1 or t.dtype != "f32":
                    _refuse(f"copy of register vector %{vec.name} into {fmt_view(o.args[1])}: the "
                            "backend stores vectors to 1-D f32 global tensors")
                n = static(self.sym.shape(o.args[1])[0])
                if n != vec.n:
                    _refuse(f"copy of {vec.n} element(s) into {n}")
                plan.epilogue.append(P.StoreVector(self.en(o.ev), vec.name, root, self.c(org[0]), n,
                                                   active, self._when(root)))
            else:
                _refuse(f"leaf {o.fn}() on a register vector {'before' if before else 'after'} the main loop")
        finally:
            self.thread_index = {}


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
