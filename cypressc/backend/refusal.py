"""The refusal of ``cuda-lowering``: a program whose IR needs a kernel shape the backend
does not generate yet (E050, located at the mapping's BLOCK instance by
:func:`cypressc.backend.lower.cuda_lowering`)."""

from __future__ import annotations

__all__ = ["REFUSAL_CODE", "Refuse", "refuse"]

REFUSAL_CODE = "E050"


class Refuse(Exception):
    """Raised inside the lowering with the reason; turned into E050 at the pass boundary."""


def refuse(msg: str) -> None:
    """Stop the lowering: the backend cannot generate this kernel (``msg`` says why)."""
    raise Refuse(msg)
