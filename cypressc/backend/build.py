"""``cypressc build``: run every pass, emit CUDA, write the build directory atomically."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from cypressc.backend.emit import build_info, emit_cuda, emit_header
from cypressc.diagnostics import CypressError, Loc
from cypressc.mapping.tasktree import TaskTree
from cypressc.passes.manager import compile_module

__all__ = ["write_build", "RUNTIME_DIR"]

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"



def _example_sizes(plan) -> list[str]:
    """Sizes for the suggested harness run: 4096 for tile dimensions, 8 for a size that
    only ever appears as an outer (batch) dimension, so the tensors fit in memory."""
    inner = {d for t in plan.tensors for d in t.dims[-2:]}
    return ["4096" if s in inner else "8" for s in plan.sizes]

def write_build(tree: TaskTree, outdir: Path) -> str:
    """Compile and write ``outdir``; return a one-screen summary for the user.

    The files are written into a temporary sibling directory that replaces ``outdir``
    only when everything succeeded, so a failed build never leaves a directory that
    looks complete.
    """
    from cypressc.backend.harness import write_harness

    snaps = compile_module(tree)
    m = snaps[-1][1]
    plan = m.attrs["kernel"]
    outdir = outdir.resolve()
    if outdir.exists() and (not outdir.is_dir() or (any(outdir.iterdir())
                                                    and not any(outdir.glob("*.json")))):
        raise CypressError("E061", f"{outdir} exists and is not a cypressc build directory; "
                           "refusing to replace it", Loc(str(outdir)),
                           hint="pass -o a new directory, or one an earlier `cypressc build` wrote")
    try:
        outdir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", dir=outdir.parent))
    except OSError as e:
        raise CypressError("E061", f"cannot write the build directory {outdir}: {e.strerror}",
                           Loc(str(outdir))) from None
    try:
        (tmp / f"{plan.name}.cu").write_text(emit_cuda(plan))
        (tmp / f"{plan.name}.h").write_text(emit_header(plan))
        write_harness(tmp, build_info(plan, str(RUNTIME_DIR)))
        if outdir.exists():
            shutil.rmtree(outdir)
        tmp.rename(outdir)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CypressError("E061", f"cannot write the build directory {outdir}: {e.strerror}",
                           Loc(str(outdir))) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    threads = 128 * (plan.consumers + (1 if plan.warpspecialize else 0))
    roles = ("producer warpgroup (TMA) + " if plan.warpspecialize else "thread 0 issues TMA; ") + \
        f"{plan.consumers} consumer warpgroup(s)"
    grid = " x ".join(plan.grid)
    return "\n".join([
        f"built {plan.name} into {outdir}",
        f"  grid      {grid} tiles{' (persistent: one block per SM)' if plan.persistent else ''}",
        f"  block     {threads} threads: {roles}",
        f"  stages    {plan.stages} (mma groups in flight: {plan.mma_in_flight})",
        f"  shared    {plan.smem_bytes} bytes",
        f"  registers producer {plan.producer_registers}, consumers {plan.consumer_registers} "
        f"(estimated need {m.attrs.get('registers')})",
        f"next: make -C {outdir} && {outdir}/{plan.name} " + " ".join(_example_sizes(plan)),
    ])
