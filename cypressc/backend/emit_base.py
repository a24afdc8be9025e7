"""The pieces every printed statement of the kernel is made of: C++ types, expressions and
program names (marked for :mod:`cypressc.backend.names`), the per-atom and per-box loops, the
addresses of stage buffers and staging tiles.  :mod:`cypressc.backend.emit_stmt` prints the
compute statements with them, :mod:`cypressc.backend.emit_sync` the sync ops and
:mod:`cypressc.backend.emit` the kernel's frame."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cypressc.backend import plan as P
from cypressc.backend.cexpr import cexpr, is_zero
from cypressc.backend.names import sym

__all__ = [
    "CTYPE",
    "StagedTile",
    "acc_pair",
    "atom",
    "c",
    "cond",
    "dim",
    "done",
    "each",
    "frag",
    "open_pairs",
    "per_atom",
    "stage_base",
    "staged_tiles",
    "staging",
    "store_pair",
    "times",
]

CTYPE = {
    "f16": "__half",
    "bf16": "__nv_bfloat16",
    "f32": "float",
    "i32": "int",
    "f8e4m3": "__nv_fp8_e4m3",
    "f8e5m2": "__nv_fp8_e5m2",
}


def c(e, top: bool = False) -> str:
    """Kernel expression ``e`` as C++, its program scalars marked."""
    return cexpr(e, top, var=sym)


def frag(p: P.KernelPlan, name: str) -> P.Fragment:
    """The register fragment of ``p`` named ``name`` (StopIteration: none)."""
    return next(x for x in p.fragments if x.name == name)


def dim(d: str, p: P.KernelPlan) -> str:
    """An extent of a kernel parameter (C text over the sizes: :class:`P.GlobalTensor`'s
    ``dims``) as C++, its sizes marked."""
    return re.sub(r"[A-Za-z_]\w*", lambda m: sym(m[0]) if m[0] in p.sizes else m[0], d)


@dataclass(frozen=True)
class StagedTile:
    """A shared staging tile of the epilogue (``StageWrite`` fills it, ``TmaStore`` sends it
    out): ``rows`` x ``cols`` of ``dtype`` per consumer warpgroup, warpgroup ``cw``'s at
    byte ``offset + cw * tile_bytes`` of shared memory."""

    name: str
    offset: int
    rows: int
    cols: int
    dtype: str
    stage_bytes: int = 0  # a tile staged per main-loop step: the bytes of one stage

    @property
    def tile_bytes(self) -> int:
        return self.rows * self.cols * (4 if self.dtype == "f32" else 2)


def staged_tiles(p: P.KernelPlan) -> list[StagedTile]:
    """The staging tiles the epilogue of ``p`` writes, in order (the kernel names their place:
    ``<name>_SMEM``, ``<name>_TILE``)."""
    out: dict[str, StagedTile] = {}
    for st in [*p.epilogue, *(x for sec in p.consumer.loops for x in sec)]:
        if isinstance(st, P.StageWrite) and st.tensor not in out:
            f = frag(p, st.acc)
            out[st.tensor] = StagedTile(
                st.tensor, st.offset, f.rows, f.cols, st.dtype, st.stage_bytes
            )
    return list(out.values())


def cond(e) -> str:
    """A condition (kernel expression or guard) as the whole test of an ``if``."""
    return c(e, top=True)


def stage_base(buf: P.StageBuffer, stage) -> str:
    """The address of stage ``stage`` (a kernel expression) of shared tile ``buf``."""
    base = f"s_{sym(buf.name)}"
    return base if is_zero(stage) else f"{base} + {c(stage)} * {sym(buf.name)}_STAGE"


def each(w, var: str, n: int, *, unroll: bool = True) -> str:
    """Open ``for (int var = 0; var < n; ++var)`` (a block: close it with :func:`done`) and
    return the index to write, ``var``; for ``n == 1`` open nothing and return ``"0"``: a
    warpgroup of one 64-row atom, a tile of one box, has no loop to show."""
    if n == 1:
        return "0"
    if unroll:
        w("#pragma unroll")
    w.open(f"for (int {var} = 0; {var} < {n}; ++{var})")
    return var


def done(w, n: int) -> None:
    """Close what :func:`each` opened for ``n``."""
    if n != 1:
        w.close()


def atom(n: int) -> str:
    """The index of the 64-row atom a statement of :func:`per_atom` is written with: ``a``, or
    the folded ``0`` for a warpgroup of one atom."""
    return "a" if n > 1 else "0"


def per_atom(w, n: int, stmt: str, *, unroll: bool = True) -> None:
    """The one-statement form of :func:`each`: ``stmt`` (written with :func:`atom`) under
    ``for (int a = 0; a < n; ++a)``, or alone for one atom."""
    if n == 1:
        w(stmt)
        return
    if unroll:
        w("#pragma unroll")
    w(f"for (int a = 0; a < {n}; ++a) {stmt}")


def times(k: int | str, i: str) -> str:
    """``k * i`` as a term of a sum: '' when the index ``i`` is the folded 0."""
    return "" if i == "0" else f" + {k} * {i}"


def open_pairs(w, f: P.Fragment) -> str:
    """Open the loop over a thread's accumulator pairs of fragment ``f`` (``rc``: pair j's
    row and column in its 64-row atom; close with ``w.close()`` then :func:`done`) and return
    the atom index's C name."""
    a = each(w, "a", f.rows // 64)
    w("#pragma unroll")
    w.open(f"for (int j = 0; j < {f.cols // 4}; ++j)")
    w("const int2 rc = cypress::acc_coord(j);")
    return a


def acc_pair(acc: str, a: str) -> str:
    """Accumulator pair ``j`` of atom ``a`` of fragment ``acc``, as two C arguments."""
    return f"{sym(acc)}[{a}][2 * j], {sym(acc)}[{a}][2 * j + 1]"


def store_pair(dtype: str, addr: str, pair: str) -> str:
    """Two adjacent f32 values ``pair`` stored at ``addr`` as ``dtype``: one float2, or one
    4-byte word of two packed 16-bit elements."""
    if dtype == "f32":
        return f"*reinterpret_cast<float2*>({addr}) = make_float2({pair});"
    return f"*reinterpret_cast<uint32_t*>({addr}) = cypress::pack2<{CTYPE[dtype]}>({pair});"


def staging(tensor: str, wg: str = "cw", stage=None) -> str:
    """Consumer warpgroup ``wg``'s tile (a C expression; default this thread's) of staging
    tile ``tensor`` (:func:`staged_tiles`; offsets, not a pointer like a stage buffer's: a
    pointer variable changes ptxas's schedule), in stage ``stage`` (a kernel expression) of a
    tile staged per main-loop step."""
    at = "" if stage is None or is_zero(stage) else f" + ({c(stage)}) * {sym(tensor)}_STAGE"
    return f"smem + {sym(tensor)}_SMEM{at} + {wg} * {sym(tensor)}_TILE"
