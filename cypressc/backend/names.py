"""The C++ spelling of the program's names in the generated CUDA, chosen when it is printed.

The emitter writes the kernel's own names (``kb``, ``cw``, ``stage``, ``box``, ``e``, …)
as they are and every name that comes from the program -- a tensor, a size or float
argument, a shared tile, a register fragment, an mbarrier array, a TMA map -- through
:func:`sym`, which marks it.  :func:`choose_names` then reads the finished text: the words
without a mark are the kernel's (fixed), and each program name becomes the first of
``name``, ``name_1``, ``name_2``, … that makes none of the words it appears in (``s_Q``,
``Q_STAGE``, ``Q`` itself) a fixed word, a C++ keyword or a word another program name
made.  A program may so call a tensor ``a``, ``stage`` or ``e``: the kernel's locals keep
their names and the tensor is spelled ``a_1``.  The idea is Exo's ``Sym``: a name is a
symbol until the printer picks its text, so nothing before printing needs to know which
names the kernel reserves.  Names in comments are the IR's, as ``cypressc explain``
prints them, and are not marked.

The scope is the whole file: a program name avoids every word of the kernel's code, in
any function or block, but members and qualified names (``rc.x``, ``cypress::Major::K``),
which C++ never looks up unqualified.  Words in comments and string literals do not count;
words on preprocessor lines do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from cypressc.lang.syntax import CXX_KEYWORDS

__all__ = ["CPP_RESERVED", "choose_names", "sym"]

_OPEN, _CLOSE = "\x01", "\x02"

# C++ keywords (the checker's list, E037) and the object-like macros and built-in variables
# of the C and CUDA headers a program name could meet without the kernel's text showing them
CPP_RESERVED = CXX_KEYWORDS | frozenset(
    """NULL EOF INFINITY NAN errno stdin stdout stderr assert offsetof linux unix major minor
    threadIdx blockIdx blockDim gridDim warpSize""".split()
)

_MEMBER = ("::", ".", "->")
_WORD = re.compile(r"(?:[A-Za-z0-9_]|\x01[^\x01\x02]*\x02)+")
_MARKED = re.compile(r"\x01([^\x01\x02]*)\x02")


def sym(name: str) -> str:
    """Program name ``name`` as the emitter writes it: marked, so that
    :func:`choose_names` picks its C++ spelling."""
    if _OPEN in name or _CLOSE in name:
        raise ValueError(f"a name with a marker character: {name!r}")
    return f"{_OPEN}{name}{_CLOSE}"


def _code(line: str) -> str:
    """``line`` without its ``//`` comment and the text of its string literals (``extern
    "C"``, an ``#include``'s path: the generated code has no ``//`` or ``"`` in them)."""
    return re.sub(r'"[^"]*"', '""', line.split("//", 1)[0])


def choose_names(text: str, avoid: Iterable[str] = ()) -> str:
    """``text`` with every marked program name (:func:`sym`) spelled: as itself where that
    is free, else with the first suffix ``_1``, ``_2``, … that is (module docstring);
    ``avoid``: more words no program name may make.  Names are decided in the order they
    first appear; one keeping its own spelling comes before any that needs a suffix, so a
    program's ``a_1`` is not displaced by the renamed ``a``.  Raises ValueError for a word
    that joins two program names (the emitter never writes one)."""
    fixed = set(CPP_RESERVED) | set(avoid)
    shapes: dict[str, set[tuple[str, str]]] = {}  # name -> (prefix, suffix) of its words
    for line in text.splitlines():
        code = _code(line)
        for m in _WORD.finditer(code):
            word = m.group()
            names = _MARKED.findall(word)
            if not names:
                # a member (rc.x) or a qualified name (Major::K) is never looked up unqualified
                if not word[0].isdigit() and not code[: m.start()].endswith(_MEMBER):
                    fixed.add(word)
                continue
            if len(names) > 1:
                raise ValueError(f"one word joins program names {names}: {word!r}")
            pre, post = _MARKED.split(word)[0], _MARKED.split(word)[-1]
            shapes.setdefault(names[0], set()).add((pre, post))
    for line in text.splitlines():  # a name only a comment shows keeps its spelling
        for name in _MARKED.findall(line):
            shapes.setdefault(name, set())
    taken: set[str] = set()
    chosen: dict[str, str] = {}

    def words(name: str, spelled: str) -> set[str]:
        return {pre + spelled + post for pre, post in shapes[name]}

    for name in shapes:
        made = words(name, name)
        if not made & (fixed | taken):
            chosen[name] = name
            taken |= made
    for name in shapes:
        k = 0
        while name not in chosen:
            k += 1
            made = words(name, f"{name}_{k}")
            if not made & (fixed | taken):
                chosen[name] = f"{name}_{k}"
                taken |= made
    return _MARKED.sub(lambda m: chosen[m.group(1)], text)
