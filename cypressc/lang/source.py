"""Positions in ``.cyp`` source text, as diagnostics count them.

Python's :mod:`ast` numbers lines by ``\\n``, ``\\r\\n`` and ``\\r`` only and gives
columns as UTF-8 byte offsets; a :class:`~cypressc.diagnostics.Loc` counts characters.
These helpers translate between the two, and find a line to blame when Python's own
parser gives up without one.
"""

from __future__ import annotations

import io
import re
import tokenize

__all__ = ["source_lines", "char_offset", "busiest_line", "decode_error_position"]


def source_lines(source: str) -> list[str]:
    """The lines of ``source`` as Python numbers them (1-based line n is item n - 1).

    ``str.splitlines`` would also split at form feeds and U+2028, which may sit inside
    a string or a comment without ending a line for Python.
    """
    return re.split(r"\r\n|\r|\n", source)


def char_offset(text: str, byte_offset: int) -> int:
    """The 0-based character offset in the line ``text`` of ast's 0-based UTF-8 ``byte_offset``."""
    if text.isascii():
        return byte_offset
    return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))


def busiest_line(source: str) -> int:
    """The first line of the logical line with the most operators and brackets.

    Used when :func:`ast.parse` overflows on an expression too deep for it: that error
    has no line, and the deepest expression is among the busiest lines.  Returns 1 when
    ``source`` cannot be tokenized.
    """
    best, best_line, count, start = -1, 1, 0, 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if not start:
                start = tok.start[0]
            if tok.type == tokenize.OP:
                count += 1
            elif tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if count > best:
                    best, best_line = count, start
                count, start = 0, 0
    except (tokenize.TokenError, SyntaxError, RecursionError, MemoryError):
        pass
    return best_line


def decode_error_position(data: bytes, start: int) -> tuple[int, int]:
    """1-based (line, column in characters) of byte ``start``, the first byte of ``data``
    that is not UTF-8; the bytes before it decode, so the column counts what an editor
    shows (a leading byte-order mark is not a column)."""
    line_start = data.rfind(b"\n", 0, start) + 1
    prefix = data[line_start:start].decode("utf-8", errors="replace")
    if line_start == 0:
        prefix = prefix.removeprefix("\ufeff")
    return data.count(b"\n", 0, start) + 1, len(prefix) + 1
