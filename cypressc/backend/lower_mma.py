"""``cuda-lowering`` (paper §4.2.6) of Tensor Core calls: a wgmma over one stage
(:class:`~cypressc.backend.plan_stmt.Mma`), its operands' shared tiles and K slices, and the
register fragments it accumulates into or reads A from.  Mixed into
:class:`cypressc.backend.lower._Lower`."""

from __future__ import annotations

from cypressc.abi.dtypes import DTYPES
from cypressc.backend import plan as P
from cypressc.backend.cexpr import cexpr
from cypressc.backend.refusal import refuse as _refuse
from cypressc.ir import nodes as N
from cypressc.ir.analysis import free_vars, proc_names
from cypressc.ir.hazards import evaluate
from cypressc.ir.printer import fmt_view
from cypressc.ir.shapes import static
from cypressc.lang.atoms import atom as lookup_atom
from cypressc.lang.atoms import atom_k
from cypressc.lang.intrinsics import leaf_of
from cypressc.lang.kinds import Mem, PartKind, Proc

__all__ = ["MmaLowering"]

_K_SUBTILE = "a wgmma {} that starts inside its stage tile along K (a K sub-tile)"


class MmaLowering:
    """wgmma and register fragments (needs ``self.sym``, ``self.lets``, ``self.lp``,
    ``self.k``, ``self.en``, ``self.origin``, ``self.shape2``, ``self._buffer`` and
    ``self._stage`` of :class:`_Lower`)."""

    def _fragment(self, plan: P.KernelPlan, v: N.View) -> P.Fragment:
        if not isinstance(v, N.TRef) or self.sym.allocs[v.name].mem != Mem.REGISTER:
            _refuse(
                f"{fmt_view(v) if isinstance(v, (N.TRef, N.Piece)) else v} is not a register fragment"
            )
        a = self.sym.allocs[v.name]
        for f in plan.fragments:
            if f.name == a.name:
                return f
        _, _, _, mmas = self.origin(a.layout) if a.layout is not None else (None, None, None, [])
        if not mmas or mmas[0][0].params[1] != Proc.WARP or mmas[0][0].params[2] not in ("A", "C"):
            _refuse(
                f'register tensor %{a.name} is not laid out by partition_by_mma(..., WARP, "C")'
            )
        rows, cols = self.shape2(mmas[0][0].base)
        if a.dtype != "f32" and (a.dtype not in ("f16", "bf16") or cols % 16):
            _refuse(
                f"register tensor %{a.name}: a {a.dtype} fragment (registers hold f32 accumulators, "
                "or f16/bf16 wgmma A operands of whole k16 steps)"
            )
        f = P.Fragment(a.name, rows, cols, a.dtype)
        plan.fragments.append(f)
        return f

    def _wg_tile(self, v: N.View) -> N.View:
        """The warpgroup's whole tile behind a wgmma operand piece: a thread's piece of a
        ``partition_by_mma`` is what it holds, the instruction reads the tile."""
        while True:
            if isinstance(v, N.Piece) and self.sym.parts[v.partition].kind == PartKind.MMA:
                v = self.sym.parts[v.partition].base
                continue
            lay = self.sym.allocs[v.name].layout if isinstance(v, N.TRef) else None
            if (
                isinstance(lay, N.Piece)
                and self.sym.parts[lay.partition].kind == PartKind.MMA
                and self.sym.mem(lay) == self.sym.allocs[v.name].mem
            ):
                v = lay
                continue
            return v

    def _mma(self, plan: P.KernelPlan, o: N.Call) -> P.Mma:
        at, c, a, b = o.args
        f = self._fragment(plan, c)
        atom = lookup_atom(at.name)
        if atom.n != f.cols:
            _refuse(
                f"{at.name} on a {f.rows}x{f.cols} accumulator: this backend needs the atom's N "
                "to equal the warpgroup tile's columns"
            )
        b = self._wg_tile(b)
        bbuf, borg = self._buffer(plan, b, {})
        kmajor = leaf_of(o).b_kmajor  # B stored N x K: its rows are the product's columns
        kb, nb = self.shape2(b)
        if kmajor:
            kb, nb = nb, kb
        bk = self._b_kmajor(bbuf, borg, kb, atom.k) if kmajor else {}
        if self.sym.mem(a) == Mem.REGISTER:
            fa = self._fragment(plan, a)
            if (
                fa.dtype not in ("f16", "bf16")
                or fa.dtype != self.sym.allocs[bbuf.name].dtype
                or atom.k != 16
                or fa.rows != f.rows
                or fa.cols != kb
                or nb != f.cols
            ):
                _refuse(
                    f"wgmma operand shapes {fa.rows}x{fa.cols} {fa.dtype} (registers) x {kb}x{nb} do not "
                    f"match the {f.rows}x{f.cols} accumulator"
                )
            b_krow = {} if kmajor else dict(b_row=self._mn_k_row(plan, bbuf, borg[-2], "B"))
            zero = N.IConst(0)
            mm = P.Mma(
                self.en(o.ev),
                f.name,
                "",
                zero,
                bbuf.name,
                0 if kmajor else self._b_chunk(plan, bbuf, borg),
                kb,
                atom.n,
                fa.dtype,
                zero,
                self._stage(bbuf, borg),
                zero,
                a_frag=fa.name,
                **bk,
                **b_krow,
            )
            plan.body.append(mm)
            return mm
        a = self._wg_tile(a)
        abuf, aorg = self._buffer(plan, a, {})
        ma, ka = self.shape2(a)
        if leaf_of(o).a_mnmajor:  # A stored K x M: its rows are the product's K
            ma, ka = ka, ma
        if ka != kb or nb != f.cols or ma != f.rows:
            _refuse(
                f"wgmma operand shapes {self.shape2(a)} x {self.shape2(b)} do not match the "
                f"{f.rows}x{f.cols} accumulator"
            )
        adt, bdt = self.sym.allocs[abuf.name].dtype, self.sym.allocs[bbuf.name].dtype
        # the front end refuses these (E032, E040); hand-written IR reaches here unchecked
        if adt != bdt or atom.k != atom_k(DTYPES[adt].itemsize):
            _refuse(
                f"{o.fn}: {atom.name} on {adt} x {bdt} operands: a wgmma takes one element "
                "type, k16 for 16-bit and k32 for FP8"
            )
        if ka % atom.k:
            _refuse(f"a K tile of {ka}: {atom.name} consumes K in steps of {atom.k}")
        fp8 = DTYPES[adt].itemsize == 1
        if fp8 and (leaf_of(o).a_mnmajor or not kmajor):
            _refuse(f"{o.fn}: an FP8 wgmma reads both operands K-major (warpgroup_mma_bt)")
        if leaf_of(o).a_mnmajor:
            if not kmajor:
                bk = dict(b_row=self._mn_k_row(plan, bbuf, borg[-2], "B"))
            a_row = self._mn_k_row(plan, abuf, aorg[-2], "A")
            a_col, mn = self._a_mn_col(abuf, aorg[-1]), dict(a_mnmajor=True)
        else:
            if (not kmajor and static(borg[-2]) != 0) or (
                static(aorg[-1]) != 0 and abuf.stages > 1
            ):
                _refuse(_K_SUBTILE.format("operand"))
            a_col, a_row, mn = self._k_slice(abuf, aorg[-1], ka, atom.k), self.k(aorg[-2]), {}
        b_chunk = 0 if kmajor else self._b_chunk(plan, bbuf, borg)
        dt = self.sym.allocs[abuf.name].dtype
        mm = P.Mma(
            self.en(o.ev),
            f.name,
            abuf.name,
            a_row,
            bbuf.name,
            b_chunk,
            ka,
            atom.n,
            dt,
            self._stage(abuf, aorg),
            self._stage(bbuf, borg),
            a_col,
            **bk,
            **mn,
        )
        plan.body.append(mm)
        return mm

    def _mn_k_row(
        self, plan: P.KernelPlan, buf: P.StageBuffer, row: N.IExpr, which: str
    ) -> N.IExpr:
        """The first K row (a kernel expression) of an MN-major wgmma operand in its shared
        tile (stored K x M or K x N: a K slice, as when the warpgroups split a product's K):
        static, or depending on the warpgroup index alone, and for every consumer warpgroup a
        whole 8-row swizzle atom inside an unstaged tile's rows or at row 0 of a stage, so the
        descriptor's start moves by whole atoms (row x swizzle bytes, base offset 0)."""
        r = static(row)
        if r == 0:
            return N.IConst(0)
        where = f"an MN-major wgmma {which} operand at K row {cexpr(self.k(row))} of %{buf.name}"
        if r is None and (free_vars(row) or proc_names(row) != {Proc.WARPGROUP}):
            _refuse(
                f"{where}: its first K row must be static or depend on the warpgroup index only"
            )
        rows = (
            [r] if r is not None else [static(_at_warpgroup(row, w)) for w in range(plan.consumers)]
        )
        for r0 in rows:
            if r0 is None or r0 % 8 or not 0 <= r0 < buf.rows:
                _refuse(f"{where}: it must start on an 8-row swizzle atom inside the tile ({r0})")
        return self.k(row)

    def _a_mn_col(self, abuf: P.StageBuffer, col: N.IExpr) -> N.IExpr:
        """The first column (M; a kernel expression) of an MN-major A operand
        (``warpgroup_mma_at``: A stored K x M, M contiguous) in its shared tile: a warpgroup's
        slice of the tile, which must start on a swizzle chunk (``chunk_cols`` columns), since
        the descriptor's start address cannot enter a chunk's swizzled rows along M."""
        if not _multiple(col, abuf.chunk_cols):
            _refuse(
                f"an MN-major wgmma A operand at column {cexpr(self.k(col))} of %{abuf.name}: it must "
                f"start on a {abuf.chunk_cols}-column chunk of the {abuf.swizzle}-byte-swizzled tile"
            )
        return self.k(col)

    def _b_kmajor(self, bbuf: P.StageBuffer, borg: list[N.IExpr], k: int, step: int) -> dict:
        """The K-major B operand's place in its shared tile (``warpgroup_mma_bt``: B stored
        N x K, K contiguous, read like a K-major A): its first row (N; a whole 8-row swizzle
        atom) and its first column (K; a whole wgmma step of ``step`` columns of an unstaged
        tile, as for A)."""
        row = static(borg[-2])
        if row is None:
            _refuse(
                f"a K-major wgmma B operand at a run-time row of %{bbuf.name}: its first row must be static"
            )
        if row % 8:
            _refuse(
                f"a K-major wgmma B operand at row {row} of %{bbuf.name}: it must start on an 8-row "
                "swizzle atom"
            )
        if static(borg[-1]) != 0 and bbuf.stages > 1:
            _refuse(_K_SUBTILE.format("operand"))
        if k % step:
            _refuse(f"a K tile of {k}: wgmma consumes K in steps of {step}")
        return dict(
            b_kmajor=True, b_row=self.k(borg[-2]), b_col=self._k_slice(bbuf, borg[-1], k, step)
        )

    def _b_chunk(
        self, plan: P.KernelPlan, bbuf: P.StageBuffer, borg: list[N.IExpr]
    ) -> int | N.IExpr:
        """The swizzle chunk of ``bbuf`` a wgmma B operand starts at: a static chunk boundary,
        or, where each consumer warpgroup reads its own columns of the tile (a block tile whose
        warpgroups split the product's columns), a column that depends on the warpgroup index
        alone and is a chunk boundary inside the tile for every consumer warpgroup (then the
        chunk as a kernel expression over ``cw``)."""
        col = borg[-1]
        where = f"a chunk of the {bbuf.swizzle}-byte-swizzled %{bbuf.name}"
        b_col = static(col)
        if b_col is not None:
            if b_col % bbuf.chunk_cols:
                _refuse(
                    f"B operand columns must start on a {bbuf.chunk_cols}-column boundary ({where})"
                )
            return b_col // bbuf.chunk_cols
        if free_vars(col) or proc_names(col) != {Proc.WARPGROUP}:
            _refuse(
                f"B operand columns at {cexpr(self.k(col))}: a wgmma B operand starts at a static "
                f"column, or one that depends on the warpgroup index only ({where})"
            )
        for w in range(plan.consumers):
            c0 = static(_at_warpgroup(col, w))
            if c0 is None or c0 % bbuf.chunk_cols or not 0 <= c0 < bbuf.cols:
                _refuse(
                    f"B operand columns at {c0} for consumer warpgroup {w}: each warpgroup's "
                    f"columns must start on a {bbuf.chunk_cols}-column boundary inside the "
                    f"{bbuf.cols}-column tile ({where})"
                )
        return self.k(N.ibin("//", col, N.IConst(bbuf.chunk_cols)))

    def _k_slice(self, buf: P.StageBuffer, col: N.IExpr, k: int, step: int) -> N.IExpr:
        """The first column (a kernel expression) of a K-major wgmma operand (A, or a
        ``warpgroup_mma_bt`` B) in an unstaged shared tile: a K slice of a tile every step reads
        (a panel copied in before the main loop).  At every step of
        the main loop the slice must start on a wgmma step (``step`` columns: 32 bytes) and end
        inside the tile."""
        if static(col) == 0:
            return N.IConst(0)
        lp = self.lp
        lo, hi = (static(lp.lo), static(lp.hi)) if lp is not None else (None, None)
        for i in (
            range(lo, hi) if lo is not None and hi is not None and hi - lo <= 1 << 16 else (None,)
        ):
            try:
                c0 = evaluate(col, {lp.var: i} if i is not None else {}, self.lets)
            except (KeyError, ZeroDivisionError):
                _refuse(
                    f"a K-major wgmma operand at column {cexpr(self.k(col))} of %{buf.name}: a K slice of a shared "
                    "tile needs a column that depends only on the main loop's variable, over a "
                    "static trip count"
                )
            if not isinstance(c0, int) or c0 % step or not 0 <= c0 <= buf.cols - k:
                _refuse(
                    f"a K-major wgmma operand at column {c0} (loop step {i}) of the {buf.cols}-column "
                    f"%{buf.name}: a {k}-column K slice must start on a multiple of {step} inside the tile"
                )
        return self.k(col)

    @staticmethod
    def _whole_warpgroups(o: N.Call) -> None:
        """Thread-level code must run on every thread of each consumer warpgroup (the fragment
        layouts and the wgmma instruction assume 4 warps of 32 threads)."""
        inner = [(d.proc, static(d.extent)) for d in o.dims if d.proc in (Proc.WARP, Proc.THREAD)]
        if inner != [(Proc.WARP, 4), (Proc.THREAD, 32)]:
            _refuse(
                f"{o.fn}() runs on {inner or 'no'} warps/threads of a warpgroup; the backend "
                "needs all 4 warps x 32 threads"
            )


def _multiple(e: N.IExpr, n: int) -> bool:
    """Whether index expression ``e`` is provably a multiple of ``n`` for every value of its
    variables (sums and differences of multiples, products with a multiple)."""
    if isinstance(e, N.IConst):
        return isinstance(e.value, int) and e.value % n == 0
    if isinstance(e, N.IBin) and e.op in ("+", "-"):
        return _multiple(e.a, n) and _multiple(e.b, n)
    if isinstance(e, N.IBin) and e.op == "*":
        return _multiple(e.a, n) or _multiple(e.b, n)
    return False


def _at_warpgroup(e: N.IExpr, w: int) -> N.IExpr:
    """``e`` with the WARPGROUP index bound to ``w``, folded."""
    if isinstance(e, N.IProc) and e.proc == Proc.WARPGROUP:
        return N.IConst(w)
    if isinstance(e, N.IBin):
        return N.ibin(e.op, _at_warpgroup(e.a, w), _at_warpgroup(e.b, w))
    return e
