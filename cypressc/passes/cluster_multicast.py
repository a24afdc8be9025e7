"""Pass ``cluster-multicast``: the mapping's ``cluster`` (issue #39; beyond the Cypress
paper, which maps one block at a time: Hopper's thread-block clusters with TMA multicast, as
CUTLASS's ``PipelineTmaAsync`` and DeepGEMM use them).

``cluster: [c0, c1, …]`` on the kernel's BLOCK instance groups ``c0 × c1 × …`` neighbouring
blocks of the grid (``c_d`` along grid dimension ``d``, ``block_id.x`` first) into a cluster
that runs at once on one GPC and can reach each other's shared memory.  A TMA copy of the
block's main loop whose global tile does not depend on ``block_id.d`` reads the same tile in
every block of the cluster along ``d`` (GEMM's B tile across the M neighbours, A across the
N neighbours); this pass marks it ``multicast(block_id.d)``: the first block along ``d``
issues it once, into the same stage of each block's shared memory and onto each block's
``full`` mbarrier (``.multicast::cluster``), halving (for ``c_d`` = 2) what that operand
costs L2.

What changes with it follows from the copy's events, not from a new edge:

* **expected bytes** are unchanged: each block still receives every byte of the tiles its
  ``full`` barrier guards, some from its own copies and some from a neighbour's multicast;
* **the release** of a stage a multicast copy fills: before the issuing block writes stage
  ``s`` of every block, the consumers of every block must be done with it, so the WAR edge
  from the stage's readers to the copy crosses blocks.  Each ``arrive`` on the channel's
  ``empty`` barrier becomes ``arrive.cluster`` (the arrival on that stage of every block of
  the cluster), and the barrier's arrival count is multiplied by the blocks of a cluster;
* the CUDA lowering fences the mbarrier initialization for the cluster and syncs the cluster
  before any block's first copy (a neighbour's multicast or arrival must find the barriers
  initialized), and again before any block exits (none may leave while a neighbour can still
  multicast into its shared memory or arrive on its barriers); it walks the tiles a cluster
  at a time, so the blocks of a cluster run the same pipeline steps.

The sync verifier counts an ``arrive.cluster`` once per block of the cluster (all run the
same steps); the concurrent interpreter runs each cluster as a whole
(:func:`cypressc.ir.concurrent.run_cluster`), and the IR verifier refuses a ``multicast``
copy whose tile depends on a dimension it is multicast along.

Refused (E065, at the knob, with what to change): a cluster whose length is not the grid's
rank; a cluster beyond 8 blocks (the portable limit) or along a grid dimension other than the
last two (the tile walk's); no copy that the cluster's blocks share; a shared copy in a loop
whose trip count differs between the blocks (a causal loop: the neighbours' pipelines would
fall out of step); a kernel without a producer warpgroup.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from cypressc.diagnostics import CypressError
from cypressc.ir import nodes as N
from cypressc.ir import sync as S
from cypressc.ir.analysis import block_dims, element_origin, map_ops
from cypressc.ir.hazards import Program
from cypressc.ir.kinds import BarrierKind, Role
from cypressc.ir.subst import walk_ops
from cypressc.ir.target import cluster_shape
from cypressc.lang.kinds import Mem, Proc
from cypressc.passes.base import ModulePass

__all__ = ["ClusterMulticast", "CODE", "MAX_CLUSTER"]

CODE = "E065"  # a cluster the compiler cannot map
MAX_CLUSTER = 8  # blocks per cluster without the non-portable-size opt-in (CUDA guide)


class ClusterMulticast(ModulePass):
    """Mark the main loop's TMA copies that the blocks of the mapping's ``cluster`` share
    ``multicast``, make the releases of their stages cluster-wide (``arrive.cluster``, the
    empty barrier's count times the cluster's blocks); a no-op without ``cluster`` (or with
    one block per cluster).  Raises :class:`~cypressc.diagnostics.CypressError` ``E065`` at
    the knob for a cluster it cannot map (module docstring)."""

    name = "cluster-multicast"
    section = "beyond the paper"  # Hopper thread-block clusters, TMA multicast

    def apply(self, m: N.Module) -> N.Module:
        t = m.target
        shape = cluster_shape(m)
        if not shape or prod(shape) == 1:
            return m
        loc = t.knob_loc("cluster")

        def refuse(msg: str, hint: str) -> CypressError:
            return CypressError(CODE, f"cluster: {list(shape)}: {msg}", loc, hint=hint)

        prog = Program(m)
        loads = [lf for lf in prog.leaves.values() if isinstance(lf.op, N.Copy) and lf.op.bar]
        grid = next(
            ([d for d in lf.op.dims if d.proc == Proc.BLOCK] for lf in prog.leaves.values()),
            [],
        )
        if len(shape) != len(grid):
            raise refuse(
                f"the kernel's grid has {len(grid)} dimension(s), the cluster {len(shape)}",
                "give one count per grid dimension, block_id.x first: "
                + str([1] * max(len(grid) - 1, 0) + [2]),
            )
        if prod(shape) > MAX_CLUSTER:
            raise refuse(
                f"{prod(shape)} blocks per cluster; Hopper's portable limit is {MAX_CLUSTER}",
                "use at most 8 blocks per cluster (2 or 4 are the common choices)",
            )
        outer = [d for d, c in enumerate(shape) if c > 1 and d < len(shape) - 2]
        if outer:
            raise refuse(
                f"a cluster along block_id.{'xyz'[outer[0]]}: the tile walk groups blocks along "
                "the grid's last two dimensions only",
                "cluster along the last two grid dimensions (the tile rows and columns)",
            )
        if Role.PRODUCER not in prog.roles.values():
            raise refuse(
                "the kernel has no producer warpgroup to issue the multicast copies",
                "set warpspecialize: true, or drop the knob",
            )
        along = {d for d, c in enumerate(shape) if c > 1}
        shared: dict[str, tuple[int, ...]] = {}
        for lf in loads:
            op = lf.op
            if prog.sym.mem(op.src) != Mem.GLOBAL or any(d.proc != Proc.BLOCK for d in op.dims):
                continue
            if lf.hosts or not lf.loops or not lf.loops[-1].pipeline:
                continue
            _, org, _, _ = element_origin(prog.sym, op.src)
            dims = along - set().union(*(block_dims(x, prog.lets) for x in org))
            if dims:
                shared[op.ev] = tuple(sorted(dims))
        if not shared:
            raise refuse(
                "no TMA copy of the main loop reads the same tile in the blocks of a cluster",
                "cluster along a grid dimension that some operand's tile does not depend on "
                "(GEMM: [2, 1] shares B across the M neighbours, [1, 2] shares A), or drop the "
                "knob",
            )
        for ev in shared:
            lf = prog.leaves[ev]
            for lp in lf.loops:
                if block_dims(lp.lo, prog.lets) | block_dims(lp.hi, prog.lets):
                    raise refuse(
                        f"the loop %{lp.var} around the shared copy of "
                        f"{prog.sym.root(lf.op.src)} runs a different number of steps in "
                        "different blocks; the blocks of a cluster must run the same pipeline "
                        "steps",
                        "drop the knob for this kernel (a causal loop's trip count depends on "
                        "its block)",
                    )
        bars = [op for op in walk_ops(m.body) if isinstance(op, S.MBarrier)]
        empties = set()
        for ev in shared:  # each shared copy's stages are released by one cross-block barrier
            mine = [b for b in bars if b.kind == BarrierKind.EMPTY and ev in b.channel]
            if len(mine) != 1 or mine[0].same_tile:
                raise refuse(
                    f"the shared copy of {prog.sym.root(prog.leaves[ev].op.src)} has no "
                    "pipeline empty barrier of its own to release it across the cluster",
                    "drop the knob (the copy is not in a pipelined main loop)",
                )
            empties.add(mine[0].name)
        blocks = prod(shape)

        def mark(o: N.Op) -> N.Op:
            if isinstance(o, N.Copy) and o.ev in shared:
                return replace(o, multicast=shared[o.ev])
            if isinstance(o, S.MBarrier) and o.name in empties:
                return replace(o, count=o.count * blocks)
            if isinstance(o, S.Arrive) and o.bar in empties:
                return replace(o, cluster=True)
            return o

        return map_ops(m, mark)
