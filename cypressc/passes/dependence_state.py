"""What dependence analysis' walk keeps while it emits event IR (Cypress paper §4.2.1,
Fig. 8): deterministic fresh names (:class:`Namer`), per allocation its last writers and
the readers since (:class:`TState`), the block being emitted with the outer events a loop
body needs and the outer allocations it touched (:class:`_Frame`), and the task being
lowered with its names and their mapping origins (:class:`_Scope`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cypressc.diagnostics import Loc
from cypressc.ir import nodes as N
from cypressc.ir.origin import Origin
from cypressc.mapping.tasktree import TaskNode
from cypressc.passes.levels import here

__all__ = ["DerivedAtom", "Namer", "TState", "READ", "REDUCE", "WRITE"]


class Namer:
    """Deterministic unique names: ``x``, ``x_1``, ``x_2``…"""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.events = 0

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name

    def event(self) -> str:
        # '#' cannot appear in a source name, so events never collide with tensors
        self.events += 1
        return f"ev#{self.events}"


@dataclass
class TState:
    """Events of one allocation: its last writers, its readers since then, and its reducers
    since then (``copy.add``: reductions commute, so a reducer waits for the writers and
    readers but not for the other reducers; a read or a write waits for them all)."""

    writes: list[N.EvRef] = field(default_factory=list)
    reads: list[N.EvRef] = field(default_factory=list)
    reducers: list[N.EvRef] = field(default_factory=list)


# how a block touched an outer allocation: read, reduced into, or written (a read and a
# reduction together count as a write: the loop's event stands for both)
READ, REDUCE, WRITE = "r", "x", "w"


class _Frame:
    """One block being emitted: its ops, the per-allocation state, and, for loop bodies,
    the outer events the body needs (they become the loop's precondition) and the outer
    allocations it touched (their final events become the body's yield)."""

    def __init__(self, outer: "_Frame | None", sequential: bool = True) -> None:
        self.sequential = sequential
        self.ops: list[N.Op] = []
        self.state: dict[str, TState] = {}
        self.outer = outer
        self.needs: list[N.EvRef] = []
        self.touched: dict[str, str] = {}  # outer allocation -> READ, REDUCE or WRITE
        self.local: set[str] = set()
        self.pulled: dict[str, set[str]] = {}

    def _outer(self, root: str) -> TState | None:
        f = self.outer
        while f is not None:
            if root in f.state:
                return f.state[root]
            f = f.outer
        return None

    def _outer_deps(self, root: str, st: TState, kind: str) -> list[N.EvRef]:
        if self.outer is None or root in self.local or st.writes:
            return []
        o = self._outer(root)
        if o is None:
            return []
        return (
            list(o.writes)
            + (list(o.reads) if kind != READ else [])
            + (list(o.reducers) if kind != REDUCE else [])
        )

    def _local(self, root: str, kind: str) -> tuple[TState, list[N.EvRef]]:
        """The local state of ``root`` and the outer events this access (``kind``: READ,
        REDUCE or WRITE) must wait for.

        In a ``pfor`` body they go straight onto the op (iterations are independent); in
        a ``for`` body they join the loop's precondition (paper Fig. 8, ``for … {e6}``)."""
        st = self.state.setdefault(root, TState())
        outer = self._outer_deps(root, st, kind)
        if self.sequential:
            got = self.pulled.setdefault(root, set())
            if WRITE not in got and kind not in got:
                self.needs += outer
                got.add(kind)
            return st, []
        return st, outer

    def read_deps(self, root: str) -> list[N.EvRef]:
        st, outer = self._local(root, READ)
        return outer + list(st.writes) + list(st.reducers)

    def write_deps(self, root: str) -> list[N.EvRef]:
        st, outer = self._local(root, WRITE)
        return outer + list(st.writes) + list(st.reads) + list(st.reducers)

    def reduce_deps(self, root: str) -> list[N.EvRef]:
        """What a reduction into ``root`` waits for: the writers and readers, not the
        other reducers (reductions commute)."""
        st, outer = self._local(root, REDUCE)
        return outer + list(st.writes) + list(st.reads)

    def _touch(self, root: str, kind: str) -> None:
        if root in self.local:
            return
        had = self.touched.get(root)
        if had is None or had == kind:
            self.touched[root] = kind
        elif kind == WRITE or had == WRITE or {had, kind} == {READ, REDUCE}:
            self.touched[root] = WRITE

    def did_read(self, root: str, ev: N.EvRef) -> None:
        self.state.setdefault(root, TState()).reads.append(ev)
        self._touch(root, READ)

    def did_write(self, root: str, ev: N.EvRef) -> None:
        st = self.state.setdefault(root, TState())
        st.writes, st.reads, st.reducers = [ev], [], []
        self._touch(root, WRITE)

    def did_reduce(self, root: str, ev: N.EvRef) -> None:
        self.state.setdefault(root, TState()).reducers.append(ev)
        self._touch(root, REDUCE)


@dataclass(frozen=True)
class DerivedAtom:
    """An atom tunable derived from a tile (:mod:`cypressc.passes.atom_derivation`):
    ``instance`` derived it from the ``cols`` columns of its tensor ``tensor`` at the
    ``partition_by_mma`` at ``loc``; ``origins`` are the mapping values that set that width
    (the instance's own row when the program writes it)."""

    origins: tuple[Origin, ...]
    instance: str
    tensor: str
    cols: int
    loc: Loc


@dataclass
class _Scope:
    """One task being lowered: its node, its names, and the mapping origin of each
    processor or atom tunable (int tunables carry theirs in their IConst).

    ``caller`` is the scope of the task that launched this one (None at the entrypoint):
    an atom tunable the mapping leaves unbound inherits the caller's.  ``derived`` holds,
    per atom tunable derived from a tile's width (:mod:`cypressc.passes.atom_derivation`),
    where and from what (inherited ones included)."""

    node: TaskNode
    env: dict[str, tuple[str, object]]
    origins: dict[str, Origin] = field(default_factory=dict)
    caller: "_Scope | None" = None
    derived: dict[str, DerivedAtom] = field(default_factory=dict)

    def here(self, what: str) -> str:
        return here(self.node, what)
