"""``cypressc opt FILE.ir -p PASS,PASS``: run registered passes (paper §4.2.2–§4.2.6,
:mod:`cypressc.passes.manager`) on a module read from its printed IR
(:mod:`cypressc.ir.reader`), verifying after each as :func:`cypressc.pipeline.compile_module`
does, and print the result (xDSL's and MLIR's ``opt`` shape: one pass on ten lines of IR,
checked by the filecheck tests of tests/filecheck/).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cypressc.diagnostics import CypressError, Loc, VerifyError

if TYPE_CHECKING:
    from cypressc.ir import nodes as N

__all__ = ["run_passes", "optimize"]


def run_passes(m: N.Module, names: list[str]) -> N.Module:
    """``m`` after the registered passes ``names``, in order, each verified
    (:func:`cypressc.ir.verify.verify`; after ``sync-insertion`` also the happens-before
    check).  User errors of a pass propagate; anything else (a pass that breaks, IR that no
    longer verifies) is a :class:`PassError` naming the pass.  ``KeyError`` for an unknown
    pass, naming the registered ones."""
    from cypressc.passes.manager import get_pass
    from cypressc.pipeline import run_step

    passes = [(name, get_pass(name)) for name in names]
    for name, cls in passes:
        m = run_step(name, lambda m, cls=cls: cls.for_module(m).apply(m), m)
    return m


def optimize(text: str, filename: str, names: list[str], include_dirs=()) -> str:
    """The printed IR of the module ``text`` (read from ``filename``) after the passes
    ``names``.  E063 where the text is malformed or its module does not verify."""
    from cypressc.ir.printer import print_module
    from cypressc.ir.reader import parse_module
    from cypressc.ir.verify import verify

    m = parse_module(text, filename, include_dirs)
    try:
        verify(m)
    except VerifyError as e:  # written by hand: the user's error, not the compiler's
        raise CypressError(
            "E063",
            f"the module does not verify: {e}",
            Loc(filename),
            hint="every tensor, partition and event is defined before its use, and each event "
            "reference has one index per dimension of its event",
        ) from None
    return print_module(run_passes(m, names))
