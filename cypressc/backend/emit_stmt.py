"""Print one kernel statement of a :class:`~cypressc.backend.plan.KernelPlan` as CUDA C++.

:mod:`cypressc.backend.emit` prints the kernel's frame (shared memory, mbarrier
initialization, the roles, the tile loop, the main loop); every statement inside comes
from here, in the order the IR gives it.  A :class:`~cypressc.backend.plan.Sync` prints
exactly its IR op (:mod:`cypressc.backend.emit_sync`); compute statements print their leaf
(TMA copy, wgmma steps, fills, SIMT row sums, stores).  Every expression of a statement is printed by :mod:`cypressc.backend.cexpr`
(``_c``; ``_cond`` for a condition standing alone); the text around it is the leaf's.  Every
name from the program is written through :func:`cypressc.backend.names.sym` (``_n``), so that
its C++ spelling is chosen when the file is complete.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import product
from math import prod

from cypressc.backend import plan as P
from cypressc.backend.cexpr import is_true, is_zero
from cypressc.backend.emit_base import CTYPE, frag as _frag
from cypressc.backend.emit_base import atom as _atom, c as _c, cond as _cond, dim as _dim
from cypressc.backend.emit_base import done as _done, each as _each, per_atom as _per_atom
from cypressc.backend.emit_base import stage_base as _stage_base, times as _times
from cypressc.backend.emit_base import acc_pair as _acc_pair, store_pair as _store_pair
from cypressc.backend.emit_base import open_pairs as _open_acc_pairs
from cypressc.backend.emit_epilogue import load_direct, stage_write, store_direct, tma_store
from cypressc.backend.emit_sync import emit_sync
from cypressc.backend.names import sym as _n
from cypressc.ir.nodes import IConst
from cypressc.abi.dtypes import DTYPES
from cypressc.lang.atoms import atom_k

__all__ = ["emit_stmt", "emit_stmts", "multicast_mask"]


def _load(w, p: P.KernelPlan, ld: P.Load) -> None:
    m = ld.map
    b = next(x for x in p.buffers if x.name == ld.buffer)
    w(f"// {ld.event}: copy %{m.tensor} -> %{ld.buffer} (TMA)")
    base = _stage_base(b, ld.stage)
    bar = f"&{_n(ld.bar)}[{_c(ld.bar_stage, top=True)}]"
    coords = [_c(x) for x in ld.coords]
    tm = _n(m.name)

    mc = ""
    if ld.multicast:
        mask = multicast_mask(p.cluster, ld.multicast)
        mc = "_multicast"
        bar = f"{bar}, uint16_t({mask:#x} << crank)"

    def one(dst: str, inner: str) -> None:
        if len(m.box) == 1:
            w(f"cypress::tma_load_1d{mc}({dst}, &{tm}, {bar}, {inner});")
        elif len(m.box) == 2:
            w(f"cypress::tma_load_2d{mc}({dst}, &{tm}, {bar}, {inner}, {coords[0]});")
        else:
            w(f"cypress::tma_load_3d{mc}({dst}, &{tm}, {bar}, {inner}, {coords[1]}, {coords[0]});")

    if ld.multicast:  # the tile is the same in the blocks along these dims: one loads it for all
        first = " && ".join(f"cr{d} == 0" for d in ld.multicast)
        axes = ", ".join(f"b{d}" for d in ld.multicast)
        w(f"// the same tile in the cluster's blocks along {axes}: the first one multicasts it")
        w.open(f"if ({first})")
    if ld.who is not None:
        w.open(f"if ({_cond(ld.who)})")
    if ld.chunks == 1:
        one(base, coords[-1])
    else:
        w("#pragma unroll")
        w.open(f"for (int j = 0; j < {ld.chunks}; ++j)")
        one(f"{base} + j * {_n(b.name)}_CHUNK", f"{coords[-1]} + {b.chunk_cols} * j")
        w.close()
    if ld.who is not None:
        w.close()
    if ld.multicast:
        w.close()


def multicast_mask(shape: tuple[int, ...], dims: tuple[int, ...]) -> int:
    """The ``.multicast::cluster`` CTA mask of a tile shared along grid dimensions ``dims``
    by a cluster of ``shape`` blocks per grid dimension, for the block of rank 0 (shifted
    left by the issuing block's rank: its rank along ``dims`` is 0): a bit per block whose
    ranks differ from the issuer's only along ``dims``.  Ranks are row-major over the grid
    dimensions, the last one fastest (``emit._cluster_ranks``)."""
    strides = [prod(shape[i + 1 :]) for i in range(len(shape))]
    mask = 0
    for ranks in product(*(range(shape[d]) for d in dims)):
        mask |= 1 << sum(r * strides[d] for r, d in zip(ranks, dims))
    return mask


def _k_major_addr(buf: P.StageBuffer, base: str, col, row: str | None) -> str:
    """The shared address of wgmma step ``kk`` of a K-major operand tile: row ``row`` (C), the
    step ``col / k + kk`` along K (``col``, a kernel expression: a K slice of a wider
    resident tile starts ``col`` columns in; ``k`` = :func:`k_step`); 32 B along a swizzled
    row (k16 of 16-bit elements, k32 of FP8), ``swizzle / 32`` steps per chunk, then the next
    chunk."""
    per = buf.swizzle // 32
    ks = "kk" if is_zero(col) else f"(kk + ({_c(col)}) / {k_step(buf.dtype)})"
    chunk = f"{_n(buf.name)}_CHUNK"
    k_off = f"{ks} * {chunk}" if per == 1 else f"({ks} / {per}) * {chunk}"
    in_row = "" if per == 1 else f" + ({ks} % {per}) * 32"
    at_row = "" if row is None else f" + {row} * {buf.swizzle}"
    return f"{base} + {k_off}{at_row}{in_row}"


def k_step(dtype: str) -> int:
    """The K of one wgmma on ``dtype`` operands: 32 bytes of a row (16 for f16/bf16, 32 for
    FP8), as :func:`cypressc.lang.atoms.atom_k`."""
    return atom_k(DTYPES[dtype].itemsize)


def _mn_major_a_desc(buf: P.StageBuffer, base: str, col, atoms: int, row=IConst(0)) -> str:
    """The descriptor of an MN-major A operand (stored K x M, ``warpgroup_mma_at``) for k16
    step ``kk`` and 64-row atom ``a``: columns ``col + 64a`` of ``buf`` (a whole chunk), rows
    ``16kk``...  The canonical MN-major layout is the same for A and B (CUTLASS
    cute/atom/mma_traits_sm90_gmma.hpp, ``make_gmma_desc<Major::MN>``: ``Swizzle<3,4,3> o
    ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))`` for 128 B; PTX ISA 8.x §9.7.15.5.1.2 "Shared
    Memory Matrix Layout", imm-trans-a = 1 selects M-major for A): LBO = the next chunk of
    SW / 2 columns along M (``_CHUNK``), SBO = the next 8 K-rows (8 x SW B), which
    ``cypress::desc_mn_sw`` sets as for B."""
    m = f"({_c(col)})" if atoms == 1 else f"(({_c(col)}) + a * 64)"
    chunk = f"{_n(buf.name)}_CHUNK"
    return (
        f"cypress::desc_mn_sw{buf.swizzle}({base} + ({m} / {buf.chunk_cols}) * {chunk} + "
        f"{_k_rows(row, buf)}kk * 16 * {buf.swizzle}, {chunk})"
    )


def _k_rows(row, buf: P.StageBuffer) -> str:
    """The bytes an MN-major operand's first K row adds to its address (nothing at row 0): K
    rows are ``swizzle`` bytes apart inside a chunk."""
    return "" if is_zero(row) else f"({_c(row)}) * {buf.swizzle} + "


def _mma(w, p: P.KernelPlan, mm: P.Mma) -> None:
    f = _frag(p, mm.acc)
    b_buf = next(x for x in p.buffers if x.name == mm.b_buf)
    b_base = _stage_base(b_buf, mm.b_stage)
    src = f"A from registers %{mm.a_frag}, " if mm.a_frag else ""
    fill = (
        f" (fill {mm.zero_fill} folded in: scale-d off on the first step)" if mm.zero_fill else ""
    )
    kmajor = ", B K-major" if mm.b_kmajor else ""
    mn = ", A MN-major" if mm.a_mnmajor else ""
    ks = k_step(mm.dtype)
    w(f"// {mm.event}: warpgroup_mma, {src}{mm.k // ks} k{ks} step(s){mn}{kmajor}{fill}")
    w("#pragma unroll")
    w.open(f"for (int kk = 0; kk < {mm.k // ks}; ++kk)")
    # MN-major B: a k16 step is 16 swizzled rows; K-major A: 32 B along a swizzled row, so
    # swizzle / 32 steps per chunk (cypress.cuh explains both layouts)
    if mm.b_kmajor:  # B stored N x K: addressed like a K-major A tile, the instruction's tnspB = K
        w(
            f"const uint64_t db = cypress::desc_k_sw{b_buf.swizzle}"
            f"({_k_major_addr(b_buf, b_base, mm.b_col, None if is_zero(mm.b_row) else f'({_c(mm.b_row)})')});"
        )
    else:
        bc = mm.b_chunk if isinstance(mm.b_chunk, int) else f"({_c(mm.b_chunk, top=True)})"
        chunk = "" if bc == 0 else f"{bc} * {_n(b_buf.name)}_CHUNK + "
        w(
            f"const uint64_t db = cypress::desc_mn_sw{b_buf.swizzle}({b_base} + {chunk}"
            f"{_k_rows(mm.b_row, b_buf)}kk * 16 * {b_buf.swizzle}, {_n(b_buf.name)}_CHUNK);"
        )
    atoms = f.rows // 64
    zero = ", kk == 0" if mm.zero_fill else ""
    if mm.a_frag:
        ai = _atom(atoms)
        mb = ", cypress::Major::K" if mm.b_kmajor else ""
        _per_atom(
            w,
            atoms,
            f"cypress::wgmma_rs<{mm.n}, {CTYPE[mm.dtype]}{mb}>(&{_n(mm.a_frag)}[{ai}][kk * 4], db, "
            f"{_n(f.name)}[{ai}]{zero});",
        )
        w.close()
        return
    a_buf = next(x for x in p.buffers if x.name == mm.a_buf)
    a_base = _stage_base(a_buf, mm.a_stage)
    acc = f"{_n(f.name)}[0]" if atoms == 1 else f"{_n(f.name)}[a]"
    if atoms > 1:
        w("#pragma unroll")
        w.open(f"for (int a = 0; a < {atoms}; ++a)")
    if mm.a_mnmajor:
        w(f"const uint64_t da = {_mn_major_a_desc(a_buf, a_base, mm.a_col, atoms, mm.a_row)};")
    else:
        row = f"({_c(mm.a_row)})" if atoms == 1 else f"(({_c(mm.a_row)}) + a * 64)"
        w(
            f"const uint64_t da = cypress::desc_k_sw{a_buf.swizzle}({_k_major_addr(a_buf, a_base, mm.a_col, row)});"
        )
    if mm.a_mnmajor:
        mb = "K" if mm.b_kmajor else "MN"
        majors = f", cypress::Major::MN, cypress::Major::{mb}"
    else:
        majors = ", cypress::Major::K, cypress::Major::K" if mm.b_kmajor else ""
    w(f"cypress::wgmma<{mm.n}, {CTYPE[mm.dtype]}{majors}>(da, db, {acc}{zero});")
    if atoms > 1:
        w.close()
    w.close()


def _row_sum(w, p: P.KernelPlan, op: P.RowSum) -> None:
    b = next(x for x in p.buffers if x.name == op.buf)
    base = _stage_base(b, op.stage)
    chunk = "" if op.col0 == 0 else f" + {op.col0 // b.chunk_cols} * {_n(b.name)}_CHUNK"
    w(f"// {op.event}: row_sum of %{op.buf} rows (SIMT)")
    w.open(f"if ({_cond(op.active)})")
    w("#pragma unroll")
    w(f"for (int rr = 0; rr < {op.rows}; ++rr)")
    w(
        f"  {_n(op.vec)}[rr] += cypress::sw128_row_sum<{CTYPE[op.dtype]}>({base}{chunk}, ({_c(op.row)}) + rr, "
        f"{op.cols // 64}, {_n(b.name)}_CHUNK);"
    )
    w.close()


def _fill_shared(w, p: P.KernelPlan, op: P.FillShared) -> None:
    b = next(x for x in p.buffers if x.name == op.buf)
    w(
        f"// {op.event}: fill of %{op.buf}[{_c(op.row)}.., {_c(op.col)}..] ({op.rows}x{op.cols} per thread, SIMT)"
    )
    guarded = not is_true(op.active)
    if guarded:
        w.open(f"if ({_cond(op.active)})")
    w("#pragma unroll")
    w.open(f"for (int r = 0; r < {op.rows}; ++r)")
    w("#pragma unroll")
    w.open(f"for (int c = 0; c < {op.cols}; ++c)")
    w(f"const int row = ({_c(op.row)}) + r, col = ({_c(op.col)}) + c;")
    w(
        f"*reinterpret_cast<{CTYPE[op.dtype]}*>(s_{_n(b.name)} + (col / {b.chunk_cols}) * {_n(b.name)}_CHUNK + "
        f"cypress::sw_offset<{b.swizzle}>(row, col % {b.chunk_cols})) = {CTYPE[op.dtype]}({_c(op.value)});"
    )
    w.close()
    w.close()
    if guarded:
        w.close()


def _fill(w, p: P.KernelPlan, op) -> None:
    w(f"// {op.event}: fill")
    if isinstance(op, P.FillVector):
        v = next(x for x in p.vectors if x.name == op.vec)
        w(f"for (int i = 0; i < {v.n}; ++i) {_n(v.name)}[i] = {_c(op.value)};")
        return
    f = _frag(p, op.acc)
    w("#pragma unroll")
    if f.rows // 64 == 1:
        w(f"for (int i = 0; i < {f.cols // 2}; ++i) {_n(f.name)}[0][i] = {_c(op.value)};")
        return
    w(f"for (int a = 0; a < {f.rows // 64}; ++a)")
    w("#pragma unroll")
    w(f"  for (int i = 0; i < {f.cols // 2}; ++i) {_n(f.name)}[a][i] = {_c(op.value)};")


def _convert(w, p: P.KernelPlan, op: P.Convert) -> None:
    f = _frag(p, op.src)
    w(f"// {op.event}: copy %{op.src} -> %{op.dst} (f32 -> {op.dtype}, the A fragment of a wgmma)")
    n = f.rows // 64
    i = _atom(n)
    _per_atom(w, n, f"cypress::acc_to_a<{CTYPE[op.dtype]}>({_n(op.src)}[{i}], {_n(op.dst)}[{i}]);")


def _add(w, p: P.KernelPlan, op: P.Add) -> None:
    f = _frag(p, op.acc)
    w(f"// {op.event}: {dict(zip('+*', ('add', 'mul'))).get(op.op, 'copy')}")
    a = _each(w, "a", f.rows // 64, unroll=False)
    w(
        f"for (int i = 0; i < {f.cols // 2}; ++i) {_n(op.acc)}[{a}][i] {op.op}= {_n(op.other)}[{a}][i];"
    )
    _done(w, f.rows // 64)


def _scale(w, p: P.KernelPlan, op: P.Scale) -> None:
    f = _frag(p, op.acc)
    w(f"// {op.event}: scale")
    a = _each(w, "a", f.rows // 64, unroll=False)
    w(f"for (int i = 0; i < {f.cols // 2}; ++i) {_n(op.acc)}[{a}][i] *= {_c(op.value)};")
    _done(w, f.rows // 64)


def _external(w, p: P.KernelPlan, op: P.External) -> None:
    """The user's C++ once per element of ``op.acc``'s shape: fragments element by element,
    per-row vectors (global or shared) loaded once per row of the thread in each 64-row atom
    (two), per-column ones once per column pair of each atom, one-element operands once before
    the loops (each zero past its extent: those elements are never stored), scalars as given.
    (A second copy of the loop without the tests, for a tile inside the vectors' rows, made
    ptxas spill the attention backward's consumers at 240 registers: the tests stay.)"""
    f = _frag(p, op.acc)
    w(f"// {op.event}: {op.fn}() — user C++ {op.cpp} ({op.header}), per element")
    for i, x in enumerate(op.args):
        if x.broadcast:  # one element for the whole call: loaded once
            ct = CTYPE[x.dtype]
            inside = " && ".join(f"({_c(i)}) < {_dim(e, p)}" for i, e in x.bounds)
            w(f"const {ct} v{i} = {inside} ? {_n(x.name)}[{_c(x.col0)}] : {ct}{{}};")
        elif x.kind == "svec":
            b = next(y for y in p.buffers if y.name == x.name)
            ct = CTYPE[x.dtype]
            w(
                f"const {ct}* sv{i} = reinterpret_cast<const {ct}*>({_stage_base(b, x.stage)}) + "
                f"{_c(x.value)};  // the piece, past the copy's aligned start"
            )
    a = _each(w, "a", f.rows // 64)
    vecs = [(i, x) for i, x in enumerate(op.args) if x.kind in ("vec", "svec") and not x.broadcast]
    for i, x in vecs:
        if not x.row:
            continue
        # a thread's elements lie in two rows of the atom (acc_coord: row 8 * (j % 2) on)
        ct, row, ext = CTYPE[x.dtype], f"({_c(x.col0)}) + r", _dim(x.extent, p)
        got = f"sv{i}[r]" if x.kind == "svec" else f"{_vec_row(x, ext)}[{row}]"
        w(f"{ct} v{i}[2];")
        w("#pragma unroll")
        w.open("for (int h = 0; h < 2; ++h)")
        w("const int r = cypress::acc_coord(h).x" + ("" if a == "0" else f" + {a} * 64") + ";")
        w(f"v{i}[h] = {row} < {ext} ? {got} : {ct}{{}};")
        w.close()
    cols = any(not x.row for _, x in vecs)
    w("#pragma unroll")
    if cols:  # a column pair's values serve pairs 2 jc and 2 jc + 1 (its two rows)
        w.open(f"for (int jc = 0; jc < {f.cols // 8}; ++jc)")
        w("const int c = cypress::acc_coord(2 * jc).y;")
    else:
        w.open(f"for (int j = 0; j < {f.cols // 4}; ++j)")
    for i, x in vecs:
        if x.row:
            continue
        ct, col, ext = CTYPE[x.dtype], f"({_c(x.col0)}) + c", _dim(x.extent, p)
        if x.kind == "svec":
            # columns past the row's end hold the next row's elements (a flattened TMA map)
            got = (f"sv{i}[c]", f"sv{i}[c + 1]")
        else:
            n = _vec_row(x, ext)
            got = (f"{n}[{col}]", f"{n}[{col} + 1]")
        w(f"const {ct} v{i}_0 = {col} < {ext} ? {got[0]} : {ct}{{}};")
        w(f"const {ct} v{i}_1 = {col} + 1 < {ext} ? {got[1]} : {ct}{{}};")
    calls: list[list[str]] = [[], []]
    for i, x in enumerate(op.args):
        for e in (0, 1):
            if x.kind == "frag":
                calls[e].append(f"{_n(x.name)}[{a}][2 * j + {e}]")
            elif x.broadcast:
                calls[e].append(f"v{i}")
            elif x.kind in ("vec", "svec"):
                calls[e].append(f"v{i}[{'h' if cols else 'j % 2'}]" if x.row else f"v{i}_{e}")
            else:
                calls[e].append(f"{x.dtype}({_c(x.value)})")
    if cols:
        w("#pragma unroll")
        w.open("for (int h = 0; h < 2; ++h)")
        w("const int j = 2 * jc + h;")
    for e in (0, 1):
        w(f"{op.cpp}({', '.join(calls[e])});")
    if cols:
        w.close()
    w.close()
    _done(w, f.rows // 64)


def _vec_row(x: P.ExtArg, extent: str) -> str:
    """The C++ pointer to the row a global vector operand reads: the tensor, or its row
    ``batch`` of ``extent`` elements when it is sliced off a rank > 1 tensor."""
    n = _n(x.name)
    return n if x.batch is None else f"({n} + size_t({_c(x.batch)}) * {extent})"


def _write_shared(w, p: P.KernelPlan, op: P.WriteShared) -> None:
    """Each accumulator pair (two adjacent columns: one 4-byte word) at its place in the
    stage buffer: chunk ``col / chunk_cols``, then the SW-byte swizzle of (row, column in the
    chunk), as the TMA would have written the tile and a wgmma descriptor reads it."""
    f = _frag(p, op.acc)
    b = next(x for x in p.buffers if x.name == op.buf)
    base = _stage_base(b, op.stage)
    w(
        f"// {op.event}: copy %{op.acc} -> %{op.buf}[{_c(op.row)}.., {_c(op.col)}..] "
        f"(f32 -> {op.dtype}, swizzled as a wgmma reads it)"
    )
    a = _open_acc_pairs(w, f)
    row = f"({_c(op.row)}) + rc.x" if a == "0" else f"({_c(op.row)}) + a * 64 + rc.x"
    w(f"const int row = {row}, col = ({_c(op.col)}) + rc.y;")
    addr = (
        f"{base} + (col / {b.chunk_cols}) * {_n(b.name)}_CHUNK + "
        f"cypress::sw_offset<{b.swizzle}>(row, col % {b.chunk_cols})"
    )
    w(_store_pair(op.dtype, addr, _acc_pair(op.acc, a)))
    w.close()
    _done(w, f.rows // 64)


def _store_vector(w, p: P.KernelPlan, op: P.StoreVector) -> None:
    t = next(x for x in p.tensors if x.name == op.tensor)
    cond = _cond(op.active) if op.when is None else f"({_cond(op.active)}) && {_cond(op.when)}"
    why = (
        ""
        if op.when is None
        else ", last host-loop iteration only (the earlier ones' writes are overwritten)"
    )
    w(f"// {op.event}: copy %{op.vec} -> {op.tensor} (f32){why}")
    w.open(f"if ({cond})")
    w(f"for (int i = 0; i < {op.n}; ++i)")
    index = _c(op.index)
    w(
        f"  if (({index}) + i < {_dim(t.dims[0], p)}) {_n(op.tensor)}[({index}) + i] = {_n(op.vec)}[i];"
    )
    w.close()


_ROW_CALLS = {
    "warpgroup_row_max": ("warpgroup_row_max", None),
    "warpgroup_row_sum": ("warpgroup_row_sum", None),
    "exp2_diff": ("exp2_diff", "exp2_diff_vec"),
    "scale_rows": ("scale_rows", "scale_vec"),
    "div_rows": ("div_rows", "div_vec"),
    "mask_columns": ("mask_columns", None),
    "mask_causal": ("mask_causal", None),
    "mask_causal_t": ("mask_causal_t", None),
    "row_log_sum_exp": (None, "row_log_sum_exp"),
}


def _row_op(w, p: P.KernelPlan, op: P.RowOp) -> None:
    """A leaf over accumulator rows, once per 64-row atom (cypress.cuh's row helpers)."""
    (k0, x), rest = op.args[0], op.args[1:]
    a = _atom(op.atoms)
    x = _n(x)
    if op.fn == "fill":
        stmt = f"{x}[{a}][0] = {x}[{a}][1] = {_c(op.value)};"
    elif op.fn == "copy":
        y = _n(rest[0][1])
        stmt = f"{y}[{a}][0] = {x}[{a}][0]; {y}[{a}][1] = {x}[{a}][1];"
    else:
        frag_fn, vec_fn = _ROW_CALLS[op.fn]
        call = vec_fn if k0 == "row" and vec_fn else frag_fn
        if op.partial:
            call += "_partial"
        value = _c(op.value) if op.value is not None else None
        if op.fn in ("mask_causal", "mask_causal_t"):
            # the helper counts rows from its atom's first: atom a's start 64·a rows further down
            # the tile, so the diagonal offset (first row minus first column) grows by 64·a
            value = f"{value}{_times(64, a)}"
        args = [f"{_n(n)}[{a}]" for _, n in op.args] + ([value] if value is not None else [])
        stmt = f"cypress::{call}({', '.join(args)});"
    for v in op.reduce:  # an operand of this op: the same atoms (lower_rows refuses mixed rows)
        w(f"// the row sums in %{v} are per-lane parts until here: sum them across each quad")
        _per_atom(w, op.atoms, f"cypress::quad_reduce({_n(v)}[{a}]);")
    part = " (this thread's part)" if op.partial else ""
    w(f"// {op.event}: {op.fn} over accumulator rows{part}")
    # two statements under one loop need braces
    _per_atom(w, op.atoms, f"{{ {stmt} }}" if op.fn == "copy" and op.atoms > 1 else stmt)


def _row_store(w, p: P.KernelPlan, op: P.RowStore) -> None:
    t = next(x for x in p.tensors if x.name == op.tensor)
    n = _dim(t.dims[-1], p)
    base = _n(op.tensor) if op.batch is None else f"{_n(op.tensor)} + size_t({_c(op.batch)}) * {n}"
    atoms = next(v.rows for v in p.row_vectors if v.name == op.vec) // 64
    w(f"// {op.event}: copy %{op.vec} -> {op.tensor} (f32), one lane of each quad")
    cond = (
        "threadIdx.x % 4 == 0" if op.when is None else f"threadIdx.x % 4 == 0 && {_cond(op.when)}"
    )
    w.open(f"if ({cond})")
    w(f"float* __restrict__ dst = {base};")
    w(f"const int r0 = {_c(op.row0)} + 16 * ((threadIdx.x / 32) % 4) + (threadIdx.x % 32) / 4;")
    a = _each(w, "a", atoms)
    w("#pragma unroll")
    w("for (int h = 0; h < 2; ++h)")
    r = f"r0{_times(64, a)} + 8 * h"
    w(f"  if ({r} < {n}) dst[{r}] = {_n(op.vec)}[{a}][h];")
    _done(w, atoms)
    w.close()


_PRINT = {
    P.Sync: emit_sync,
    P.Load: _load,
    P.Mma: _mma,
    P.RowSum: _row_sum,
    P.Fill: _fill,
    P.FillVector: _fill,
    P.FillShared: _fill_shared,
    P.Convert: _convert,
    P.Add: _add,
    P.Scale: _scale,
    P.LoadDirect: load_direct,
    P.External: _external,
    P.StoreDirect: store_direct,
    P.StageWrite: stage_write,
    P.WriteShared: _write_shared,
    P.TmaStore: tma_store,
    P.StoreVector: _store_vector,
    P.RowOp: _row_op,
    P.RowStore: _row_store,
}


def emit_stmt(w, p: P.KernelPlan, st) -> None:
    """Print kernel statement ``st`` of plan ``p`` with writer ``w`` (``w(line)``,
    ``w.open(head)``, ``w.close()``)."""
    _PRINT[type(st)](w, p, st)


def emit_stmts(w, p: P.KernelPlan, stmts: list) -> None:
    """Print ``stmts`` in order; consecutive sync ops under the same guard share one ``if``."""
    i = 0
    while i < len(stmts):
        st = stmts[i]
        guard = st.when if isinstance(st, P.Sync) else None
        if guard is None:
            emit_stmt(w, p, st)
            i += 1
            continue
        j = i
        while j < len(stmts) and isinstance(stmts[j], P.Sync) and stmts[j].when == guard:
            j += 1
        w.open(f"if ({_cond(guard)})")
        for x in stmts[i:j]:
            emit_stmt(w, p, replace(x, when=None))
        w.close()
        i = j
