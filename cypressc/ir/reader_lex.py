"""The tokens of the printed event IR and the parts every line shares: index expressions,
views, event references and event types (Cypress paper §4.1, Fig. 7, as
:mod:`cypressc.ir.printer` writes them).  :mod:`cypressc.ir.reader` parses whole modules
with it.

The IR is line-oriented: one op per line, a loop body indented under its ``do`` line.  A
line is split into tokens by one regular expression: ``%name`` (tensors, partitions,
scalars and events; ``#`` may appear in a name, as in ``%A#stage``), ``@name`` (memories,
roles, the module), names, numbers, strings and punctuation.  ``//`` inside parentheses or
brackets is floor division (the printer parenthesizes every binary operation); anywhere else
it starts a comment, and so does ``#`` outside a name (the ``# RUN:`` and ``# CHECK:`` lines
of tests/filecheck).  Every error is a located :class:`~cypressc.diagnostics.CypressError`
``E063`` (``file:line:col``, the line, a caret under the token, what to write instead).

A tag (a memory, processor level, role, hazard, sync op kind: :mod:`cypressc.lang.kinds`,
:mod:`cypressc.ir.kinds`) is read into its enum's member (:meth:`Cursor.tag`); a word that
is none of its members is an E063 listing them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeVar

from cypressc.diagnostics import CypressError, Loc
from cypressc.ir import nodes as N
from cypressc.ir.kinds import Role
from cypressc.ir.printer import PROC_ID
from cypressc.lang.kinds import Proc, Tag

__all__ = ["CODE", "Tok", "Line", "Cursor", "lex", "ir_error"]

CODE = "E063"  # a malformed IR file (cypressc opt)

_TOKEN = re.compile(
    r"""(?P<ws>[ \t]+)
    |(?P<sym>%[A-Za-z_0-9][\w#]*)
    |(?P<at>@\w+)
    |(?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
    |(?P<str>"[^"\n]*")
    |(?P<name>[A-Za-z_]\w*)
    |(?P<op>->|//|==|!=|<=|>=|&&|[-+*/%<>^()\[\]{},:;=.'?|&!#])""",
    re.X,
)
_BINOPS = ("+", "-", "*", "/", "//", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "^")
# a processor index as fmt_expr writes it (block_id.x, warpgroup_id()), or a level's name
# (HOST: host_id())
_PROC_OF = {v: k for k, v in PROC_ID.items()} | {p.value: p for p in Proc}
_INDEX_HINT = "a processor index is " + ", ".join(
    PROC_ID.get(p, p.lower() + "_id") + (".x" if p == Proc.BLOCK else "()") for p in Proc
)
T = TypeVar("T", bound=Tag)


@dataclass(frozen=True, slots=True)
class Tok:
    """One token: ``kind`` (sym, at, num, str, name, op), its ``text`` and 1-based ``col``."""

    kind: str
    text: str
    col: int

    @property
    def name(self) -> str:
        """The name of a ``%name`` or ``@name`` token (without its sigil)."""
        return self.text[1:]


@dataclass(frozen=True, slots=True)
class Line:
    """One non-blank line: its number, indentation (spaces), tokens and text."""

    no: int
    indent: int
    toks: tuple[Tok, ...]
    text: str


def ir_error(file: str, line: Line | None, msg: str, tok: Tok | None = None, hint=None):
    """E063 at ``tok`` of ``line`` (its first column when no token is given)."""
    if line is None:
        return CypressError(CODE, msg, Loc(file), hint=hint)
    col = tok.col if tok is not None else line.indent + 1
    end = col + len(tok.text) if tok is not None else 0
    return CypressError(CODE, msg, Loc(file, line.no, col, end, line.text), hint=hint)


def lex(text: str, file: str) -> list[Line]:
    """The non-blank, non-comment lines of ``text``; E063 at a character no token starts
    with, or at a tab in the indentation."""
    out = []
    for no, raw in enumerate(text.splitlines(), 1):
        body = raw.lstrip(" ")
        indent = len(raw) - len(body)
        if body.startswith("\t"):
            line = Line(no, indent, (), raw)
            raise ir_error(
                file,
                line,
                "a tab in the indentation",
                Tok("op", "\t", indent + 1),
                "indent with spaces, two per loop level, as the printer does",
            )
        toks: list[Tok] = []
        depth, pos = 0, indent
        while pos < len(raw):
            m = _TOKEN.match(raw, pos)
            if m is None:
                line = Line(no, indent, tuple(toks), raw)
                bad = Tok("op", raw[pos], pos + 1)
                raise ir_error(file, line, f"unexpected character {raw[pos]!r}", bad)
            kind, t = m.lastgroup, m.group()
            if kind == "op" and t == "#" and raw.startswith("# per [", pos):
                line = Line(no, indent, tuple(toks), raw)
                raise ir_error(
                    file,
                    line,
                    "`# per [...]` is the old notation",
                    Tok("op", "#", pos + 1),
                    "write `per [...]` (no #): the dimensions are part of the op",
                )
            if kind == "op" and (t == "#" or t == "//" and depth <= 0):
                break  # a comment (inside parentheses `//` divides; `#` is in names too)
            if kind != "ws":
                toks.append(Tok(kind, t, pos + 1))  # type: ignore[arg-type]
                depth += t in "([" if kind == "op" else 0
                depth -= t in ")]" if kind == "op" else 0
            pos = m.end()
        if toks:
            out.append(Line(no, indent, tuple(toks), raw))
    return out


class Cursor:
    """Reads the tokens of one line; every ``expect`` raises a located E063."""

    def __init__(self, line: Line, file: str) -> None:
        self.line, self.file, self.i = line, file, 0

    # ------------------------------------------------------------------ tokens
    def peek(self, k: int = 0) -> Tok | None:
        j = self.i + k
        return self.line.toks[j] if j < len(self.line.toks) else None

    def at(self, *texts: str) -> bool:
        t = self.peek()
        return t is not None and t.text in texts

    def accept(self, text: str) -> Tok | None:
        if self.at(text):
            self.i += 1
            return self.line.toks[self.i - 1]
        return None

    def error(self, msg: str, tok: Tok | None = None, hint: str | None = None) -> CypressError:
        """E063 at ``tok``, else at the next token, else past the end of the line."""
        t = tok or self.peek()
        if t is None:
            t = Tok("op", " ", len(self.line.text.rstrip()) + 1)
        return ir_error(self.file, self.line, msg, t, hint)

    def _found(self) -> str:
        t = self.peek()
        return "the end of the line" if t is None else repr(t.text)

    def expect(self, text: str, hint: str | None = None) -> Tok:
        t = self.accept(text)
        if t is None:
            raise self.error(f"expected '{text}', found {self._found()}", hint=hint)
        return t

    def kind(self, kind: str, what: str, hint: str | None = None) -> Tok:
        """The next token, which must be of ``kind`` (``what`` names it in the error)."""
        t = self.peek()
        if t is None or t.kind != kind:
            raise self.error(f"expected {what}, found {self._found()}", hint=hint)
        self.i += 1
        return t

    def words(self, phrase: str) -> None:
        """Expect the tokens of ``phrase`` (a fixed phrase of the notation, e.g. ``stage(s)``)."""
        for m in _TOKEN.finditer(phrase):
            if m.lastgroup != "ws":
                self.expect(m.group())

    def tag(self, cls: type[T], what: str, kind: str = "name", tok: Tok | None = None) -> T:
        """The next token (of ``kind``: a name, or ``at`` for ``@name``; or ``tok``, already
        read) as a member of the tag enum ``cls``; ``what`` names it (``a memory``).  E063 at
        the token, naming ``cls``'s members, when it is none of them."""
        t = tok or self.kind(kind, f"{what} ({_choices(cls, kind)})")
        word = t.name if t.kind == "at" else t.text
        try:
            return cls(word)
        except ValueError:
            raise self.error(
                f"{t.text!r} is not {what}", t, f"{what} is one of: {_choices(cls, t.kind)}"
            ) from None

    def integer(self, what: str) -> int:
        t = self.kind("num", what)
        if not t.text.isdigit():
            raise self.error(f"{what} is a whole number, not {t.text}", t)
        return int(t.text)

    def end(self) -> None:
        if self.peek() is not None:
            raise self.error(f"unexpected {self._found()} at the end of the op")

    def listed(self, item, close: str) -> list:
        """``item, item, …`` up to (and consuming) ``close``; the opening bracket is read."""
        out = []
        if self.accept(close):
            return out
        while True:
            out.append(item())
            if self.accept(close):
                return out
            self.expect(",")

    # ------------------------------------------------------------------ IR pieces
    def expr(self) -> N.IExpr:
        """An index expression as :func:`~cypressc.ir.printer.fmt_expr` writes it."""
        t = self.peek()
        if t is None:
            raise self.error("expected an expression, found the end of the line")
        if t.kind == "num" or (
            t.text == "-" and (n := self.peek(1)) is not None and n.kind == "num"
        ):
            neg = bool(self.accept("-"))
            t = self.kind("num", "a number")
            v: int | float = float(t.text) if any(c in t.text for c in ".eE") else int(t.text)
            return N.IConst(-v if neg else v)
        if t.kind == "sym":
            self.i += 1
            return N.IVar(t.name)
        if t.text == "(":
            self.i += 1
            a = self.expr()
            op = self.peek()
            if op is None or op.text not in _BINOPS:
                raise self.error(
                    f"expected an operator ({' '.join(_BINOPS)}), found {self._found()}"
                )
            self.i += 1
            b = self.expr()
            self.expect(")")
            return N.IBin(op.text, a, b)  # as written: no folding
        if t.kind == "name":
            self.i += 1
            if t.text in ("cdiv", "min", "max"):
                self.expect("(")
                a = self.expr()
                self.expect(",")
                b = self.expr()
                self.expect(")")
                return N.IBin(t.text, a, b)
            if t.text == "block_id":
                self.expect(".")
                d = self.kind("name", "x, y or z")
                if d.text not in ("x", "y", "z"):
                    raise self.error("a block index is block_id.x, .y or .z", d)
                return N.IProc(Proc.BLOCK, "xyz".index(d.text))
            if t.text in ("inf", "nan"):
                return N.IConst(float(t.text))
            if t.text.endswith("_id") and self.accept("("):
                self.expect(")")
                proc = _PROC_OF.get(t.text) or _PROC_OF.get(t.text[:-3].upper())
                if proc is None:
                    raise self.error(f"'{t.text}()' is not a processor index", t, _INDEX_HINT)
                return N.IProc(proc)
        raise self.error(
            f"expected an expression, found {t.text!r}",
            t,
            "a number, %name, (a op b), cdiv/min/max(a, b), block_id.x or warpgroup_id()",
        )

    def view(self) -> N.View:
        """``%tensor`` or ``%partition[i, …]``."""
        t = self.kind("sym", "a tensor (%name) or a piece (%partition[i, j])")
        if self.accept("["):
            return N.Piece(t.name, tuple(self.listed(self.expr, "]")))
        return N.TRef(t.name)

    def evref(self) -> tuple[Tok, N.EvRef]:
        """``%e3`` or ``%e3[i, :, …]`` (``:`` waits for every instance along a dimension)."""
        t = self.kind("sym", "an event (%e1)")
        idx: tuple = ()
        if self.accept("["):
            idx = tuple(self.listed(lambda: None if self.accept(":") else self.expr(), "]"))
        return t, N.EvRef(t.name, idx)

    def dims(self) -> tuple[N.Dim, ...]:
        """An event type: ``()`` or ``[(extent, PROC), …]``."""
        if self.accept("("):
            self.expect(")", "an op run once has the type ()")
            return ()
        self.expect("[", "an event type is () or [(extent, PROC), ...]")

        def dim() -> N.Dim:
            self.expect("(")
            e = self.expr()
            self.expect(",")
            p = self.tag(Proc, "a processor level")
            self.expect(")")
            return N.Dim(e, p)

        return tuple(self.listed(dim, "]"))

    def role(self) -> Role:
        """``@producer``."""
        return self.tag(Role, "a role", "at")

    def roles(self) -> tuple[Role, ...]:
        """``@producer``, or several roles ``@consumer,producer`` (an mbarrier's)."""
        out = [self.role()]
        while self.at(",") and (n := self.peek(1)) is not None and n.kind == "name":
            self.i += 1
            out.append(self.tag(Role, "a role"))
        return tuple(out)


def _choices(cls: type[Tag], kind: str) -> str:
    """``GLOBAL, SHARED, …`` (``@GLOBAL, …`` when written as ``@name``)."""
    return ", ".join(("@" if kind == "at" else "") + m.value for m in cls)
