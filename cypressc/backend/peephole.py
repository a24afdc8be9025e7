"""Rewrites of a role's typed kernel statements that the instruction set makes exact.

**Zero fill into a wgmma** (scale-d = 0).  ``fill(C, 0)`` followed, with no other
statement touching ``C`` in between, by a wgmma accumulating into ``C`` computes
``C = A @ B``, which is what ``wgmma.mma_async`` does with its scale-d predicate off on
the first k16 step: the fill and its edge to the wgmma (a read of the zeros) disappear
together, nothing else changes.  It matters inside a main loop: writing an accumulator's
registers there while another wgmma group is still in flight makes ptxas inject a
``warpgroup.wait`` (C7517) that serializes the two products (FlashAttention's S = Q·Kᵀ of
step k+1 behind O += P·V of step k); CUTLASS and FlashAttention-3 clear the S accumulator
the same way.
"""

from __future__ import annotations

from dataclasses import replace

from cypressc.backend import plan as P
from cypressc.backend.cexpr import is_zero

__all__ = ["fold_zero_fills"]

_FIELDS = ("acc", "src", "dst", "other", "a_frag")


def _touches(st, name: str) -> bool:
    """Whether a compute statement reads or writes register fragment ``name`` (sync
    statements only order the compiler's accesses, they do not touch values)."""
    return not isinstance(st, P.Sync) and any(getattr(st, f, None) == name for f in _FIELDS)


def fold_zero_fills(stmts: list) -> list:
    """``stmts`` with every ``Fill(X, 0)`` whose next statement touching ``X`` is an ``Mma``
    into ``X`` removed and that ``Mma`` marked with the fill's event (``zero_fill``).  Pure: returns a new list."""
    out = list(stmts)
    i = 0
    while i < len(out):
        st = out[i]
        if isinstance(st, P.Fill) and is_zero(st.value, exact=False):
            nxt = next((j for j in range(i + 1, len(out)) if _touches(out[j], st.acc)), None)
            if nxt is not None and isinstance(out[nxt], P.Mma) and out[nxt].acc == st.acc \
                    and out[nxt].a_frag != st.acc:
                out[nxt] = replace(out[nxt], zero_fill=st.event)
                del out[i]
                continue
        i += 1
    return out
