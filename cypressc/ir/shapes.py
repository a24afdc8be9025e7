"""Piece shapes and coordinates of the partition operators (paper §3.2, Fig. 4).

``partition_by_mma`` follows the wgmma accumulator layout (PTX ISA "wgmma .m64nNk16
register fragment D"): a warpgroup tile of ``64·r`` rows is split among the 4 warps by
16-row groups (warp ``w`` owns rows ``64q + 16w + x``), and a warp's rows among its 32
lanes: lane ``t`` owns rows ``16q + t//4 + 8h`` and columns ``8c + 2(t%4) + u``
(h, u ∈ {0, 1}).  A rank-1 tile split as "C" is a per-row vector of the accumulator
(FlashAttention's row max and row sum): its pieces are the rows of the "C" pieces, so at
THREAD the 4 lanes of a quad hold the same rows (each its own copy, in registers).
Operand A has the same layout: the PTX ISA's register fragment of
A for ``.m64nNk16`` is, per k16 step, the accumulator layout of a 64 x 16 tile, so a
64 x K A tile held in registers is split exactly like a 64 x K accumulator (this is
what lets a converted accumulator feed the next wgmma as its A operand, FlashAttention's
P·V).  A wgmma reads A and B as the warpgroup's whole tiles (:func:`collective_base`);
B is only ever read from shared memory, so its "pieces" at WARP and THREAD are the whole
tile (replicated), and so are those of an A stored K x M (operand "At", read MN-major from
shared memory only: the backward pass's Pᵀ·dO).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from cypressc.diagnostics import CypressError, Loc
from cypressc.ir.nodes import IConst, IExpr
from cypressc.ir.origin import Origin, blame
from cypressc.lang.atoms import atom as lookup_atom
from cypressc.lang.kinds import PartKind, Proc

__all__ = ["mma_piece_shape", "mma_coords", "layout_key", "static"]


def static(e: IExpr) -> int | None:
    return e.value if isinstance(e, IConst) and isinstance(e.value, int) else None


def mma_piece_shape(
    shape: tuple[IExpr, ...],
    atom_name: str,
    proc: Proc,
    operand: str,
    loc: Loc,
    *,
    atom_origin: tuple[Origin, ...] = (),
    proc_origin: tuple[Origin, ...] = (),
    breaks: str = "the tile is partitioned here",
) -> tuple[IExpr, ...]:
    """Shape of one piece of ``partition_by_mma``; raises a located E040 when the tile does
    not fit the atom (rows not a multiple of 64/16, columns not a multiple of 8, …).

    ``atom_origin``/``proc_origin`` are the mapping values that chose the atom and the
    processor (empty for literals); with the origins the tile's extents carry, they decide
    where the error is reported (:func:`cypressc.ir.origin.blame`; ``breaks`` is the note at
    ``loc``).  The piece's extents keep the tile's origins, plus the processor's.
    """

    def fail(msg: str, *culprits: object, hint: str | None = None) -> CypressError:
        return blame("E040", msg, loc, culprits, breaks=breaks, hint=hint)

    atom = lookup_atom(atom_name)
    s = [static(x) for x in shape]
    if len(s) == 1 and operand == "C" and s[0] is not None:
        # a per-row vector of the accumulator (row statistics): the rows of the "C" pieces
        rows = s[0]
        r_origin = shape[0].origin + proc_origin  # type: ignore[union-attr]
        unit = atom.m if proc == Proc.WARP else 16
        if proc not in (Proc.WARP, Proc.THREAD):
            raise fail(f"partition_by_mma splits among WARP or THREAD, not {proc}", proc_origin)
        if rows % unit:
            raise fail(
                f"a {'warpgroup' if proc == Proc.WARP else 'warp'}'s per-row vector has {rows} rows; "
                f"it must be a multiple of {unit}",
                shape[0],
            )
        return (IConst(rows // 4 if proc == Proc.WARP else rows // 8, r_origin),)
    if None in s or len(s) != 2:
        raise fail(
            f"partition_by_mma needs a static rank-2 tile; got {len(shape)} dims with run-time extents",
            hint="partition by blocks with tunable sizes first, then by mma",
        )
    rows, cols = s
    if operand == "A" and cols % atom.k:
        raise fail(f"the A tile's K extent {cols} is not a multiple of {atom.k}", shape[1])
    if operand in ("B", "Bt", "At"):
        # "Bt": the B operand stored N x K (warpgroup_mma_bt), so K runs along the columns;
        # "At": the A operand stored K x M (warpgroup_mma_at), read MN-major from shared
        # memory as a whole tile like B, K along the rows
        k_dim = 1 if operand == "Bt" else 0
        if s[k_dim] % atom.k:
            raise fail(
                f"the {operand} tile's K extent {s[k_dim]} is not a multiple of {atom.k}",
                shape[k_dim],
            )
        return tuple(shape)
    if operand == "C" and (cols % 8 or cols % atom.n and atom.n % cols):
        raise fail(
            f"the accumulator tile has {cols} columns; {atom.name} needs a multiple of {atom.n}",
            shape[1],
            atom_origin,
            hint="pick an atom whose N divides the tile's N",
        )
    r_origin, c_origin = shape[0].origin + proc_origin, shape[1].origin + proc_origin  # type: ignore[union-attr]
    what = "accumulator" if operand == "C" else "A"
    if proc == Proc.WARP:
        if rows % atom.m:
            raise fail(
                f"a warpgroup's {what} tile has {rows} rows; {atom.name} needs a multiple of "
                f"{atom.m}",
                shape[0],
                hint="make the block tile's rows per warpgroup a multiple of 64",
            )
        return (IConst(rows // 4, r_origin), IConst(cols, shape[1].origin))  # type: ignore[union-attr]
    if proc == Proc.THREAD:
        if rows % 16:
            raise fail(
                f"a warp's {what} tile has {rows} rows; it must be a multiple of 16", shape[0]
            )
        return (IConst(rows // 8, r_origin), IConst(cols // 4, c_origin))
    raise fail(f"partition_by_mma splits among WARP or THREAD, not {proc}", proc_origin)


@lru_cache(maxsize=4096)
def mma_coords(
    shape: tuple[int, ...], proc: Proc, operand: str, index: int
) -> tuple[np.ndarray, ...]:
    """Row and column coordinates (inside the partitioned tile) of piece ``index``; only the
    row coordinates for a per-row vector (a rank-1 ``shape``)."""
    if len(shape) == 1:
        return mma_coords((shape[0], 8), proc, operand, index)[:1]
    rows, cols = shape
    if operand in ("B", "Bt", "At"):
        return np.arange(rows), np.arange(cols)
    if proc == Proc.WARP:
        r = np.array([64 * q + 16 * index + x for q in range(rows // 64) for x in range(16)])
        return r, np.arange(cols)
    t = index
    r = np.array([16 * q + t // 4 + 8 * h for q in range(rows // 16) for h in (0, 1)])
    c = np.array([8 * j + 2 * (t % 4) + u for j in range(cols // 8) for u in (0, 1)])
    return r, c


def layout_key(kind: PartKind, params: tuple) -> tuple:
    """What decides which elements a partition's pieces hold: an mma partition of operand
    A or C depends only on its processor level (and its base's shape), never on the atom's
    N or on which operand it feeds, so two such partitions of one tile have equal keys."""
    if kind == PartKind.MMA and params[2] in ("A", "C"):
        return (kind, params[1], "fragment")
    return (kind, params)
