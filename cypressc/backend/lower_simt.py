"""``cuda-lowering`` (paper §4.2.6) of SIMT leaf code: on per-thread register vectors
(fills, row sums of pipelined stage tiles and stores of 1-D f32 results) and on register
fragments between the wgmmas of a main-loop step (clearing, converting into a wgmma A
operand).  Mixed into :class:`cypressc.backend.lower._Lower`."""

from __future__ import annotations

from cypressc.abi.dtypes import DTYPES
from cypressc.backend import plan as P
from cypressc.backend.cexpr import KVar
from cypressc.backend.refusal import refuse as _refuse
from cypressc.backend.lower_mem import row_major
from cypressc.ir import nodes as N
from cypressc.ir.printer import fmt_view
from cypressc.ir.shapes import static
from cypressc.lang.intrinsics import IntrinsicKind as K
from cypressc.lang.intrinsics import leaf_of
from cypressc.lang.kinds import Mem, OperandKind, Proc

__all__ = ["SimtLowering"]

TW = KVar("tw")  # the kernel's thread index in its warpgroup
ALL = N.IConst(True)  # every thread of the warpgroup


class SimtLowering:
    """SIMT code (needs ``self.sym``, ``self.k``, ``self.en``, ``self.origin``, ``self._buffer``,
    ``self._stage``, ``self._mma_rank``, ``self._fragment``, ``self._whole_warpgroups`` and ``self.thread_index``
    of :class:`_Lower`)."""

    def _simt_loop(self, plan: P.KernelPlan, o: N.Call):
        """A SIMT leaf on register fragments inside the main loop, between the wgmmas of one
        step: clearing an accumulator, converting one into a wgmma A operand, or copying one
        f32 fragment into another (the private copy a ``copy.add`` adds)."""
        self._whole_warpgroups(o)
        f = self._fragment(plan, o.args[0])
        if leaf_of(o).kind is K.FILL:
            return P.Fill(self.en(o.ev), f.name, self.k(o.args[1]))
        if self.sym.mem(o.args[1]) != Mem.REGISTER:
            _refuse(
                f"copy of register fragment %{f.name} into {fmt_view(o.args[1])} inside the main loop"
            )
        g = self._fragment(plan, o.args[1])
        if f.dtype == g.dtype == "f32" and (f.rows, f.cols) == (g.rows, g.cols):
            return P.Add(self.en(o.ev), g.name, f.name, "")  # the fragment a reduction adds
        if (
            f.dtype != "f32"
            or g.dtype not in ("f16", "bf16")
            or (f.rows, f.cols) != (g.rows, g.cols)
        ):
            _refuse(
                f"copy of the {f.rows}x{f.cols} {f.dtype} fragment %{f.name} into the {g.rows}x{g.cols} "
                f"{g.dtype} fragment %{g.name} (the backend converts f32 to a 16-bit fragment of one shape)"
            )
        return P.Convert(self.en(o.ev), f.name, g.name, g.dtype)

    def _is_vector(self, v) -> bool:
        """A 1-D register tensor not laid out by an mma partition: per-thread SIMT state."""
        if not isinstance(v, N.TRef) or v.name not in self.sym.allocs:
            return False
        a = self.sym.allocs[v.name]
        return a.mem == Mem.REGISTER and len(a.shape) == 1 and self._mma_rank(v.name) is None

    def _vector(self, plan: P.KernelPlan, v: N.TRef) -> P.Vector:
        a = self.sym.allocs[v.name]
        n = static(a.shape[0])
        if n is None or not 1 <= n <= 64 or a.dtype != "f32":
            _refuse(
                f"register vector %{a.name} must be f32 with 1 to 64 static elements per thread"
            )
        for x in plan.vectors:
            if x.name == a.name:
                return x
        x = P.Vector(a.name, n)
        plan.vectors.append(x)
        return x

    def _threads(self, o: N.Call) -> N.IExpr:
        """Which threads of a consumer warpgroup run SIMT op ``o`` (a condition over ``tw``,
        the thread in the warpgroup), with ``self.thread_index`` set to the kernel
        expressions of its WARP / THREAD indices."""
        inner = [(d.proc, static(d.extent)) for d in o.dims if d.proc in (Proc.WARP, Proc.THREAD)]
        if any(e is None for _, e in inner):
            _refuse(f"{o.fn}() over a run-time number of warps or threads")
        if [p for p, _ in inner] == [Proc.THREAD] and inner[0][1] <= 128:
            self.thread_index = {Proc.THREAD: TW}
            return ALL if inner[0][1] == 128 else N.IBin("<", TW, N.IConst(inner[0][1]))
        if (
            [p for p, _ in inner] == [Proc.WARP, Proc.THREAD]
            and inner[0][1] <= 4
            and inner[1][1] <= 32
        ):
            warp, lane = N.IBin("//", TW, N.IConst(32)), N.IBin("%", TW, N.IConst(32))
            self.thread_index = {Proc.WARP: warp, Proc.THREAD: lane}
            conds = [
                N.IBin("<", x, N.IConst(n))
                for x, (_, n), full in (
                    (warp, inner[0], inner[0][1] == 4),
                    (lane, inner[1], inner[1][1] == 32),
                )
                if not full
            ]
            return conds[0] if len(conds) == 1 else N.IBin("&&", *conds) if conds else ALL
        _refuse(
            f"{o.fn}() runs on {inner or 'no'} warps/threads of a warpgroup; SIMT code needs "
            "up to 128 threads, or up to 4 warps of up to 32 threads"
        )
        return ALL

    def _row_sum(self, plan: P.KernelPlan, o: N.Call) -> P.RowSum:
        y, a = o.args
        if not self._is_vector(y):
            _refuse("row_sum() into something other than a per-thread register vector")
        vec = self._vector(plan, y)
        if self.sym.mem(a) != Mem.SHARED:
            _refuse("row_sum() of a tile that is not a pipelined shared-memory stage")
        active = self._threads(o)
        try:
            buf, org = self._buffer(plan, a, {})
            rows, cols = self.shape2(a)
            col0 = static(org[-1])
            if buf.swizzle != 128:
                _refuse(
                    f"row_sum() of %{buf.name}, whose {buf.cols}-column rows are "
                    f"{buf.swizzle}-byte-swizzled; row_sum reads 128-byte-swizzled stages (a "
                    "multiple of 64 columns)"
                )
            if col0 is None or col0 % 64 or cols % 64:
                _refuse(
                    "row_sum() over columns that are not whole 64-column chunks of the stage tile"
                )
            if rows != vec.n:
                _refuse(f"row_sum() of {rows} row(s) per thread into {vec.n} element(s)")
            rs = P.RowSum(
                self.en(o.ev),
                vec.name,
                buf.name,
                self.k(org[-2]),
                rows,
                col0,
                cols,
                self.sym.allocs[buf.name].dtype,
                active,
                self._stage(buf, org),
            )
            plan.simt_body.append(rs)
            return rs
        finally:
            self.thread_index = {}

    def _fill_shared(self, plan: P.KernelPlan, o: N.Call, smem) -> P.FillShared:
        """``fill`` of each thread's piece of a shared tile before the main loop (a constant
        operand table a wgmma reads, e.g. a tile of ones).  The tile is laid out like a
        TMA-written one (:meth:`_buffer`), so the stores go through the same swizzle.  A
        persistent block's next tile writes it again: sync-insertion's ``tile`` edges (the
        wgmmas retired, a barrier at the end of the tile) order that."""
        where = f"fill of {fmt_view(o.args[0])} before the main loop"
        dtype = self.sym.allocs[self.sym.root(o.args[0])].dtype
        if dtype not in ("f16", "bf16"):
            _refuse(
                f"{where}: a shared tile of {dtype} (shared tiles are swizzled rows of 16-bit elements)"
            )
        active = self._threads(o)
        try:
            buf, org = self._buffer(plan, o.args[0], smem)
            if buf.stages > 1 or len(org) != 2:
                _refuse(f"{where}: a pipelined (staged) shared tile")
            rows, cols = self.shape2(o.args[0])
            return P.FillShared(
                self.en(o.ev),
                buf.name,
                self.k(org[0]),
                rows,
                self.k(org[1]),
                cols,
                self.k(o.args[1]),
                buf.dtype,
                active,
            )
        finally:
            self.thread_index = {}

    def _simt_vector(self, plan: P.KernelPlan, o: N.Call, before: bool):
        active = self._threads(o)
        try:
            vec = self._vector(plan, o.args[0])
            kind = leaf_of(o).kind
            if kind is K.FILL and before:
                plan.prologue.append(P.FillVector(self.en(o.ev), vec.name, self.k(o.args[1])))
            elif kind is K.COPY and not before:
                root, org, keep, mmas = self.origin(o.args[1])
                t = next((t for t in plan.tensors if t.name == root), None)
                if t is None or mmas or len(org) != 1 or t.dtype != "f32":
                    _refuse(
                        f"copy of register vector %{vec.name} into {fmt_view(o.args[1])}: the "
                        "backend stores vectors to 1-D f32 global tensors"
                    )
                n = static(self.sym.shape(o.args[1])[0])
                if n != vec.n:
                    _refuse(f"copy of {vec.n} element(s) into {n}")
                plan.epilogue.append(
                    P.StoreVector(
                        self.en(o.ev), vec.name, root, self.k(org[0]), n, active, self._when(root)
                    )
                )
            else:
                _refuse(
                    f"leaf {o.fn}() on a register vector {'before' if before else 'after'} the main loop"
                )
            return plan.prologue[-1] if before else plan.epilogue[-1]
        finally:
            self.thread_index = {}

    def _external(self, plan: P.KernelPlan, o: N.Call) -> P.External:
        """A user C++ function (call-external, paper §3.2) over each thread's elements: its
        operands are f32 register fragments of one shape (the first one sets the loop),
        per-column or per-row vectors in global memory or in shared memory (a TMA copy's
        whole buffer), and scalars."""
        fn = leaf_of(o)
        ext = fn.external
        self._whole_warpgroups(o)
        acc: P.Fragment | None = None
        args: list[P.ExtArg] = []
        vectors: list[N.View] = []
        for a, rule, prm in zip(o.args, fn.operands, ext.params):
            if rule.kind == OperandKind.SCALAR:
                args.append(P.ExtArg("scalar", prm.name, str(prm.type), value=self.k(a)))
                continue
            mem = self.sym.mem(a)
            if mem == Mem.REGISTER:
                f = self._fragment(plan, a)
                if f.dtype != "f32" or acc is not None and (f.rows, f.cols) != (acc.rows, acc.cols):
                    _refuse(
                        f"{o.fn}() on the {f.rows}x{f.cols} {f.dtype} fragment %{f.name}: external "
                        "leaf functions take f32 register fragments of one shape"
                    )
                acc = acc or f
                args.append(P.ExtArg("frag", f.name))
                continue
            root, org, keep, mmas = self.origin(a)
            if DTYPES[self.sym.allocs[root].dtype].itemsize == 1:
                _refuse(
                    f"{o.fn}() reads {fmt_view(a)}, an FP8 vector: external leaf functions read "
                    "16- or 32-bit vectors (convert it to f32 first)"
                )
            if mem == Mem.SHARED and not mmas and len(self.sym.shape(a)) == 1:
                buf = next((b for b in plan.buffers if b.name == root and b.vector), None)
                n = static(self.sym.shape(a)[0])
                if buf is None or n is None or n > buf.cols:
                    _refuse(
                        f"{o.fn}() reads {fmt_view(a)}, which is not a shared vector that a TMA "
                        "copy fills"
                    )
                skip, col0, extent = self._vector_origin(plan, a, buf)
                if n != buf.cols:  # a piece of the vector (a warpgroup's rows): from its start
                    off = self.k(org[-1])
                    skip, col0 = N.ibin("+", skip, off), N.ibin("+", col0, off)
                args.append(
                    P.ExtArg(
                        "svec",
                        root,
                        buf.dtype,
                        col0,
                        extent,
                        value=skip,
                        stage=self._stage(buf, org),
                        row=ext.per_row(prm.name),
                    )
                )
                vectors.append(a)
                continue
            t = next((t for t in plan.tensors if t.name == root), None)
            if mem != Mem.GLOBAL or t is None or mmas or len(self.sym.shape(a)) != 1:
                _refuse(
                    f"{o.fn}() reads {fmt_view(a)} in {mem}: external leaf functions read register "
                    "fragments and 1-D vectors in global or shared memory"
                )
            if ext.broadcast(prm.name):
                # one element: its row-major index, each coordinate guarded (zero past the
                # tensor, like every read past its extent), whichever dimensions the piece keeps
                args.append(
                    P.ExtArg(
                        "vec",
                        root,
                        t.dtype,
                        self.k(row_major(org, self.sym.allocs[root].shape)),
                        broadcast=True,
                        bounds=tuple((self.k(i), e) for i, e in zip(org, t.dims)),
                    )
                )
                vectors.append(a)
                plan.pointer_reads.add(root)
                continue
            if not keep[-1]:
                _refuse(
                    f"{o.fn}() reads {fmt_view(a)}, a strided vector of %{root}: external leaf "
                    "functions read vectors along a tensor's last dimension"
                )
            # a vector sliced off a [B, H, M] tensor is row b·H + h of it (``_batch``)
            batch = self._batch(root, org, keep)
            args.append(
                P.ExtArg(
                    "vec",
                    root,
                    t.dtype,
                    self.k(org[-1]),
                    t.dims[-1],
                    batch=batch,
                    row=ext.per_row(prm.name),
                )
            )
            vectors.append(a)
            plan.pointer_reads.add(root)
        if acc is None:
            _refuse(f"{o.fn}() has no register fragment operand to run over")
        for a, x in zip(vectors, [x for x in args if x.kind in ("vec", "svec")]):
            n = static(self.sym.shape(a)[0])
            if x.broadcast:
                if n != 1:
                    many = "a run-time number of" if n is None else str(n)
                    _refuse(
                        f"{o.fn}(): {fmt_view(a)} has {many} element(s) for a tensor[(1,), ...] "
                        "operand (one element that every element of the call reads)"
                    )
                continue
            want, what = (acc.rows, "rows") if x.row else (acc.cols, "columns")
            if n != want:
                _refuse(
                    f"{o.fn}(): the per-{what[:-1]} vector {fmt_view(a)} has {n} element(s), the "
                    f"{acc.rows}x{acc.cols} fragment's tile {want} {what}"
                )
        plan.headers[ext.header] = ext.header_path or ext.header
        return P.External(self.en(o.ev), o.fn, ext.cpp, ext.header, acc.name, tuple(args))
