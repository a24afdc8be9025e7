"""The registry of the Cypress paper's compiler passes (§4.2, Fig. 6) between the lowering
from the task tree (:mod:`cypressc.passes.dependence_analysis`, §4.2.1) and the CUDA lowering
(:mod:`cypressc.backend.lower`): each a :class:`~cypressc.passes.base.ModulePass`, run in
this order by :func:`cypressc.pipeline.compile_module`.

The registry names each pass's class without importing it (the CLI reads the names at
start-up); :meth:`PassInfo.load` imports it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from cypressc.passes.base import ModulePass, PassError

__all__ = ["PassInfo", "PASSES", "ModulePass", "PassError", "pass_names", "get_pass"]


@dataclass(frozen=True)
class PassInfo:
    """A registered pass: its name, the paper section it implements, and where its class is."""

    name: str
    section: str
    module: str
    cls: str

    def load(self) -> type[ModulePass]:
        """The pass's class (imported on first use)."""
        return getattr(importlib.import_module(self.module), self.cls)


PASSES: list[PassInfo] = [
    PassInfo("vectorization", "§4.2.2", "cypressc.passes.vectorization", "Vectorization"),
    PassInfo("copy-elimination", "§4.2.3", "cypressc.passes.copy_elimination", "CopyElimination"),
    PassInfo(
        "resource-allocation", "§4.2.4", "cypressc.passes.resource_allocation", "ResourceAllocation"
    ),
    PassInfo(
        "warp-specialization", "§4.2.5", "cypressc.passes.warp_specialization", "WarpSpecialization"
    ),
    PassInfo(
        "reduction-order", "beyond the paper", "cypressc.passes.reduction_order", "ReductionOrder"
    ),
    PassInfo("sync-insertion", "§4.2.6", "cypressc.passes.sync_insertion", "SyncInsertion"),
    PassInfo(
        "cluster-multicast",
        "beyond the paper",
        "cypressc.passes.cluster_multicast",
        "ClusterMulticast",
    ),
]


def pass_names() -> list[str]:
    """The registered passes' names, in pipeline order."""
    return [p.name for p in PASSES]


def get_pass(name: str) -> type[ModulePass]:
    """The class of registered pass ``name``; ``KeyError`` naming the registered ones."""
    for p in PASSES:
        if p.name == name:
            return p.load()
    raise KeyError(f"no pass '{name}' (the passes are {', '.join(pass_names())})")
