"""``cypressc build`` and ``check``: run the pipeline (:mod:`cypressc.pipeline`), emit CUDA and
the harness, and (build) write the build directory atomically (paper §4.2.6 is the last pass;
DESIGN §6 the directory's contents).  Above the backend: it drives the whole compiler."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cypressc.backend.cexpr import cexpr
from cypressc.backend.emit import (
    build_info,
    emit_cuda,
    emit_header,
    emit_program,
    header_copy,
    merge_plans,
)
from cypressc.backend.harness import RUNTIME_DIR
from cypressc.backend.outdir import replace_build_dir
from cypressc.mapping.tasktree import TaskTree
from cypressc.pipeline import compile_program

__all__ = ["write_build", "render_build", "example_sizes", "RenderedBuild", "RUNTIME_DIR"]


def example_sizes(r: RenderedBuild) -> list[str]:
    """Arguments for the suggested harness run (:func:`cypressc.backend.sizes.example_sizes`:
    every ``requires`` condition of the kernel holds, the tensors fit a GPU), then 1.0 for
    each float parameter."""
    from cypressc.backend.sizes import example_sizes as sizes

    return [str(v) for v in sizes(r.info, r.module).values()] + ["1.0" for _ in r.plan.floats]


@dataclass(frozen=True)
class RenderedBuild:
    """A compiled program as text, before anything is written: ``files`` maps each file name of
    the build directory (``NAME.cu``, ``NAME.h``, ``main.cu``, ``main.h``, ``Makefile``,
    ``NAME.json``) to its content; ``plan`` is the kernel plan, ``module`` the IR after the last pass and
    ``info`` the kernel's ABI (a :class:`cypressc.runtime.KernelInfo`).  For a program of
    several kernels, ``plan`` is what its launcher and ABI describe
    (:func:`~cypressc.backend.emit.merge_plans`), ``module`` the first kernel's, and
    ``kernels`` and ``modules`` each kernel's plan and IR in launch order."""

    plan: object
    module: object
    files: dict[str, str]
    info: object = None
    kernels: tuple = ()
    modules: tuple = ()


def render_build(tree: TaskTree, compiled: list[tuple[str, object]] | None = None) -> RenderedBuild:
    """Run every pass and every backend step (emission, harness, ABI) in memory.

    This is everything ``build`` does except writing files, so ``cypressc check`` refuses
    exactly what ``build`` refuses.  ``compiled``: the passes' output for ``tree``, a
    program of one kernel (``compile_module(tree)``), where the caller has it already.  Raises
    :class:`CypressError` (E040–E050) from the passes.
    """
    import json

    from cypressc.backend.harness import harness_files
    from cypressc.abi.info import KernelInfo

    kernels = [compiled] if compiled is not None else compile_program(tree)
    modules = [snaps[-1][1] for snaps in kernels]
    plans = [m.kernel for m in modules]
    if len(plans) == 1:
        plan = plans[0]
        cu = emit_cuda(plan)
    else:
        plan = merge_plans(tree.program.kernel_name, plans, list(modules[0].target.declared))
        cu = emit_program(plan, plans)
    info = build_info(plan, str(RUNTIME_DIR), tree.program.bindings)
    if len(plans) > 1:
        info["kernels"] = [p.name for p in plans]
    ki = KernelInfo.from_dict(info)
    files = {
        f"{plan.name}.cu": cu,
        f"{plan.name}.h": emit_header(plan),
        **harness_files(ki),
        f"{plan.name}.json": json.dumps(dict(info), indent=2) + "\n",
    }
    headers = {name: path for p in plans for name, path in p.headers.items()}
    for name, path in headers.items():  # the user's C++, so the directory builds elsewhere
        files[header_copy(name)] = Path(path).read_text()
    return RenderedBuild(plan, modules[0], files, ki, tuple(plans), tuple(modules))


def _inputs_hash(tree: TaskTree, dtypes: dict[str, str] | None) -> str:
    from cypressc.lang.imports import source_files

    h = hashlib.sha256()
    for f in (
        *source_files(tree.program),  # imported modules too: editing the library changes it
        tree.mapping.path,
        *(e.header_path for e in tree.program.externals if e.header_path),
        *(e.reference for e in tree.program.externals if e.reference),
    ):
        try:
            h.update(Path(f).read_bytes())
        except OSError:
            h.update(str(f).encode())
        h.update(b"\0")
    h.update(repr(sorted((dtypes or {}).items())).encode())
    return h.hexdigest()


def dtype_line(plan, program) -> str:
    """The element types of the summary: each dtype with the tensors of it (most tensors
    first), what the register accumulators hold, and the program's dtype parameters as bound
    (``f16 (C, A, B); accumulate f32 (T=f16)``)."""
    by: dict[str, list[str]] = {}
    for t in plan.tensors:
        by.setdefault(t.dtype, []).append(t.name)
    parts = [f"{d} ({', '.join(ns)})" for d, ns in sorted(by.items(), key=lambda kv: -len(kv[1]))]
    acc = any(f.dtype == "f32" for f in plan.fragments)  # the wgmma accumulators
    line = ", ".join(parts) + ("; accumulate f32" if acc else "")
    bound = [f"{d.name}={d.bound}" for d in program.dtype_params]
    return line + (f" ({', '.join(bound)})" if bound else "")


def _kernel_lines(plan, m, tree: TaskTree) -> list[str]:
    """The summary's lines of one kernel: grid, block, element types, stages, shared memory
    and registers."""
    threads = 128 * (plan.consumers + (1 if plan.warpspecialize else 0))
    roles = (
        "producer warpgroup (TMA) + "
        if plan.warpspecialize
        else "no TMA, no wgmma; "
        if plan.simt
        else "thread 0 issues TMA; "
    ) + f"{plan.consumers} consumer warpgroup(s)"
    grid = " x ".join(cexpr(g) for g in plan.grid)
    return [
        f"  grid      {grid} tiles{' (persistent: one block per SM)' if plan.persistent else ''}",
        f"  block     {threads} threads: {roles}",
        f"  dtype     {dtype_line(plan, tree.program)}",
        f"  stages    {plan.stages} (mma groups in flight: {plan.mma_in_flight})",
        f"  shared    {plan.smem_bytes} bytes",
        f"  registers producer {plan.producer_registers}, consumers {plan.consumer_registers} "
        f"(estimated need {m.resources.registers if m.resources is not None else None})",
    ]


def write_build(tree: TaskTree, outdir: Path | None, dtypes: dict[str, str] | None = None) -> str:
    """Compile and write ``outdir`` (None: ``build/<kernel name>`` under the working
    directory); return a one-screen summary for the user.

    ``outdir`` is replaced only when it is new, empty, or an earlier build's output that
    nobody changed (:mod:`cypressc.backend.outdir`, E062 otherwise), and only once every file
    was written, so a failed build never leaves a directory that looks complete.
    """
    r = render_build(tree)
    plan, m = r.plan, r.module
    outdir = Path(os.path.abspath(outdir if outdir is not None else Path("build") / plan.name))

    left = replace_build_dir(
        outdir,
        r.files,
        program=str(tree.program.path),
        mapping=str(tree.mapping.path),
        inputs=_inputs_hash(tree, dtypes),
        kernel=plan.name,
    )
    lines = [f"built {plan.name} into {outdir}"]
    kernels = list(zip(r.kernels, r.modules)) if r.kernels else [(plan, m)]
    for j, (kp, km) in enumerate(kernels, 1):
        if len(kernels) > 1:
            lines.append(f"kernel {j} of {len(kernels)}: {kp.name}")
        lines += _kernel_lines(kp, km, tree)
    return "\n".join(
        [
            *lines,
            f"next: make -C {outdir} && {outdir}/{plan.name} " + " ".join(example_sizes(r)),
            *(
                f"note: {p} holds what was written into the old build while this one ran; cypressc left it"
                for p in left
            ),
        ]
    )
