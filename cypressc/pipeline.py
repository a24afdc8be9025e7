"""The whole compiler as one function: the task tree lowered to event IR (the dependence
analysis, paper §4.2.1), the registered passes (:mod:`cypressc.passes.manager`, §4.2.2–§4.2.6),
then the CUDA lowering (:mod:`cypressc.backend.lower`).

:func:`compile_module` verifies the IR after each step (:mod:`cypressc.ir.verify`; after
``sync-insertion`` also the independent happens-before check), keeps a snapshot per step
(``cypressc explain``, ``--dump-ir``) and times them (``--timings``).  An exception escaping
a step that is not a user error is re-raised as :class:`PassError` naming the step.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from cypressc.diagnostics import CypressError, CypressErrors
from cypressc.passes.base import PassError
from cypressc.passes.manager import pass_names

if TYPE_CHECKING:
    from cypressc.ir import nodes as N
    from cypressc.mapping.tasktree import TaskTree

__all__ = [
    "LOWERING",
    "BACKEND",
    "step_names",
    "run_step",
    "compile_module",
    "compile_program",
    "dump_snapshots",
    "PassError",
]

LOWERING = "dependence-analysis"  # task tree -> event IR: not a pass on a module, the first step
BACKEND = "cuda-lowering"


def step_names() -> list[str]:
    """Every step's name in order: the lowering, the passes, the CUDA lowering (the choices of
    ``cypressc explain --after``)."""
    return [LOWERING, *pass_names(), BACKEND]


def dump_snapshots(out, snaps: list[tuple[str, N.Module]], prefix: str = "") -> None:
    """Write ``<prefix>NN-<step>.ir`` per snapshot into directory ``out`` (``--dump-ir``;
    the prefix ``kJ-`` tells the kernels of a program of several apart); E061 when the
    directory cannot be written."""
    from cypressc.diagnostics import Loc
    from cypressc.ir.printer import print_module

    try:
        out.mkdir(parents=True, exist_ok=True)
        for i, (name, m) in enumerate(snaps, 1):
            (out / f"{prefix}{i:02d}-{name}.ir").write_text(print_module(m))
    except OSError as e:
        raise CypressError(
            "E061", f"cannot write --dump-ir {out}: {e.strerror}", Loc(str(out))
        ) from None


def run_step(name: str, step: Callable, m: N.Module | None, *, verify: bool = True) -> N.Module:
    """``step(m)``, the module verified after it (:mod:`cypressc.ir.verify`; after
    ``sync-insertion`` also the independent happens-before check) unless ``verify`` is off
    or the step returned ``m`` itself (verified after the step before).
    User errors (:class:`CypressError`, :class:`CypressErrors`) propagate unchanged; anything
    else, a step that breaks or IR that no longer verifies, is a :class:`PassError` naming
    ``name``."""
    from cypressc.ir.happens_before import verify_happens_before
    from cypressc.ir.verify import verify as verify_module

    try:
        before, m = m, step(m)
        # a step that returned its input unchanged (a knob's pass without the knob) leaves
        # the module the previous step's verification passed
        if verify and m is not before:
            verify_module(m)
            if name == "sync-insertion":  # independent of the analysis sync-insertion used
                verify_happens_before(m)
    except (CypressError, CypressErrors):
        raise
    except Exception as e:  # noqa: BLE001 - wrapped with the step's name
        raise PassError(name, e) from e
    return m


def compile_program(
    tree: TaskTree,
    *,
    until: str | None = None,
    verify: bool = True,
    hook: Callable[[int, str, N.Module, float], None] | None = None,
) -> list[list[tuple[str, N.Module]]]:
    """Run every step on each kernel of ``tree`` (one per BLOCK program the entry task
    launches, :func:`~cypressc.passes.dependence_analysis.kernel_modules`), in order, up to
    and including ``until``; return each kernel's (name, snapshot) pairs.  ``hook`` gets the
    kernel's index with each step.  Errors as :func:`compile_module`."""
    kernels, dt = _lower(tree, verify)
    return [
        _run_passes(k, until, verify, lambda *a, i=i: hook(i, *a) if hook else None, dt)
        for i, k in enumerate(kernels)
    ]


def _lower(tree: TaskTree, verify: bool) -> tuple[list[N.Module], float]:
    """The kernels' event IR, each verified, and the seconds it took."""
    from cypressc.passes.dependence_analysis import kernel_modules

    t0 = time.perf_counter()
    kernels = run_step(LOWERING, lambda _m: kernel_modules(tree), None, verify=False)
    kernels = [run_step(LOWERING, lambda _m, k=k: k, None, verify=verify) for k in kernels]
    return kernels, time.perf_counter() - t0


def _run_passes(m: N.Module, until, verify, hook, lowering_s: float) -> list[tuple[str, N.Module]]:
    from cypressc.backend.lower import CudaLowering
    from cypressc.passes.manager import PASSES

    out: list[tuple[str, N.Module]] = [(LOWERING, m)]
    hook(LOWERING, m, lowering_s)
    if until == LOWERING:
        return out
    steps = [(p.name, lambda m, p=p: p.load().for_module(m).apply(m)) for p in PASSES]
    steps.append((BACKEND, lambda m: CudaLowering().apply(m)))
    for name, step in steps:
        t0 = time.perf_counter()
        m = run_step(name, step, m, verify=verify)
        dt = time.perf_counter() - t0
        out.append((name, m))
        hook(name, m, dt)
        if name == until:
            break
    return out


def compile_module(
    tree: TaskTree,
    *,
    until: str | None = None,
    verify: bool = True,
    hook: Callable[[str, N.Module, float], None] | None = None,
) -> list[tuple[str, N.Module]]:
    """Run every step on ``tree``, a program of one kernel, in order (up to and including
    ``until``); return (name, snapshot) pairs.  User errors (:class:`CypressError`,
    :class:`CypressErrors`) propagate unchanged; anything else is wrapped in
    :class:`PassError`.  A program of several kernels is E050 at its second kernel's BLOCK
    instance (:func:`compile_program` compiles it)."""
    kernels, dt = _lower(tree, verify)
    if len(kernels) > 1:
        names = ", ".join(k.name for k in kernels)
        raise CypressError(
            "E050",
            f"this program launches {len(kernels)} kernels ({names}); this step compiles "
            "programs of one kernel",
            kernels[1].target.loc,
            hint="`cypressc build`, `check` and `explain` compile every kernel; tuning a "
            "program of several kernels is not supported yet",
        )
    return _run_passes(kernels[0], until, verify, hook or (lambda *a: None), dt)
