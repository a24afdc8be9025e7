"""Located diagnostics: one error type, one renderer.

Every user error in cypressc — in a ``.cyp`` program, a YAML mapping, or a
mapping/program mismatch found by a pass — is a :class:`CypressError` carrying a
:class:`Loc` (file, line, column, end column).  :func:`render` turns it into::

    programs/gemm.cyp:12:5: error[E012]: unknown task 'mmaa'
       12 |     launch("mmaa", Cacc, Ap[0, k], Bp[k, 0])
          |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
    hint: the program defines tasks: clear, copy, gemm, mma

The CLI prints rendered diagnostics and exits with status 1; anything else that
escapes is an internal error (status 70).
"""

from __future__ import annotations

import dataclasses
import unicodedata
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Loc", "CypressError", "CypressErrors", "VerifyError", "Warning_", "render", "NO_LOC"]


@dataclass(frozen=True, slots=True)
class Loc:
    """A source span: 1-based ``line``/``col``; ``end_col`` is exclusive (0 = to end of token).

    ``text`` is the full source line, kept so diagnostics render without re-reading files.
    """

    file: str
    line: int = 0
    col: int = 0
    end_col: int = 0
    text: str = ""

    def __str__(self) -> str:
        if self.line <= 0:
            return self.file
        return f"{self.file}:{self.line}:{self.col}"


NO_LOC = Loc("<unknown>")


class CypressError(Exception):
    """A user error with a code (``E001``…), a message, a location, notes and a hint.

    Raised by every front-end and compiler stage for bad input.  ``notes`` are extra
    located lines (``note: …``) such as "previously defined here".
    """

    def __init__(
        self,
        code: str,
        message: str,
        loc: Loc = NO_LOC,
        *,
        hint: str | None = None,
        notes: tuple[tuple[str, Loc], ...] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.loc = loc
        self.hint = hint
        self.notes = notes

    def __str__(self) -> str:
        return render(self)


class CypressErrors(Exception):
    """Several :class:`CypressError` collected from one input (the checker reports all)."""

    def __init__(self, errors: list[CypressError]) -> None:
        super().__init__(f"{len(errors)} error(s)")
        self.errors = sorted(errors, key=lambda e: (e.loc.file, e.loc.line, e.loc.col))

    def __str__(self) -> str:
        return "\n".join(render(e) for e in self.errors)


class VerifyError(AssertionError):
    """The IR is malformed (:mod:`cypressc.ir.verify`, :mod:`cypressc.ir.sync_verify`,
    :mod:`cypressc.ir.happens_before`): a compiler bug, never a user error."""


@dataclass(frozen=True, slots=True)
class Warning_:
    """A located warning (``warning[W001]``); never stops compilation."""

    code: str
    message: str
    loc: Loc = NO_LOC
    hint: str | None = None


def _excerpt(loc: Loc, marker: str = "^") -> list[str]:
    if loc.line <= 0:
        return []
    text = loc.text
    if not text and Path(loc.file).is_file():
        try:
            lines = Path(loc.file).read_text(errors="replace").splitlines()
            text = lines[loc.line - 1] if loc.line - 1 < len(lines) else ""
        except OSError:
            text = ""
    if not text or "\x00" in text:
        return []  # nothing to show, or a line of binary data
    # control characters (escape sequences, stray bytes) would garble the terminal
    text = "".join(c if c.isprintable() or c == "\t" else "\ufffd" for c in text.rstrip("\r\n"))
    gutter = f"{loc.line:>5} | "
    # columns count characters of the line as written; the excerpt shows it with tabs
    # expanded, so the caret goes under the token's expanded, on-screen position
    start = min(max(loc.col - 1, 0), len(text))
    end = loc.end_col - 1 if loc.end_col > loc.col else len(text.rstrip())
    end = max(start, min(end, len(text)))
    left, span = _cells(text[:start].expandtabs(4)), _cells(text[:end].expandtabs(4))
    return [
        gutter + text.expandtabs(4),
        " " * (len(gutter) - 2) + "| " + " " * left + marker * max(1, span - left),
    ]


def _cells(s: str) -> int:
    """Terminal cells ``s`` takes: 2 for wide (CJK, emoji) characters, 0 for combining marks."""
    if s.isascii():
        return len(s)
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in s
    )


def render(diag: CypressError | Warning_, *, kind: str | None = None) -> str:
    """Render a diagnostic as ``file:line:col: error[CODE]: message`` + source excerpt + hint."""
    kind = kind or ("warning" if isinstance(diag, Warning_) else "error")
    out = [f"{diag.loc}: {kind}[{diag.code}]: {diag.message}"]
    out += _excerpt(diag.loc)
    for note, nloc in getattr(diag, "notes", ()):
        out.append(f"{nloc}: note: {note}")
        out += _excerpt(nloc, "-")
    if diag.hint:
        out.append(f"hint: {diag.hint}")
    return "\n".join(out)


def with_loc(err: CypressError, loc: Loc) -> CypressError:
    """Return ``err`` re-located at ``loc`` when it has no location of its own."""
    if err.loc.line <= 0:
        err.loc = dataclasses.replace(loc)
    return err
