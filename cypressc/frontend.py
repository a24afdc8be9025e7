"""The front end, once: parse and check a program, load and validate a mapping, instantiate the
task tree (paper §3: the logical description and the mapping specification become one tree of
mapped task instances, the input of the compiler's passes, §4).

The CLI, the Python API (:mod:`cypressc.api`) and the tuner all start here, so a program or a
mapping is refused the same way whichever door it came through.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from cypressc.diagnostics import CypressError, CypressErrors

if TYPE_CHECKING:
    from cypressc.mapping.tasktree import TaskTree

__all__ = ["front_end"]


def front_end(
    program: str | Path,
    mapping: str | Path,
    *,
    dtypes: Mapping[str, str] | None = None,
    include_dirs: tuple[str | Path, ...] = (),
    mapping_text: str | None = None,
) -> TaskTree:
    """The task tree of ``program`` (a ``.cyp`` file, its dtype parameters bound by ``dtypes``,
    headers it includes looked up beside it, then in ``include_dirs``) under ``mapping`` (a
    YAML file; ``mapping_text``: its text, e.g. a tuner candidate, located at ``mapping``).

    Both files are read and checked before either's errors are raised, so one run reports
    every located error of both.  Raises :class:`~cypressc.diagnostics.CypressErrors` (E0xx
    for the program, M0xx for the mapping, an unreadable file as E000/M000) or
    :class:`~cypressc.diagnostics.CypressError` from instantiation.  The tree's
    ``warnings`` are the caller's to show.
    """
    from cypressc.lang.checker import check_program
    from cypressc.lang.parser import parse_file
    from cypressc.mapping.loader import load_mapping, load_mapping_source
    from cypressc.mapping.tasktree import instantiate

    errors: list[CypressError] = []
    prog = lm = None
    try:
        prog = check_program(parse_file(program, dict(dtypes or {}), tuple(include_dirs)))
    except CypressErrors as e:
        errors += e.errors
    try:
        lm = (
            load_mapping(mapping)
            if mapping_text is None
            else load_mapping_source(mapping_text, str(mapping))
        )
    except CypressErrors as e:
        errors += e.errors
    if errors:
        raise CypressErrors(errors)
    return instantiate(prog, lm)
