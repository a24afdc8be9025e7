"""The pass manager: one ordered registry of named passes (paper §4.2, Fig. 6).

Each pass is a function ``run(module, ctx) -> module``.  :func:`compile_module` runs
them in order, verifies the IR after each (:mod:`cypressc.ir.verify`), keeps a snapshot
per pass (``cypressc explain``, ``--dump-ir``) and times them (``--timings``).  An
exception escaping a pass is re-raised as :class:`PassError` naming the pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from cypressc.diagnostics import CypressError, CypressErrors

if TYPE_CHECKING:  # the CLI reads pass_names() at start-up: keep this module light
    from cypressc.ir import nodes as N
    from cypressc.mapping.tasktree import TaskTree

__all__ = ["Pass", "PassContext", "PassError", "PASSES", "pass_names", "compile_module"]


@dataclass
class PassContext:
    """What passes may consult besides the module: the task tree (mapping, machine)."""

    tree: TaskTree
    options: dict = field(default_factory=dict)

    @property
    def mapping_path(self) -> str:
        return self.tree.mapping.path


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[N.Module, PassContext], N.Module]
    section: str


class PassError(RuntimeError):
    """An internal error inside a pass (a compiler bug), naming the pass."""

    def __init__(self, pass_name: str, exc: BaseException) -> None:
        super().__init__(f"pass '{pass_name}' failed: {type(exc).__name__}: {exc}")
        self.pass_name = pass_name
        self.__cause__ = exc


def _dependence(m: N.Module, ctx: PassContext) -> N.Module:
    from cypressc.passes.dependence_analysis import dependence_analysis

    return dependence_analysis(ctx.tree)


def _vectorize(m: N.Module, ctx: PassContext) -> N.Module:
    from cypressc.passes.vectorization import vectorize

    return vectorize(m)


def _copy_elim(m: N.Module, ctx: PassContext) -> N.Module:
    from cypressc.passes.copy_elimination import copy_elimination

    return copy_elimination(m, ctx)


def _resources(m: N.Module, ctx: PassContext) -> N.Module:
    from cypressc.passes.resource_allocation import resource_allocation

    return resource_allocation(m, ctx)


def _warp_spec(m: N.Module, ctx: PassContext) -> N.Module:
    from cypressc.passes.warp_specialization import warp_specialization

    return warp_specialization(m, ctx)


def _sync(m: N.Module, ctx: PassContext) -> N.Module:
    from cypressc.passes.sync_insertion import sync_insertion

    return sync_insertion(m, ctx)


def _cuda(m: N.Module, ctx: PassContext) -> N.Module:
    from cypressc.backend.lower import cuda_lowering

    return cuda_lowering(m, ctx)


PASSES: list[Pass] = [
    Pass("dependence-analysis", _dependence, "§4.2.1"),
    Pass("vectorization", _vectorize, "§4.2.2"),
    Pass("copy-elimination", _copy_elim, "§4.2.3"),
    Pass("resource-allocation", _resources, "§4.2.4"),
    Pass("warp-specialization", _warp_spec, "§4.2.5"),
    Pass("sync-insertion", _sync, "§4.2.6"),
    Pass("cuda-lowering", _cuda, "§4.2.6"),
]


def pass_names() -> list[str]:
    return [p.name for p in PASSES]


def dump_snapshots(out, snaps: list[tuple[str, N.Module]]) -> None:
    """Write ``NN-<pass>.ir`` per snapshot into directory ``out`` (``--dump-ir``); E061 when
    the directory cannot be written."""
    from cypressc.diagnostics import Loc
    from cypressc.ir.printer import print_module

    try:
        out.mkdir(parents=True, exist_ok=True)
        for i, (name, m) in enumerate(snaps, 1):
            (out / f"{i:02d}-{name}.ir").write_text(print_module(m))
    except OSError as e:
        raise CypressError("E061", f"cannot write --dump-ir {out}: {e.strerror}", Loc(str(out))) from None


def compile_module(tree: TaskTree, *, until: str | None = None, verify: bool = True,
                   hook: Callable[[str, N.Module, float], None] | None = None) -> list[tuple[str, N.Module]]:
    """Run the passes in order (up to and including ``until``); return (name, snapshot) pairs.

    User errors (:class:`CypressError`) propagate unchanged; anything else is wrapped
    in :class:`PassError`.
    """
    from cypressc.ir import nodes as N
    from cypressc.ir.happens_before import verify_happens_before
    from cypressc.ir.verify import verify as verify_module

    ctx = PassContext(tree)
    m = N.Module("empty", (), (), N.Block(()))
    out: list[tuple[str, N.Module]] = []
    for p in PASSES:
        t0 = time.perf_counter()
        try:
            m = p.run(m, ctx)
            if verify:
                verify_module(m)
                if p.name == "sync-insertion":  # independent of the analysis sync-insertion used
                    verify_happens_before(m)
        except (CypressError, CypressErrors):
            raise
        except Exception as e:  # noqa: BLE001 - wrapped with the pass name
            raise PassError(p.name, e) from e
        dt = time.perf_counter() - t0
        out.append((p.name, m))
        if hook is not None:
            hook(p.name, m, dt)
        if p.name == until:
            break
    return out
