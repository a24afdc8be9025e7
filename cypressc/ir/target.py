"""What a module is compiled for: the machine and the knobs of the mapping's BLOCK instance
(paper §3.2: the mapping specification; docs/language.md §5 lists the knobs).

The lowering from the task tree (:mod:`cypressc.passes.dependence_analysis`) records them in
``Module.target``, so that every later pass reads the module alone (no task tree, no
mapping file): resource allocation its shared-memory limit and register split, warp
specialization its roles, sync-insertion its wgmma groups in flight and ping-pong, the CUDA
lowering all of them.  ``loc`` and ``knob_locs`` keep where the mapping set each value, so an
error about a knob still points at the YAML that set it.
"""

from __future__ import annotations

from math import prod
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

from cypressc.diagnostics import Loc
from cypressc.lang.kinds import Mem
from cypressc.mapping.machine import Machine, load_machine

if TYPE_CHECKING:
    from cypressc.mapping.tasktree import TaskNode, TaskTree

__all__ = [
    "BlockKnobs",
    "Target",
    "target_of",
    "cluster_shape",
    "cluster_blocks",
    "DEFAULT_MACHINE",
    "TMA_VECTOR_SLACK",
    "vector_buffer_bytes",
]

DEFAULT_MACHINE = "h100"  # a module written by hand names no mapping: the bundled Hopper model

# A TMA tile copy starts its innermost dimension on a 16-byte boundary (an unaligned start faults
# with an illegal instruction; measured on an H100, bench/NOTES.md session 26).  A copy of a
# 1-D piece into a shared vector therefore starts at the boundary at or before the piece and
# moves this many bytes more; the vector's buffer holds them (resource allocation) and its
# readers skip the piece's offset (the CUDA lowering).
TMA_VECTOR_SLACK = 16


def tma_copy_bytes(nbytes: int, rank: int) -> int:
    """The bytes a TMA copy of ``nbytes`` into a view of ``rank`` moves (what its mbarrier's
    expect-tx counts): a vector's box starts up to :data:`TMA_VECTOR_SLACK` bytes early."""
    return nbytes + TMA_VECTOR_SLACK if rank == 1 else nbytes


def vector_buffer_bytes(nbytes: int) -> int:
    """Shared bytes of one stage of a vector of ``nbytes``: its copy's box
    (:data:`TMA_VECTOR_SLACK` more), rounded up to the 128 bytes a TMA destination is aligned
    to, so that every stage starts aligned."""
    return -(-(nbytes + TMA_VECTOR_SLACK) // 128) * 128


@dataclass(frozen=True, slots=True)
class BlockKnobs:
    """The BLOCK instance's knobs as the mapping set them (``None``: not set, the default
    applies where it is used).  ``instance`` is that instance's name ('' when the program has
    no BLOCK-level task)."""

    instance: str = ""
    warpspecialize: bool | None = None
    pipeline: int | None = None
    mma_in_flight: int | None = None
    smem_limit: int | None = None
    producer_registers: int | None = None
    consumer_registers: int | None = None
    raster: int | None = None
    persistent: bool | None = None
    pingpong: bool | None = None
    deterministic: bool | None = None
    cluster: tuple[int, ...] | None = None  # blocks per cluster along each grid dimension


KNOBS = tuple(f.name for f in fields(BlockKnobs) if f.name != "instance")


@dataclass(frozen=True)
class Target:
    """The machine model (:class:`~cypressc.mapping.machine.Machine`: memory capacities in
    bytes, named limits such as ``registers_per_block``) and the BLOCK knobs.

    ``loc`` is where an error about the whole block points (the BLOCK instance's line, else the
    mapping file); ``knob_locs`` maps each knob the mapping sets to its value's location;
    ``declared`` maps each entry tensor to the (reads, writes) privileges the entry task
    declares (a parameter no operation touches keeps them)."""

    machine: Machine
    block: BlockKnobs = field(default_factory=BlockKnobs)
    loc: Loc = field(default_factory=lambda: Loc("<module>"))
    knob_locs: dict[str, Loc] = field(default_factory=dict)
    declared: dict[str, tuple[bool, bool]] = field(default_factory=dict)

    @property
    def smem_max(self) -> int:
        """Bytes of shared memory a block may have on this machine."""
        return self.machine.memory_bytes.get(Mem.SHARED) or 0

    def knob_loc(self, *knobs: str) -> Loc:
        """Where the mapping sets the first of ``knobs`` it sets, else :attr:`loc`."""
        for k in knobs:
            if k in self.knob_locs:
                return self.knob_locs[k]
        return self.loc

    @staticmethod
    def default(where: str = "<module>") -> Target:
        """The target of a module with none recorded (IR written by hand): the bundled
        :data:`DEFAULT_MACHINE`, no knob set."""
        return Target(load_machine(DEFAULT_MACHINE), loc=Loc(where))


def cluster_shape(m) -> tuple[int, ...] | None:
    """The thread-block cluster of module ``m``'s kernel: blocks along each grid dimension
    (its target's ``cluster`` knob), or None without one."""
    return m.target.block.cluster if m.target is not None else None


def cluster_blocks(m) -> int:
    """Blocks per thread-block cluster of module ``m``'s kernel (1 without a cluster)."""
    shape = cluster_shape(m)
    return prod(shape) if shape else 1


def _knob(v):
    """A knob's value as the IR keeps it: a list (``cluster: [2, 1]``) as a tuple."""
    return tuple(v) if isinstance(v, list) else v


def target_of(tree: TaskTree, block: TaskNode | None = None) -> Target:
    """The target the task tree ``tree`` was mapped for: the knobs of ``block`` (a BLOCK
    :class:`~cypressc.mapping.tasktree.TaskNode`, one kernel's block program), by default the
    tree's first BLOCK instance."""
    block = block if block is not None else tree.block_node()
    root = tree.root.variant
    declared = {p.name: (p.name in root.reads, p.name in root.writes) for p in root.tensor_params}
    if block is None:
        return Target(tree.machine, loc=Loc(tree.mapping.path), declared=declared)
    inst = block.instance
    knobs = BlockKnobs(
        inst.instance,
        **{k: _knob(getattr(inst, k)) for k in KNOBS},
    )
    locs = {
        k: tree.mapping.instance_loc(inst.instance, k)
        for k in KNOBS
        if getattr(inst, k) is not None
    }
    return Target(
        tree.machine, knobs, tree.mapping.instance_loc(inst.instance, "instance"), locs, declared
    )
