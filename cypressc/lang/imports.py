"""``from MODULE import TASK, ...``: task variants brought in from a library module (issue
#37, removing the boilerplate the Cypress paper names in §5.4).

A module is a ``.cyp`` file, ``MODULE.cyp``, looked up beside the program, then in the
``-I`` folders, then in the library shipped with cypressc (``cypressc/lib``).  Each name is a
**task** name: every variant of that task in the module comes in, exactly as if written at
the statement's place in the program.  A module is parsed once per importing file, with the
program's dtype bindings: each of its dtype parameters must be declared by the program under
the same name and be bound to the same dtype there.  ``from cypress import *`` stays a no-op
(it keeps editors happy).

Leaf functions: a module's leaves may call (1) the intrinsics, (2) the ``@external``
functions the module declares itself (importing anything from the module brings them, with
their ``include()`` headers resolved beside the module), and (3) a leaf function the
*importing program* declares, by name: an ``@external`` of that name or a choice parameter
``ACT = choice(f, g)``, resolved to its bound function as the program's own calls are (the
dtype parameter ``T`` is shared the same way).  A call of a name none of these declare is
E016 at the import, naming what to declare.  A module declaring a ``choice`` parameter is
refused (E016): the importing program declares it.

Errors: E016 (a bad import statement, a module that cannot be found or imported, a leaf
function the program must declare), E017 (a name the module does not define as a task),
E018 (a module that imports itself, directly or through others), E013 (a dtype parameter the
program does not declare or binds otherwise), E014 (an external declared by both the module
and the program).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

from cypressc.diagnostics import CypressError, CypressErrors
from cypressc.lang import syntax as S
from cypressc.lang.externals import find_header
from cypressc.lang.intrinsics import LEAF_FUNCTIONS

if TYPE_CHECKING:
    from cypressc.lang.parse_decls import DeclParser

__all__ = ["LIB_DIR", "import_variants", "is_task_import", "shown", "source_files"]

LIB_DIR = Path(__file__).resolve().parent.parent / "lib"

_USAGE = "write `from hopper import mma, clear`: a module beside the program, in a -I folder or in cypressc's library, and task names"


def is_task_import(stmt: ast.stmt) -> bool:
    """True for ``from MODULE import ...`` other than the editors' ``from cypress import``."""
    return isinstance(stmt, ast.ImportFrom) and not (stmt.level == 0 and stmt.module == "cypress")


_SHOWN_LIB = "cypressc/lib/"  # how diagnostics name the library's folder


def shown(path: Path) -> str:
    """How diagnostics name a module file: the library's as ``cypressc/lib/NAME.cyp`` (the
    same on every machine), others as found."""
    return _SHOWN_LIB + path.name if path.parent == LIB_DIR else str(path)


def source_files(prog: S.Program) -> tuple[Path, ...]:
    """Every ``.cyp`` file ``prog`` is made of: its own, then each module its variants were
    imported from, in first-use order (what a build's inputs hash and the tuning cache's key
    read: editing the library changes them)."""
    files = dict.fromkeys([prog.path, *(v.loc.file for v in prog.variants)])
    return tuple(
        LIB_DIR / f.removeprefix(_SHOWN_LIB) if f.startswith(_SHOWN_LIB) else Path(f)
        for f in files
        if f
    )


def _search_dirs(p: DeclParser) -> list[Path]:
    """Where ``include()`` looks for a header, then the library."""
    dirs = [p.include_dir] if p.include_dir is not None else []
    return [*dirs, *p.include_path, LIB_DIR]


def import_variants(
    p: DeclParser, stmt: ast.ImportFrom, externals: list[S.External]
) -> tuple[list[S.Variant], list[S.External]]:
    """The variants ``stmt`` brings into the program being parsed by ``p`` (in the module's
    order, task by task as named), and the module's ``@external`` declarations not yet in
    ``externals`` (the program's, and those of modules imported before).  Raises
    :class:`CypressError` (E013, E014, E016–E018, located at the statement or the name) or
    :class:`CypressErrors` (the module's own errors)."""
    if stmt.level or not stmt.module:
        raise p.err("E016", "relative imports are not supported", stmt, _USAGE)
    if "." in stmt.module:
        raise p.err("E016", f"module names are one name, not '{stmt.module}'", stmt, _USAGE)
    dirs = _search_dirs(p)
    fname = stmt.module + ".cyp"
    found = find_header(fname, dirs)
    if found is None:
        raise p.err(
            "E016",
            f"no module '{stmt.module}'",
            stmt,
            "modules are found beside the program, then in the -I folders, then in cypressc's "
            "library; looked for " + ", ".join(shown(d / fname) for d in dirs),
        )
    key = found.resolve()
    if key in p.importing:
        chain = " -> ".join(q.name for q in (*p.importing, key))
        raise p.err(
            "E018",
            f"module '{stmt.module}' imports itself ({chain})",
            stmt,
            "remove one of the imports of the cycle",
        )
    for a in stmt.names:
        if a.name == "*" or a.asname:
            raise p.err("E016", "name the tasks to import, without `*` or `as`", a, _USAGE)
    prog = p.modules.get(key)
    if prog is None:
        prog = p.modules[key] = _parse_module(p, found, key)
    if prog.choices:
        c = prog.choices[0]
        raise p.err(
            "E016",
            f"module '{stmt.module}' declares choice parameter '{c.name}', which cannot be imported",
            stmt,
            f"declare `{c.name} = choice(...)` in the program and drop it from the module: the "
            "module's leaves call it by name",
        )
    _check_dtypes(p, stmt, prog)
    tasks = list(dict.fromkeys(v.task for v in prog.variants))
    out: list[S.Variant] = []
    for a in stmt.names:
        got = [v for v in prog.variants if v.task == a.name]
        if not got:
            raise p.err(
                "E017",
                f"module '{stmt.module}' defines no task '{a.name}'",
                a,
                f"{shown(found)} defines tasks "
                + ", ".join(tasks)
                + " (import task names, not variant names)",
            )
        _check_leaves(p, stmt, a, got, prog, externals)
        out.extend(got)
    return out, _new_externals(p, stmt, prog, externals)


def _check_dtypes(p: DeclParser, stmt: ast.ImportFrom, prog: S.Program) -> None:
    """E013: each dtype parameter of the module is the program's, bound alike."""
    for d in prog.dtype_params:
        mine = p.dtype_params.get(d.name)
        if mine is None:
            raise p.err(
                "E013",
                f"module '{stmt.module}' is generic over dtype parameter '{d.name}', which this program does not declare",
                stmt,
                f"declare it before the import, e.g. `{d.name} = dtype({', '.join(d.allowed)})`",
            )
        if mine.bound != d.bound:
            raise p.err(
                "E013",
                f"'{d.name}' is {mine.bound} here, but module '{stmt.module}' allows only "
                + " or ".join(d.allowed),
                stmt,
                f"bind '{d.name}' to one of those dtypes",
            )


def _leaf_calls(body: tuple[S.Stmt, ...]):
    for s in body:
        if isinstance(s, S.LeafCall):
            yield s
        elif isinstance(s, S.Loop):
            yield from _leaf_calls(s.body)


def _check_leaves(
    p: DeclParser,
    stmt: ast.ImportFrom,
    name: ast.alias,
    variants: list[S.Variant],
    prog: S.Program,
    externals: list[S.External],
) -> None:
    """E016: every leaf function the imported variants call is an intrinsic, one of the
    module's externals, or a leaf function the importing program declares (an external or
    a choice parameter, already resolved to its bound function by the module's parse).
    Within a module importing another, the check waits for the program: the leaf may be
    the program's, and the program checks every variant it brings in, nested ones too."""
    if p.imported:
        return
    known = set(LEAF_FUNCTIONS) | {e.name for e in (*prog.externals, *externals)}
    for v in variants:
        for call in _leaf_calls(v.body):
            if call.fn in known:
                continue
            err = p.err(
                "E016",
                f"task '{name.name}' of module '{stmt.module}' calls leaf function '{call.fn}', "
                "which this program does not declare",
                name,
                f'declare it in this program: an `@external("cpp::name", writes=[...])` '
                f"`def {call.fn}(...)`, or a choice parameter `{call.fn} = choice(f, g)` "
                "over its externals",
            )
            err.notes = ((f"'{v.name}' calls it here", call.loc),)
            raise err


def _new_externals(
    p: DeclParser, stmt: ast.ImportFrom, prog: S.Program, externals: list[S.External]
) -> list[S.External]:
    """The module's externals not yet among ``externals`` (a module imported twice brings
    them once); E014 for a name the program (or another module) declares otherwise."""
    out = []
    for e in prog.externals:
        same = [x for x in externals if x.name == e.name]
        if not same:
            out.append(e)
        elif same[0] != e or same[0].loc != e.loc:  # (loc is not part of ==)
            err = p.err(
                "E014",
                f"module '{stmt.module}' declares external '{e.name}', which this program (or a module it imports) declares too",
                stmt,
                f"rename or drop one of the two declarations of '{e.name}'",
            )
            err.notes = (("the other declaration", same[0].loc), ("the module's", e.loc))
            raise err
    return out


def _parse_module(p: DeclParser, path: Path, key: Path) -> S.Program:
    bindings = {d.name: d.bound for d in p.dtype_params.values()}
    try:
        return p.parse_module(path, shown(path), bindings, (*p.importing, key))
    except CypressError as e:
        raise CypressErrors([e]) from None
