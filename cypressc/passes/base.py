"""What a pass is: a named object that maps a module to a module (xDSL's ``ModulePass``
shape; the Cypress paper's §4.2 passes are its instances).

A pass reads only the module it is given: the machine and the mapping's knobs travel in
``Module.target`` (:mod:`cypressc.ir.target`), so any pass runs alone on any module, one
the pipeline built or one written by hand.  Options are the object's fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from cypressc.ir import nodes as N

__all__ = ["ModulePass", "PassError"]


class ModulePass:
    """A pass: ``name`` (as ``cypressc explain --after`` and ``--dump-ir`` show it), ``section``
    (of the Cypress paper), :meth:`apply`.  Raises :class:`~cypressc.diagnostics.CypressError`
    for a program the pass refuses (a user error); anything else is a compiler bug."""

    name: ClassVar[str]
    section: ClassVar[str]

    @classmethod
    def for_module(cls, m: N.Module) -> ModulePass:
        """The pass with the options ``m``'s target implies (default: no options)."""
        return cls()

    def apply(self, m: N.Module) -> N.Module:  # pragma: no cover - every pass overrides it
        raise NotImplementedError


class PassError(RuntimeError):
    """An internal error inside a pass (a compiler bug), naming the pass."""

    def __init__(self, pass_name: str, exc: BaseException) -> None:
        super().__init__(f"pass '{pass_name}' failed: {type(exc).__name__}: {exc}")
        self.pass_name = pass_name
        self.__cause__ = exc
