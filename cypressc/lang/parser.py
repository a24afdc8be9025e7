"""Parse ``.cyp`` source into the syntax tree (Cypress paper §3.2, Fig. 5a).

The source is parsed with the standard library :mod:`ast` and never executed.  Every
Python construct outside the subset documented in ``docs/language.md`` is rejected
with a located :class:`~cypressc.diagnostics.CypressError` (codes ``E000``–``E018``).
A top-level ``from MODULE import TASK`` brings in a library module's variants
(:mod:`cypressc.lang.imports`).

A program may be generic over element types: a top-level ``T = dtype(f16, bf16)``
declares ``T``, types write ``tensor[(M, K), T]``, and the caller binds it
(``parse_source(..., dtypes={"T": "bf16"})``; the first allowed dtype is the default).
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Mapping

from cypressc.diagnostics import CypressError, CypressErrors, Loc
from cypressc.lang import syntax as S
from cypressc.lang.parse_decls import DeclParser
from cypressc.lang.parse_exprs import MAX_EXPR_DEPTH, ExprParser
from cypressc.lang.parse_stmts import StmtParser
from cypressc.lang.source import busiest_line, char_offset, decode_error_position, source_lines

__all__ = ["parse_file", "parse_source"]


class _Parser(DeclParser, StmtParser, ExprParser):
    """A ``.cyp`` file's parse: its source lines, the errors found so far (every one is
    reported, not only the first), the dtype and choice parameters declared, and where
    includes are looked up.  Its declarations, statements and expressions are parsed by
    :mod:`cypressc.lang.parse_decls`, :mod:`cypressc.lang.parse_stmts` and
    :mod:`cypressc.lang.parse_exprs`."""

    def __init__(
        self,
        path: str,
        source: str,
        dtypes: Mapping[str, str],
        include_dir: Path | None = None,
        include_path: tuple[Path, ...] = (),
        importing: tuple[Path, ...] = (),
        imported: bool = False,
        outer_choices: Mapping[str, str] | None = None,
    ) -> None:
        self.path = path
        self.lines = source_lines(source)
        self.errors: list[CypressError] = []
        self.bindings = dict(dtypes)
        self.dtype_params: dict[str, S.DtypeParam] = {}
        self.tensor_params: set[str] = set()  # of the variant being parsed
        self.include_dir = include_dir
        self.include_path = include_path  # -I folders, searched after the program's
        self.choices: dict[str, S.ChoiceParam] = {}
        self.choice_args: dict[
            tuple[str, str], Loc
        ] = {}  # (choice, function) -> where it is listed
        self.depth = 0  # of the expression being converted
        # the files being imported, outermost first (this one last), to refuse a cycle
        self.importing = importing
        # a library module: the program's dtype bindings are given whether or not it
        # declares them, and a conflict is the importing statement's error
        self.imported = imported
        # a library module's leaves may call the importing program's choice parameters by
        # name (name -> the bound leaf function), as the program's own leaves do
        self.outer_choices = dict(outer_choices or {})
        # the modules this file imports, parsed once however many statements name them
        self.modules: dict[Path, S.Program] = {}

    # -- locations ---------------------------------------------------------------------
    def loc(self, node: ast.AST) -> Loc:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        col = char_offset(text, getattr(node, "col_offset", 0)) + 1
        end_line = getattr(node, "end_lineno", line)
        end_col = (
            char_offset(text, getattr(node, "end_col_offset", 0) or 0) + 1
            if end_line == line
            else 0
        )
        return Loc(self.path, line, col, end_col, text)

    def err(self, code: str, msg: str, node: ast.AST, hint: str | None = None) -> CypressError:
        return CypressError(code, msg, self.loc(node), hint=hint)

    def parse_module(
        self, path: Path, shown: str, dtypes: Mapping[str, str], importing: tuple[Path, ...]
    ) -> S.Program:
        """Parse the library module at ``path`` for an import (:func:`parse_module_file`,
        with this program's choice parameters; here so that :mod:`cypressc.lang.imports`
        need not import this module)."""
        choices = {**self.outer_choices, **{c.name: c.bound for c in self.choices.values()}}
        return parse_module_file(path, shown, dtypes, self.include_path, importing, choices)


def parse_source(
    source: str,
    path: str = "<string>",
    dtypes: Mapping[str, str] | None = None,
    include_dir: str | Path | None = None,
    include_path: tuple[str | Path, ...] = (),
    *,
    importing: tuple[Path, ...] = (),
    imported: bool = False,
    outer_choices: Mapping[str, str] | None = None,
) -> S.Program:
    """Parse ``.cyp`` text into a :class:`~cypressc.lang.syntax.Program`.

    ``dtypes`` binds the program's parameters (``{"T": "bf16", "ACT": "bias_silu"}``:
    dtype and choice parameters); unbound ones take their first allowed value.  With
    ``include_dir`` (the program's folder), each ``include("h.cuh")`` must name an existing
    file relative to it or to a folder of ``include_path`` (E003).  A leading
    UTF-8 byte-order mark is ignored, as Python does.  Raises :class:`CypressErrors` with
    every syntax-level error found (E001 for Python syntax errors and expressions nested
    more than :data:`MAX_EXPR_DEPTH` deep, E002–E012 for constructs outside the subset,
    E013 for dtype parameters and bindings, E014 for ``@external`` declarations, E015 for
    choice parameters, E016–E018 for ``from MODULE import TASK`` statements,
    :mod:`cypressc.lang.imports`).  ``importing``, ``imported`` and ``outer_choices`` are for
    parsing a library module: the files whose imports led here, that it is one, and the
    importing program's choice parameters its leaves may call (name -> bound function).
    """
    source = source.removeprefix("\ufeff")
    if "\x00" in source:
        raise CypressErrors(
            [CypressError("E001", "the file is binary, not .cyp source", Loc(path, 1, 1))]
        )
    if not source.strip():
        raise CypressErrors(
            [
                CypressError(
                    "E001",
                    "the program is empty",
                    Loc(path, 1, 1),
                    hint="a .cyp file holds @task-decorated defs",
                )
            ]
        )
    try:
        with warnings.catch_warnings():
            # e.g. "invalid escape sequence" in a docstring: Python's business, not a .cyp error
            warnings.simplefilter("ignore")
            mod = ast.parse(source, filename=path)
    except SyntaxError as e:
        lines = source_lines(source)
        line = e.lineno or 1
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        raise CypressErrors(
            [
                CypressError(
                    "E001", f"syntax error: {e.msg}", Loc(path, line, e.offset or 1, 0, text)
                )
            ]
        ) from None
    except (RecursionError, MemoryError):
        line = busiest_line(source)
        lines = source_lines(source)
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        raise CypressErrors(
            [
                CypressError(
                    "E001",
                    "an expression on this line nests too deeply for Python's parser",
                    Loc(path, line, len(text) - len(text.lstrip()) + 1, 0, text),
                    hint=f"expressions nest at most {MAX_EXPR_DEPTH} levels; split it into named steps",
                )
            ]
        ) from None
    except ValueError as e:
        raise CypressErrors([CypressError("E001", f"cannot parse: {e}", Loc(path, 1, 1))]) from None
    p = _Parser(
        path,
        source,
        dtypes or {},
        Path(include_dir) if include_dir is not None else None,
        tuple(Path(d) for d in include_path),
        importing or ((Path(path).resolve(),) if include_dir is not None else ()),
        imported,
        outer_choices,
    )
    try:
        prog = p.module(mod)
    except RecursionError:
        # statements nest at most 100 blocks (Python's limit) and expressions MAX_EXPR_DEPTH
        # levels, so this is a last resort
        raise CypressErrors(
            [CypressError("E001", "the program nests too deeply", Loc(path, 1, 1))]
        ) from None
    if p.errors:
        raise CypressErrors(p.errors)
    if not prog.variants:
        raise CypressErrors(
            [CypressError("E001", "the program defines no @task variants", Loc(path, 1, 1))]
        )
    return prog


def parse_file(
    path: str | Path,
    dtypes: Mapping[str, str] | None = None,
    include_path: tuple[str | Path, ...] = (),
) -> S.Program:
    """Read and parse a ``.cyp`` file (``dtypes`` as in :func:`parse_source`; headers it
    includes and modules it imports are looked up in its folder first); unreadable files are
    E000 and non-UTF-8 files E001 errors."""
    p = Path(path)
    return parse_source(
        _read(path), str(path), dtypes, include_dir=p.parent, include_path=include_path
    )


def parse_module_file(
    path: Path,
    shown: str,
    dtypes: Mapping[str, str],
    include_path: tuple[Path, ...],
    importing: tuple[Path, ...],
    choices: Mapping[str, str] | None = None,
) -> S.Program:
    """Parse a library module for ``from MODULE import TASK`` (:mod:`cypressc.lang.imports`):
    with the importing program's dtype bindings ``dtypes`` (those it does not declare are
    ignored), ``importing``, the files being imported, outermost first, this one last, and
    ``choices``, the importing program's choice parameters (name -> bound leaf function),
    which the module's leaves call by name; ``shown`` is how its diagnostics name it.  Its
    ``include()`` headers resolve beside the module, then in ``include_path``."""
    return parse_source(
        _read(path),
        shown,
        dtypes,
        include_dir=path.parent,
        include_path=include_path,
        importing=importing,
        imported=True,
        outer_choices=choices,
    )


def _read(path: str | Path) -> str:
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise CypressErrors(
            [CypressError("E000", f"no such file: {path}", Loc(str(path)))]
        ) from None
    except OSError as e:
        raise CypressErrors(
            [CypressError("E000", f"cannot read {path}: {e.strerror}", Loc(str(path)))]
        ) from None
    if b"\x00" in data:
        raise CypressErrors(
            [CypressError("E001", "the file is binary, not .cyp source", Loc(str(path), 1, 1))]
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        # point at the first byte that is not UTF-8
        line, col = decode_error_position(data, e.start)
        raise CypressErrors(
            [
                CypressError(
                    "E001",
                    "the file is not UTF-8 text",
                    Loc(str(path), line, col, col + 1),
                    hint="save the program as UTF-8",
                )
            ]
        ) from None
    return text
