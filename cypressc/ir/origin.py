"""Where compile-time values and tensors come from, so pass errors blame the right file.

A pass error is often caused by a value the *mapping* set — a tile-size tunable, a
warpgroup count, a ``tunable(processor)`` or atom, an instance's ``proc``, a ``mems``
entry — yet it is detected at a statement of the *program*.  Dependence analysis records
an :class:`Origin` (the YAML value's location) for every tunable it binds; every
:class:`~cypressc.ir.nodes.IConst` computed from tunables carries the origins of its
operands (``ibin`` merges them).  :func:`blame` then reports the error at the YAML value
— the origin bound deepest in the task tree, i.e. closest to the failing statement —
with a note at the program line it breaks and one at each other value that fed it.  An
error no mapping value is involved in keeps its program location.

Tensors of the IR are traced the same way (:class:`TensorSite`, :class:`PartitionSite`,
kept in ``Module.sites``), so copy elimination can name the ``mems`` entry of a
NONE tensor it cannot eliminate (E044) and the launch whose copy needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from cypressc.diagnostics import CypressError, Loc
from cypressc.ir import nodes as N
from cypressc.lang.kinds import Mem

__all__ = ["Origin", "origins_of", "blame", "where", "TensorSite", "PartitionSite", "Sites"]


@dataclass(frozen=True, slots=True)
class Origin:
    """One mapping value: ``key`` (a tunable name, ``proc``, ``mems[1]``) of instance
    ``instance`` is ``value``, written at ``loc`` in the YAML file.  ``seq`` is the order in
    which dependence analysis bound it (task-tree pre-order): a larger one is deeper."""

    key: str
    value: object
    instance: str
    loc: Loc
    seq: int
    shared: bool = False  # written once in the mapping's shared `tunables:` (issue #37)

    @property
    def owner(self) -> str:
        """Where the value was written, for messages: ``instance 'mma_block'``, or ``the
        shared tunables (here: instance 'mma')`` for a value several rows share."""
        if self.shared:
            return f"the shared tunables (read by instance '{self.instance}')"
        return f"instance '{self.instance}'"

    def __str__(self) -> str:
        return f"{self.key}: {self.value} of {self.owner}"


def origins_of(*items: object) -> tuple[Origin, ...]:
    """The origins in ``items`` (index expressions, origins, or iterables of either),
    without repeats, deepest binding first."""
    out: dict[Origin, None] = {}

    def add(x: object) -> None:
        if isinstance(x, Origin):
            out[x] = None
        elif isinstance(x, N.IConst):
            for o in x.origin:
                out[o] = None
        elif isinstance(x, N.IBin):
            add(x.a)
            add(x.b)
        elif isinstance(x, (tuple, list)):
            for y in x:
                add(y)

    for it in items:
        add(it)
    return tuple(sorted(out, key=lambda o: -o.seq))


def where(origins: Iterable[Origin]) -> str:
    """`` (WGS is 3, set at mapping.yaml:33)`` — for a message located in the program that
    mapping values explain; empty without origins."""
    parts = [f"{o.key} is {o.value}, set at {o.loc.file}:{o.loc.line}" for o in origins]
    return f" ({'; '.join(parts)})" if parts else ""


def blame(
    code: str,
    message: str,
    loc: Loc,
    origins: Iterable[Origin],
    *,
    breaks: str,
    hint: str | None = None,
    notes: tuple[tuple[str, Loc], ...] = (),
) -> CypressError:
    """A :class:`CypressError` at the mapping value that caused it, or at ``loc`` (the
    program statement) when no mapping value did.

    With origins, the primary location is the deepest one's YAML value; ``breaks`` becomes a
    note at ``loc`` (the program line the value breaks), and every other origin a note of
    its own.  ``notes`` are appended either way.
    """
    os_ = origins_of(*origins)
    if not os_:
        return CypressError(code, message, loc, hint=hint, notes=notes)
    first, rest = os_[0], os_[1:]
    extra = tuple((f"{o.key}: {o.value} of {o.owner} also feeds it", o.loc) for o in rest)
    return CypressError(code, message, first.loc, hint=hint, notes=((breaks, loc),) + extra + notes)


@dataclass(frozen=True, slots=True)
class TensorSite:
    """Where an allocation of the event IR came from.

    A fresh tensor of the copy-in/copy-out discipline: ``instance`` got ``param`` (its
    ``index``-th tensor parameter) in ``mem``, at ``mem_loc`` in the YAML, from the launch
    of ``task`` at ``loc``; ``caller_root`` is the allocation the launch passed.  A
    ``make_tensor``: ``instance`` runs the variant whose statement is at ``loc``;
    ``param`` is its name, ``index`` is -1 and ``mem_loc`` None.
    """

    instance: str
    param: str
    index: int
    mem: Mem
    loc: Loc
    mem_loc: Loc | None = None
    task: str = ""
    caller_root: str = ""


@dataclass(frozen=True, slots=True)
class PartitionSite:
    """Where a partition came from: instance ``instance`` partitions its tensor ``tensor``
    (the IR allocation ``base`` at the time) at ``loc`` (the program statement)."""

    instance: str
    tensor: str
    loc: Loc
    base: str = ""


@dataclass
class Sites:
    """Sites of a module's allocations and partitions by IR name (``Module.sites``)."""

    tensors: dict[str, TensorSite]
    partitions: dict[str, PartitionSite]

    def none_entry(self, partitions: list[str], root: str) -> TensorSite | None:
        """The ``mems`` entry that keeps a NONE view unmaterialized.

        ``partitions`` are the partitions from the view down to its root allocation
        ``root`` (the view's own first).  The instance that cut the view's piece is the
        one whose tensor is NONE there; a whole tensor is NONE by its own instance's entry,
        or, made by ``make_tensor``, by the first instance it is passed to as NONE.
        """
        for p in partitions:
            ps = self.partitions.get(p)
            t = self.tensors.get(ps.base) if ps else None
            if t is not None and t.mem == Mem.NONE and t.mem_loc is not None:
                return t
        t = self.tensors.get(root)
        if t is not None and t.mem_loc is None:
            t = next(
                (x for x in self.tensors.values() if x.caller_root == root and x.mem == Mem.NONE), t
            )
        return t
