"""``cuda-lowering`` (paper §4.2.6) of data movement: shared tiles become swizzled stage
buffers, GLOBAL->SHARED copies TMA loads (in the main loop, or once per tile before it),
and the epilogue's copies of register fragments direct stores to global memory or writes
of a shared staging tile that a TMA store then sends out.  Views become element
coordinates over the kernel's variables (:meth:`_Lower.k`).  Mixed into
:class:`cypressc.backend.lower._Lower`."""

from __future__ import annotations

from dataclasses import replace

from cypressc.abi.dtypes import DTYPES
from cypressc.backend import plan as P
from cypressc.backend.cexpr import KVar
from cypressc.backend.refusal import refuse as _refuse
from cypressc.ir import nodes as N
from cypressc.ir.analysis import reduces, views_of
from cypressc.ir.kinds import Role
from cypressc.ir.printer import fmt_view
from cypressc.ir.shapes import static
from cypressc.ir.subst import walk_ops
from cypressc.lang.kinds import Mem, PartKind, Proc

__all__ = ["MemoryLowering"]

ISSUER = KVar("issuer")  # the thread that issues TMA without a producer warpgroup


def row_major(idx, shape) -> N.IExpr:
    """The row-major linear index of coordinates ``idx`` in dimensions of extents ``shape``
    (the first extent is not needed): ``(idx[0] * shape[1] + idx[1]) * shape[2] + …``."""
    out = idx[0]
    for i, e in zip(idx[1:], shape[1:]):
        out = N.ibin("+", N.ibin("*", out, e), i)
    return out


class MemoryLowering:
    """Buffers, loads and stores (needs ``self.sym``, ``self.k``, ``self.pos``, ``self.en``,
    ``self.origin``, ``self._fragment``, ``self._wg_tile``, ``self._whole_warpgroups``,
    ``self.shape2``, ``self._when``, ``self.persistent``,
    ``self.warpspecialize`` and ``self.last_only`` of :class:`_Lower`)."""

    def _buffer(
        self, plan: P.KernelPlan, v: N.View, smem, vector: bool = False
    ) -> tuple[P.StageBuffer, list[N.IExpr]]:
        """The stage buffer of shared view ``v`` (made the first time: a swizzled 2-D tile, or
        with ``vector`` an unswizzled 1-D one) and ``v``'s origin in it."""
        root, org, keep, _ = self.origin(v)
        a = self.sym.allocs[root]
        existing = {b.name: b for b in plan.buffers}
        if root not in existing and vector:
            shape = [static(s) for s in a.shape]
            if (
                None in shape
                or len(shape) not in (1, 2)
                or (shape[-1] * DTYPES[a.dtype].itemsize) % 16
            ):
                _refuse(
                    f"shared vector %{root} is not a static (stages x) length tile of a multiple "
                    "of 16 bytes (TMA moves 16-byte units)"
                )
            existing[root] = P.StageBuffer(
                root,
                a.dtype,
                1,
                shape[-1],
                shape[0] if len(shape) == 2 else 1,
                smem.get(root, (0, 0, 1))[0],
                0,
            )
            plan.buffers.append(existing[root])
        if root not in existing:
            shape = [static(s) for s in a.shape]
            if None in shape or len(shape) not in (2, 3):
                _refuse(f"shared tensor %{root} is not a static (stages x) rows x cols tile")
            rows, cols = shape[-2], shape[-1]
            isz = DTYPES[a.dtype].itemsize
            sw = P.swizzle_for(cols, isz)
            if sw is None:
                _refuse(
                    f"shared tile %{root} has {cols} columns ({isz * cols}-byte rows); TMA and "
                    "wgmma swizzle rows of 128, 64 or 32 bytes, so a tile needs a multiple of "
                    f"{32 // isz} columns ({8 * isz}-bit elements)"
                )
            if rows % 8:
                _refuse(
                    f"shared tile %{root} has {rows} rows; swizzled tiles are whole 8-row atoms"
                )
            st = shape[0] if len(shape) == 3 else 1
            existing[root] = P.StageBuffer(
                root, a.dtype, rows, cols, st, smem.get(root, (0, 0, 1))[0], sw
            )
            plan.buffers.append(existing[root])
        if existing[root].vector != vector:
            _refuse(f"shared tensor %{root} is used both as a vector and as a 2-D tile")
        return existing[root], org

    @staticmethod
    def _tma_map(plan: P.KernelPlan, m: P.TmaMap) -> P.TmaMap:
        """The plan's TMA map named like ``m``: ``m``, added to the plan, the first time."""
        old = next((x for x in plan.maps if x.name == m.name), None)
        if old is None:
            plan.maps.append(m)
        return old or m

    def _stage(self, buf: P.StageBuffer, org: list[N.IExpr]) -> N.IExpr:
        """The stage index of a view of a pipelined buffer, as a pipeline position."""
        staged = buf.stages > 1 and len(org) == (2 if buf.vector else 3)
        return self.pos(org[0]) if staged else N.IConst(0)

    def _load_once(self, plan: P.KernelPlan, o: N.Copy, smem, role: str) -> P.Load:
        """A GLOBAL->SHARED copy before the main loop (a tile every step reads, like
        FlashAttention's Q): one TMA load per tile on its own unstaged buffer and barrier, phase
        0, issued by the producer (without one, by the issuer thread).  A persistent block runs
        its tiles on the same barrier and buffer: its waits flip parity per tile
        (:mod:`cypressc.backend.sync_lower`), and the next tile's load waits on the empty
        barrier its readers release (sync-insertion's ``tile`` edges)."""
        where = f"copy {fmt_view(o.src)} -> {fmt_view(o.dst)} before the main loop"
        if self.sym.mem(o.src) != Mem.GLOBAL or self.sym.mem(o.dst) != Mem.SHARED:
            _refuse(where)
        ld = self._load(plan, o, smem, where)
        if role != Role.PRODUCER and not self.warpspecialize:
            ld = replace(ld, who=ISSUER)
            plan.loads[-1] = ld
        return ld

    def _load(self, plan: P.KernelPlan, o: N.Copy, smem, where: str = "") -> P.Load:
        if self.sym.mem(o.src) != Mem.GLOBAL or self.sym.mem(o.dst) != Mem.SHARED:
            _refuse(where or f"copy {fmt_view(o.src)} -> {fmt_view(o.dst)} in the main loop")
        if o.bar is None:
            _refuse(f"TMA copy {self.en(o.ev)} completes on no mbarrier")
        root, org, keep, mmas = self.origin(o.src)
        if mmas:
            _refuse("a TMA load of an mma partition")
        kept = [d for d, k in enumerate(keep) if k]
        if kept == [len(keep) - 1]:
            return self._load_vector(plan, o, smem)
        buf, dorg = self._buffer(plan, o.dst, smem)
        if len(kept) != 2:
            _refuse(f"{fmt_view(o.src)} is not a 2-D tile")
        if kept != [len(keep) - 2, len(keep) - 1]:
            _refuse(
                f"{fmt_view(o.src)}: a TMA tile must span the two innermost dimensions of %{root}"
            )
        if buf.rows > 256:
            _refuse(f"a {buf.rows}-row shared tile: one TMA box spans at most 256 rows")
        batch = self._batch(root, org, keep)
        # one box per chunk: its inner extent is one swizzle row
        box = [1] * (batch is not None) + [buf.rows, buf.chunk_cols]
        coords = (batch,) * (batch is not None) + (self.k(org[-2]), self.k(org[-1]))
        tmap = self._tma_map(
            plan, P.TmaMap(f"tm_{root}_{buf.rows}x{buf.chunk_cols}", root, tuple(box), buf.swizzle)
        )
        ld = P.Load(
            self.en(o.ev),
            tmap,
            buf.name,
            coords,
            buf.chunks,
            self._stage(buf, dorg),
            o.bar.bar,
            self.pos(o.bar.stage),
            multicast=o.multicast,
        )
        plan.loads.append(ld)
        return ld

    def _load_vector(self, plan: P.KernelPlan, o: N.Copy, smem) -> P.Load:
        """A TMA copy of a piece of a tensor's last dimension into an unswizzled shared vector
        (FlashAttention-3's LSE and dPsum pieces of a step).  The tensor is mapped flattened to
        one dimension, so any row length works (a 2-D map would need 16-byte row strides), and
        the box starts on the 16-byte boundary at or before the piece (TMA's rule for the
        innermost coordinate) and spans :attr:`~P.StageBuffer.slack` elements more; readers
        skip to the piece (:meth:`_vector_origin`) and mask the elements past its row's end,
        which hold the next row's (past the tensor's end: zeros)."""
        buf, dorg = self._buffer(plan, o.dst, smem, vector=True)
        if static(self.sym.shape(o.src)[0]) != buf.cols:
            _refuse(
                f"copy {fmt_view(o.src)} -> {fmt_view(o.dst)}: the vector and its buffer differ"
            )
        if buf.cols + buf.slack > 256:
            _refuse(
                f"a {buf.cols}-element shared vector: one TMA box spans at most 256 elements, "
                f"{buf.slack} of them before the piece"
            )
        root, flat = self._flat(o.src)
        start = N.ibin("*", N.ibin("//", flat, N.IConst(buf.slack)), N.IConst(buf.slack))
        tmap = self._tma_map(
            plan, P.TmaMap(f"tm_{root}_{buf.cols + buf.slack}", root, (buf.cols + buf.slack,), 0)
        )
        ld = P.Load(
            self.en(o.ev),
            tmap,
            buf.name,
            (self.k(start),),
            1,
            self._stage(buf, dorg),
            o.bar.bar,
            self.pos(o.bar.stage),
            multicast=o.multicast,
        )
        plan.loads.append(ld)
        return ld

    def _flat(self, v: N.View) -> tuple[str, N.IExpr]:
        """Global vector view ``v`` (a piece of its tensor's last dimension, the leading ones
        sliced off): the tensor and the element of the flattened tensor where ``v`` starts."""
        root, org, keep, _ = self.origin(v)
        idx = self._batch_index(root, org, keep)
        if idx is None:
            return root, org[-1]
        return root, row_major([idx, org[-1]], [None, self.sym.allocs[root].shape[-1]])

    def _vector_origin(
        self, plan: P.KernelPlan, v: N.View, buf: P.StageBuffer
    ) -> tuple[N.IExpr, N.IExpr, str]:
        """For shared vector view ``v`` of ``buf``: where the piece starts in the buffer (its
        offset from the copy's aligned start), the element of its tensor's row it starts at,
        and that row's length (a size name), from the one TMA copy that fills the buffer (E050
        unless there is exactly one)."""
        root = self.sym.root(v)
        fills = [
            x
            for x in walk_ops(self.m.body)
            if isinstance(x, N.Copy) and x.reduce is None and self.sym.root(x.dst) == root
        ]
        if len(fills) != 1 or self.sym.mem(fills[0].src) != Mem.GLOBAL:
            _refuse(
                f"shared vector %{root}: the backend reads a shared vector that one TMA copy "
                f"from global memory fills ({len(fills)} copies into it)"
            )
        groot, flat = self._flat(fills[0].src)
        _, gorg, _, _ = self.origin(fills[0].src)
        t = next(t for t in plan.tensors if t.name == groot)
        skip = self.k(N.ibin("%", flat, N.IConst(buf.slack)))
        return skip, self.k(gorg[-1]), t.dims[-1]

    def _staged_for_store(self, v: N.View) -> bool:
        """Whether the shared tensor under ``v`` is a staging tile: a copy out to global memory
        (a TMA store or reduce-add) reads it.  E050 when something else reads it too (a wgmma
        reads another layout than the staging boxes')."""
        root = self.sym.root(v)
        out = [
            x
            for x in walk_ops(self.m.body)
            if isinstance(x, N.Copy)
            and self.sym.root(x.src) == root
            and self.sym.mem(x.dst) == Mem.GLOBAL
        ]
        if out and any(
            reads and self.sym.root(w) == root
            for x in walk_ops(self.m.body)
            if not any(x is y for y in out)
            for w, reads, _ in views_of(x)
        ):
            _refuse(
                f"%{root} is stored to global memory by TMA and also read by other code: the "
                "backend lays a staging tile out for the TMA store only"
            )
        return bool(out)

    def _staging_stage(self, stages: int, org: list[N.IExpr], keep: list[bool]) -> N.IExpr:
        """The stage (a pipeline position) of a view of a staging tile of ``stages`` stages
        (its leading dimension, sliced off) from the view's origin; 0 for one stage."""
        return self.pos(org[0]) if stages > 1 and not keep[0] else N.IConst(0)

    def _stage_write(
        self, plan: P.KernelPlan, o: N.Call, smem, in_loop: bool = False
    ) -> P.StageWrite:
        """``copy`` of an accumulator into a shared staging tile (a TMA store or reduce-add of
        that tile must follow: :meth:`_store`): after the main loop, or inside it (once per
        step, into the step's stage of the tile)."""
        f = self._fragment(plan, o.args[0])
        root, org, keep, mmas = self.origin(o.args[1])
        dt = self.sym.allocs[root].dtype
        if not mmas or dt not in ("f16", "bf16", "f32"):
            _refuse(
                f"copy of a register fragment into {fmt_view(o.args[1])}: the backend stages "
                "16-bit or f32 tiles laid out like the fragment"
            )
        bc = P.box_cols(dt)
        if f.cols % bc:  # emit_stmt writes and TMA-stores 64-row boxes of 128-byte swizzled rows
            _refuse(
                f"a staged epilogue tile of {f.cols} columns ({fmt_view(o.args[1])}): the backend stages "
                f"boxes of {bc} columns; make the tile's columns a multiple of {bc}, or store it from "
                "registers (GLOBAL instead of SHARED in the mems of the store's instances)"
            )
        off, size, stages = smem.get(root, (0, 0, 1))
        stage = self._staging_stage(stages, org, keep)
        st = P.StageWrite(
            self.en(o.ev), f.name, root, off, dt, stage, size // stages if stages > 1 else 0
        )
        self._pending_stage = (o, f, root, dt, st)
        if not in_loop:
            plan.epilogue.append(st)
        return st

    def _write_shared(self, plan: P.KernelPlan, o: N.Call, smem) -> P.WriteShared:
        """``copy`` of an f32 accumulator fragment into a 16-bit shared tile inside the main
        loop (the attention backward's Pᵀ staged for the next wgmma): each thread writes its
        fragment's elements, converted, where the tile's stage buffer keeps them (:meth:`_buffer`:
        the swizzled chunks a wgmma descriptor reads, MN- or K-major)."""
        self._whole_warpgroups(o)
        f = self._fragment(plan, o.args[0])
        root, _, _, mmas = self.origin(o.args[1])
        dt = self.sym.allocs[root].dtype
        if (
            f.dtype != "f32"
            or dt not in ("f16", "bf16")
            or not mmas
            or mmas[0][0].params[1] != Proc.WARP
            or mmas[0][0].params[2] not in ("A", "C")
        ):
            _refuse(
                f"copy of register fragment %{f.name} into {fmt_view(o.args[1])} inside the main "
                "loop: the backend writes f32 fragments into 16-bit shared tiles split like them "
                '(partition_by_mma(..., WARP, "C"))'
            )
        tile = self._wg_tile(o.args[1])
        if self.shape2(tile) != (f.rows, f.cols):
            _refuse(
                f"copy of the {f.rows}x{f.cols} fragment %{f.name} into the "
                f"{'x'.join(map(str, self.shape2(tile)))} shared tile {fmt_view(tile)}"
            )
        buf, org = self._buffer(plan, tile, smem)
        return P.WriteShared(
            self.en(o.ev),
            f.name,
            buf.name,
            self.k(org[-2]),
            self.k(org[-1]),
            dt,
            self._stage(buf, org),
        )

    def _batch(self, root: str, org: list[N.IExpr], keep: list[bool]) -> N.IExpr | None:
        """The linear index of the dimensions a view sliced off ``root`` (None: none), which
        must be its leading ones: the tensor is contiguous, so a [B, H, M, D] tensor is
        addressed (and TMA-mapped) as [B·H, M, D] and piece [b][h] is batch b·H + h."""
        idx = self._batch_index(root, org, keep)
        return None if idx is None else self.k(idx)

    def _batch_index(self, root: str, org: list[N.IExpr], keep: list[bool]) -> N.IExpr | None:
        """:meth:`_batch` as an IR expression (E050 unless the sliced dimensions lead)."""
        dropped = [d for d, k in enumerate(keep) if not k]
        if not dropped:
            return None
        if dropped != list(range(len(dropped))):
            _refuse(
                f"%{root} is sliced along dimension(s) {dropped}; the backend slices leading dimensions"
            )
        return row_major(org[: len(dropped)], self.sym.allocs[root].shape)

    def _store_direct(self, plan: P.KernelPlan, o: N.Call) -> P.StoreDirect:
        """``copy`` of an accumulator straight into its global tile, each thread its fragment."""
        return self._direct_out(plan, self.en(o.ev), o.args[0], o.args[1])

    def _reduce_direct(self, plan: P.KernelPlan, o: N.Copy) -> P.StoreDirect:
        """``copy.add`` of an f32 register fragment into its global tile (laid out like it,
        ``partition_by_mma(..., "C")`` of both), each thread its fragment, a pair of adjacent
        elements per ``red.global.v2.f32.add``: FlashAttention-3's dQ atomics.  Anywhere in
        the block: after the main loop, or inside it (once per step).  The kernel must only
        add into the tensor (no copy or leaf reads or writes it), so nothing in the kernel
        waits for a reduction; the kernel's end completes them for what runs after it."""
        where = f"copy.{o.reduce} {fmt_view(o.src)} -> {fmt_view(o.dst)}"
        root = self.sym.root(o.dst)
        if any(
            self.sym.root(v) == root and not reduces(x)
            for x in walk_ops(self.m.body)
            for v, _, _ in views_of(x)
        ):
            _refuse(
                f"{where}: the kernel also reads or writes %{root}; a kernel that adds into a "
                "tensor from registers may only add into it"
            )
        inner = [(d.proc, static(d.extent)) for d in o.dims if d.proc in (Proc.WARP, Proc.THREAD)]
        if inner != [(Proc.WARP, 4), (Proc.THREAD, 32)]:
            _refuse(
                f"{where} runs on {inner or 'no'} warps/threads of a warpgroup; the backend "
                "needs all 4 warps x 32 threads"
            )
        f = self._fragment(plan, o.src)
        if o.reduce != "add" or f.dtype != "f32" or self.sym.allocs[root].dtype != "f32":
            _refuse(f"{where}: the backend adds f32 register fragments into f32 tensors")
        if o.ordered:
            _refuse(
                f"{where}: an ordered reduce-add (deterministic: true) from registers: each thread "
                "would add in its own order; stage the tile in shared memory"
            )
        st = self._direct_out(plan, self.en(o.ev), o.src, o.dst, reduce=True)
        plan.pointer_reads.add(root)  # read by the reductions themselves, never through TMA
        return st

    def _order(
        self, plan: P.KernelPlan, o: N.Copy, org: list[N.IExpr], whole: bool
    ) -> tuple[N.IExpr, ...]:
        """The element origin of an ordered reduce-add's tile (kernel expressions), after the
        checks the order needs here: one issuer per block, the grid's last dimension a block
        dimension (reduction-order proved the rest)."""
        if not o.ordered:
            return ()
        if not (whole or plan.consumers == 1) or plan.host_loop is not None:
            _refuse(
                f"copy.add.ordered {fmt_view(o.src)} -> {fmt_view(o.dst)}: an ordered reduce-add "
                "is sent by one thread per block, along a grid of block dimensions"
            )
        plan.ordered = True
        return tuple(self.k(x) for x in org)

    def _direct_out(
        self, plan: P.KernelPlan, ev: str, src: N.View, dst: N.View, reduce: bool = False
    ) -> P.StoreDirect:
        f = self._fragment(plan, src)
        root, org, keep, mmas = self.origin(dst)
        if not mmas:
            _refuse(
                f"copy of a register fragment into {fmt_view(dst)}, which is not laid out like it"
            )
        kept = [d for d, k in enumerate(keep) if k]
        batch = self._batch(root, org, keep)
        row0, col0 = self.k(org[kept[0]]), self.k(org[kept[1]])
        mem = self.sym.allocs[root].mem
        dt = self.sym.allocs[root].dtype
        if dt not in ("f16", "bf16", "f32"):
            _refuse(f"an epilogue storing {dt} (the backend stores f16, bf16 and f32 outputs)")
        if kept != [len(keep) - 2, len(keep) - 1]:
            _refuse(f"{fmt_view(dst)}: a stored tile must span the two innermost dimensions")
        if mem != Mem.GLOBAL:
            _refuse(f"copy into {mem}")
        st = P.StoreDirect(ev, f.name, root, row0, col0, batch, dt, self._when(root), reduce)
        plan.epilogue.append(st)
        return st

    def _load_direct(self, plan: P.KernelPlan, o: N.Call) -> P.LoadDirect:
        """``copy`` of a global tile straight into an f32 register fragment laid out like it
        (``partition_by_mma(..., "C")`` of both), each thread its elements: the mirror of
        :meth:`_store_direct`, for a block that reads a tile once (no main loop to pipeline)."""
        src = o.args[0]
        f = self._fragment(plan, o.args[1])
        root, org, keep, mmas = self.origin(src)
        where = f"copy of {fmt_view(src)} into the register fragment %{f.name}"
        if not mmas:
            _refuse(f"{where}: the global tile is not laid out like the fragment")
        kept = [d for d, k in enumerate(keep) if k]
        if kept != [len(keep) - 2, len(keep) - 1]:
            _refuse(f"{where}: a loaded tile must span the two innermost dimensions")
        dt = self.sym.allocs[root].dtype
        if f.dtype != "f32" or dt not in ("f16", "bf16", "f32"):
            _refuse(f"{where}: the backend loads f16, bf16 or f32 tiles into f32 fragments")
        batch = self._batch(root, org, keep)
        row0, col0 = self.k(org[kept[0]]), self.k(org[kept[1]])
        plan.pointer_reads.add(root)
        st = P.LoadDirect(self.en(o.ev), f.name, root, row0, col0, batch, dt)
        plan.epilogue.append(st)
        return st

    def _warpgroup_split(self, call: N.Call, sroot: str, f: P.Fragment) -> str:
        """``"rows"`` when the staging write ``call`` gives consumer warpgroup ``w`` rows
        ``[w * f.rows, (w + 1) * f.rows)`` of the whole tile ``sroot`` (a blocks partition by
        warpgroup rows, as the store trees make), ``"cols"`` when it gives it columns
        ``[w * f.cols, (w + 1) * f.cols)`` (the ``_cols`` trees); E050 otherwise.  A copy of the
        whole tile (no WARPGROUP dimension: the block's private copy) is then sent warpgroup
        tile by warpgroup tile."""
        rows, cols = self.sym.shape(N.TRef(sroot))[-2:]
        wg = N.IProc(Proc.WARPGROUP, 0)
        for piece in self.sym.chain(call.args[1]):
            part = self.sym.parts[piece.partition]
            if part.kind != PartKind.BLOCKS or self.sym.root(part.base) != sroot:
                continue
            if static(part.params[0]) == f.rows and part.params[1] == cols:
                if piece.idx == (wg, N.IConst(0)):
                    return "rows"
            if part.params[0] == rows and static(part.params[1]) == f.cols:
                if piece.idx == (N.IConst(0), wg):
                    return "cols"
        _refuse(
            f"a copy of the whole shared tile %{sroot} whose warpgroups' fragments are not its "
            f"successive {f.rows}-row or {f.cols}-column slices"
        )
        return ""

    def _store(self, plan: P.KernelPlan, o: N.Copy, smem, in_loop: bool = False) -> P.TmaStore:
        """A SHARED->GLOBAL copy after the main loop, or inside it: the TMA store of the
        staging tile the previous :meth:`_stage_write` filled; a ``copy.add`` (a private copy
        of a ``reduces=`` argument in shared memory) adds the tile into global with a TMA
        reduce-add, which completes as a store does (FlashAttention-3's dQ through shared
        memory, once per step)."""
        pend = getattr(self, "_pending_stage", None)
        where = "in" if in_loop else "after"
        if pend is None or self.sym.mem(o.src) != Mem.SHARED or self.sym.mem(o.dst) != Mem.GLOBAL:
            _refuse(f"copy {fmt_view(o.src)} -> {fmt_view(o.dst)} {where} the main loop")
        call, f, sroot, dt, written = pend
        _, sorg, skeep, _ = self.origin(o.src)
        if self._staging_stage(smem.get(sroot, (0, 0, 1))[2], sorg, skeep) != written.stage:
            _refuse(
                f"copy {fmt_view(o.src)} -> {fmt_view(o.dst)} reads another stage of %{sroot} "
                "than the write before it filled"
            )
        if self.sym.root(o.src) != sroot:
            _refuse("a shared staging tile stored from a different tensor")
        root, org, keep, _ = self.origin(o.dst)
        if root in self.last_only:
            _refuse(f"a last-iteration write of %{root} through a staged TMA store")
        if o.reduce is not None and (o.reduce != "add" or dt != self.sym.allocs[root].dtype):
            _refuse(
                f"copy.{o.reduce} {fmt_view(o.src)} -> {fmt_view(o.dst)}: a TMA reduce-add adds a "
                "staged tile into a tensor of its element type"
            )
        kept = [d for d, k in enumerate(keep) if k]
        if kept != [len(keep) - 2, len(keep) - 1]:
            _refuse(f"{fmt_view(o.dst)}: a stored tile must span the two innermost dimensions")
        batch = self._batch(root, org, keep)
        whole = not any(d.proc == Proc.WARPGROUP for d in o.dims)
        by_cols = whole and self._warpgroup_split(call, sroot, f) == "cols"
        bc = P.box_cols(dt)
        tmap = self._tma_map(
            plan, P.TmaMap(f"tm_{root}_64x{bc}", root, (1,) * (batch is not None) + (64, bc))
        )
        off = smem.get(sroot, (0, 0, 1))[0]
        st = P.TmaStore(
            self.en(o.ev),
            f.name,
            sroot,
            tmap,
            off,
            self.k(org[kept[0]]),
            self.k(org[kept[1]]),
            batch,
            o.reduce is not None,
            whole,
            by_cols,
            written.stage,
            self._order(plan, o, org, whole),
            self.loop_no if in_loop and o.ordered else None,
        )
        if not in_loop:
            plan.epilogue.append(st)
        self._pending_stage = None
        return st
