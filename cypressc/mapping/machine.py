"""Machine models (Cypress paper §3.1, Fig. 2), loaded from ``machines/<name>.yaml``.

A machine lists its processor levels outermost first (HOST, BLOCK, WARPGROUP, WARP,
THREAD on Hopper), the memories each level can name, and its capacity limits.  A new
machine is a new YAML file, not new code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from cypressc.lang.kinds import Mem, Proc

__all__ = ["Machine", "ProcessorLevel", "load_machine", "machine_names"]


@dataclass(frozen=True, slots=True)
class ProcessorLevel:
    """One processor level: ``threads`` hardware threads per instance (0 = not a thread group)."""

    name: Proc
    depth: int
    threads: int
    memories: tuple[Mem, ...]


@dataclass(frozen=True, slots=True)
class Machine:
    """A machine model: processor levels (outermost first), memory capacities in bytes
    (``None`` = unbounded), and named limits (threads per block, SM count, …)."""

    name: str
    description: str
    processors: tuple[ProcessorLevel, ...]
    memory_bytes: dict[Mem, int | None]
    limits: dict[str, int]

    def level(self, proc: Proc) -> ProcessorLevel:
        """The level called ``proc``; raises ``KeyError`` for an unknown one."""
        for p in self.processors:
            if p.name == proc:
                return p
        raise KeyError(proc)

    @property
    def processor_names(self) -> tuple[Proc, ...]:
        return tuple(p.name for p in self.processors)

    @property
    def memory_names(self) -> tuple[Mem, ...]:
        return tuple(self.memory_bytes)

    def visible(self, proc: Proc, mem: Mem) -> bool:
        """Whether code at ``proc`` can name memory ``mem`` (``NONE`` is always allowed)."""
        return mem == Mem.NONE or mem in self.level(proc).memories

    def deeper_or_equal(self, child: Proc, parent: Proc) -> bool:
        return self.level(child).depth >= self.level(parent).depth


def machine_names() -> list[str]:
    files = resources.files("cypressc.mapping") / "machines"
    return sorted(f.name[:-5] for f in files.iterdir() if f.name.endswith(".yaml"))


@cache
def load_machine(name: str) -> Machine:
    """Load the machine model ``name``; raises ``KeyError`` when there is none, and
    ``ValueError`` for a processor level or memory the compiler does not know (a
    :class:`~cypressc.lang.kinds.Proc` / :class:`~cypressc.lang.kinds.Mem`: the YAML keeps
    the names, the model holds the members)."""
    if name not in machine_names():
        raise KeyError(name)
    data = yaml.safe_load(
        (resources.files("cypressc.mapping") / "machines" / f"{name}.yaml").read_text()
    )
    procs = tuple(
        ProcessorLevel(Proc(p["name"]), i, int(p["threads"]), tuple(map(Mem, p["memories"])))
        for i, p in enumerate(data["processors"])
    )
    mems = {
        Mem(k): (None if v["bytes"] is None else int(v["bytes"]))
        for k, v in data["memories"].items()
    }
    return Machine(data["name"], data.get("description", ""), procs, mems, dict(data["limits"]))
