"""Print the epilogue's moves between register fragments and global memory (Cypress paper
§4.2.6, the statements of :mod:`cypressc.backend.emit_stmt` that leave the registers): a
fragment loaded from or stored straight to its global tile (each thread its elements, in
pairs, ragged edges skipped), added into it with ``red.global.add.v2.f32`` (a ``reduces=``
argument's private copy in registers), or staged in 128-byte-swizzled shared boxes and sent
with a TMA store or reduce-add.  :mod:`cypressc.backend.emit_stmt` dispatches to these."""

from __future__ import annotations

from cypressc.backend import plan as P
from cypressc.backend.emit_base import CTYPE, frag as _frag, staging as _staging
from cypressc.backend.emit_base import acc_pair as _acc_pair, store_pair as _store_pair
from cypressc.backend.emit_base import open_pairs as _open_acc_pairs
from cypressc.backend.emit_base import c as _c, cond as _cond, dim as _dim
from cypressc.backend.emit_base import done as _done, each as _each, times as _times
from cypressc.backend.names import sym as _n

__all__ = ["load_direct", "store_direct", "stage_write", "tma_store", "order_finish"]


def _global_tile(p: P.KernelPlan, op: P.LoadDirect | P.StoreDirect) -> tuple[str, str, str]:
    """The rows, the columns and the base pointer (its batch slice) of the global tensor a
    direct load or store reads or writes, as C."""
    t = next(x for x in p.tensors if x.name == op.tensor)
    rows, cols = _dim(t.dims[-2], p), _dim(t.dims[-1], p)
    if op.batch is None:
        return rows, cols, _n(op.tensor)
    return rows, cols, f"({_n(op.tensor)} + size_t({_c(op.batch)}) * {rows} * {cols})"


def _open_pairs(w, f, op: P.LoadDirect | P.StoreDirect) -> str:
    """Open the loop over a thread's pairs of fragment ``f``: ``r``, ``c`` the pair's tensor
    coordinates from the tile origin; the atom index's C name returned."""
    a = _open_acc_pairs(w, f)
    w(f"const int r = ({_c(op.row0)}){_times(64, a)} + rc.x, c = ({_c(op.col0)}) + rc.y;")
    return a


def load_direct(w, p: P.KernelPlan, op: P.LoadDirect) -> None:
    """Each thread's fragment from global memory, a pair of columns per load (0 past the
    tensor's rows or columns): a quad reads 8 contiguous columns of a row."""
    f = _frag(p, op.acc)
    rows, cols, base = _global_tile(p, op)
    w(f"// {op.event}: copy {op.tensor} -> %{op.acc} ({op.dtype} -> f32), each thread its fragment")
    a = _open_pairs(w, f, op)
    w(
        f"const float2 v = r < {rows} && c < {cols} ? cypress::load2<{CTYPE[op.dtype]}>({base} + "
        f"size_t(r) * {cols} + c) : make_float2(0.f, 0.f);"
    )
    w(f"{_n(op.acc)}[{a}][2 * j] = v.x, {_n(op.acc)}[{a}][2 * j + 1] = v.y;")
    w.close()
    _done(w, f.rows // 64)


def store_direct(w, p: P.KernelPlan, op: P.StoreDirect) -> None:
    """Each thread's fragment into its global tile, a pair of columns per store (converted to
    16 bits and packed, or a float2), or added with ``red.global.add.v2.f32`` (``reduce``);
    elements past the tensor's rows or columns are skipped; under ``when`` if any."""
    f = _frag(p, op.acc)
    rows, cols, base = _global_tile(p, op)
    what = "add" if op.reduce else "copy"
    w(
        f"// {op.event}: {what} %{op.acc} -> {op.tensor} (f32 -> {op.dtype}), each thread its fragment"
    )
    if op.when is not None:
        w.open(f"if ({_cond(op.when)})  // last host-loop iteration only")
    if op.reduce:
        # added once per step: a tile inside the tensor takes a copy of the loop without the
        # per-pair test, whose branches would keep every reduction apart
        w.open(f"if (({_c(op.row0)}) + {f.rows} <= {rows} && ({_c(op.col0)}) + {f.cols} <= {cols})")
        _store_pairs(w, f, op, base, cols, None)
        w.close("} else {")
        w.ind += 1
    _store_pairs(w, f, op, base, cols, f"r < {rows} && c < {cols}")
    if op.reduce:
        w.close()
    if op.when is not None:
        w.close()


def _store_pairs(w, f, op: P.StoreDirect, base: str, cols: str, test: str | None) -> None:
    """The loop over a thread's pairs of a direct store, each under ``test`` if any."""
    a = _open_pairs(w, f, op)
    pad = ""
    if test is not None:
        w(f"if ({test})")
        pad = "  "
    pair, addr = _acc_pair(op.acc, a), f"{base} + size_t(r) * {cols} + c"
    if op.reduce:
        w(f"{pad}cypress::red_add2({addr}, {pair});")
    else:
        w(pad + _store_pair(op.dtype, addr, pair))
    w.close()
    _done(w, f.rows // 64)


def stage_write(w, p: P.KernelPlan, op: P.StageWrite) -> None:
    """Each pair into its 128-byte-swizzled box of 64 rows: 64 columns of 16-bit elements
    (packed), or 32 of f32 (a float2; ``sw128_offset`` counts 16-bit columns)."""
    f = _frag(p, op.acc)
    bc = P.box_cols(op.dtype)
    boxes = f.cols // bc
    w(
        f"// {op.event}: copy %{op.acc} -> %{op.tensor} (this warpgroup's tile, swizzled 64x{bc} boxes)"
    )
    a = _open_acc_pairs(w, f)
    box = f"rc.y / {bc}" if a == "0" else f"a * {boxes} + rc.y / {bc}"
    w(f"uint8_t* box = {_staging(op.tensor, stage=op.stage)} + ({box}) * 8192;")
    col = "2 * (rc.y % 32)" if op.dtype == "f32" else "rc.y % 64"
    w(_store_pair(op.dtype, f"box + cypress::sw128_offset(rc.x, {col})", _acc_pair(op.acc, a)))
    w.close()
    _done(w, f.rows // 64)


def tma_store(w, p: P.KernelPlan, op: P.TmaStore) -> None:
    """The staged tile's 64-row boxes sent to global by TMA (stored, or added: ``reduce``),
    by each warpgroup's leader for its own tile, or (``whole``) by the first warpgroup's
    leader for every warpgroup's tile; the hardware clips the ragged edges."""
    f = _frag(p, op.acc)
    m = op.map
    bc = m.box[-1]
    boxes = f.cols // bc
    what = "add %s into global (TMA reduce-add" if op.reduce else "copy %s -> global (TMA store"
    w(f"// {op.event}: {what % ('%' + op.tensor)}, 64x{bc} boxes)")
    w.open("if (leader && cw == 0)" if op.whole else "if (leader)")
    if op.order:
        _order_enter(w, p, op)
    if op.whole:  # every warpgroup's tile, from the first one's leader
        w.open(f"for (int g = 0; g < {p.consumers}; ++g)")
    atoms = f.rows // 64
    a = _each(w, "a", atoms, unroll=False)
    b = _each(w, "b", boxes, unroll=False)
    box = (
        " + ".join(t for t in (f"{a} * {boxes}" if a != "0" else "", b if b != "0" else "") if t)
        or "0"
    )
    src = _staging(op.tensor, "g" if op.whole else "cw", op.stage) + (
        "" if box == "0" else f" + ({box}) * 8192" if " " in box else f" + {box} * 8192"
    )
    col, row = f"({_c(op.col0)}){_times(bc, b)}", f"({_c(op.row0)}){_times(64, a)}"
    if op.by_cols:
        col += f" + g * {f.cols}"
    elif op.whole:
        row += f" + g * {f.rows}"
    fn = "tma_reduce_add" if op.reduce else "tma_store"
    if len(m.box) == 2:
        w(f"cypress::{fn}_2d(&{_n(m.name)}, {src}, {col}, {row});")
    else:
        w(f"cypress::{fn}_3d(&{_n(m.name)}, {src}, {col}, {row}, {_c(op.batch)});")
    _done(w, boxes)
    _done(w, atoms)
    if op.whole:
        w.close()
    if op.order:
        # the block's last reduce-add marks it done here, not after the loop: a progress word's
        # address kept live across the main loop costs the consumers a register they lack
        last = "" if op.order_loop is None else f"kb == num_k{p.loop_suffix(op.order_loop)} - 1"
        if last:
            w.open(f"if ({last})")
        w("cypress::tma_store_commit();  // the last group, so that order_finish waits for it")
        order_finish(w, p, "")
        if last:
            w.close()
    w.close()


def _order_word(p: P.KernelPlan) -> str:
    """The tile's progress word (C): the workspace indexed by the block coordinates."""
    slot = "b0"
    for i in range(1, len(p.grid)):
        slot = f"({slot} * tiles{i} + b{i})"
    return f"order + {slot}"


def _order_pred(p: P.KernelPlan) -> str:
    """The progress word of the block before this one in the order (C; ``nullptr`` for the
    first): the next one along the grid's last dimension.  The blocks add from the last one
    down, as the tile walk starts them (``tile_coords``), so the one waited for is always
    running or done; and in a causal attention backward the later key blocks, whose first
    query tiles no earlier block reaches first, never wait for them."""
    last = len(p.grid) - 1
    return f"b{last} + 1 < tiles{last} ? {_order_word(p)} + 1 : nullptr"


def _order_enter(w, p: P.KernelPlan, op: P.TmaStore) -> None:
    """An ordered reduce-add's turn (``copy.add.ordered``): the tile's key, the row-major
    offset of its origin in 64 bits, and ``cypress::order_enter`` on the block's progress
    word (see :func:`order_finish`)."""
    t = next(x for x in p.tensors if x.name == op.map.tensor)
    key = f"(long long)({_c(op.order[0])})"
    for d, x in zip(t.dims[1:], op.order[1:]):
        key = f"({key} * {_dim(d, p)} + ({_c(x)}))"
    last = f"b{len(p.grid) - 1}"
    w(f"const long long key = {key};  // the tile's place in the order")
    w(
        f"cypress::order_enter({_order_word(p)}, {_order_pred(p)}, key);  // deterministic: the "
        f"block before this one in the order ({last} + 1) has added into the tile"
    )


def order_finish(w, p: P.KernelPlan, who: str = "leader && cw == 0") -> None:
    """The end of an ordered tile (``deterministic: true``): the first warpgroup's leader
    (``who``: the guard, '' inside its own block), which sent the reduce-adds, waits until
    they landed and the block before it in the order (:func:`_order_pred`) is done, then
    marks this one done."""
    last = f"b{len(p.grid) - 1}"
    call = f"cypress::order_finish({_order_word(p)}, {_order_pred(p)});"
    note = f"  // deterministic: the next block in the order ({last} - 1) may add into every tile"
    w((f"if ({who}) " if who else "") + call + note)
