"""``cypressc check``, ``explain``, ``build`` and ``opt``: the commands that run the compiler
(the pipeline of :mod:`cypressc.pipeline`, paper §4) on a program and mapping, or on IR text."""

from __future__ import annotations

from pathlib import Path

import click

from cypressc.cli.common import (
    dtype_opt,
    guard,
    include_opt,
    load_program,
    mapping_opt,
    program_arg,
    stderr,
)
from cypressc.diagnostics import CypressError, Loc, render
from cypressc.pipeline import step_names  # light: the --after choices are the pipeline's steps


@click.command()
@program_arg
@mapping_opt
@dtype_opt
@include_opt
@guard
def check(
    program: str, mapping: str, dtypes: dict[str, str], include_dirs: tuple[str, ...] = ()
) -> None:
    """Check PROGRAM and MAPPING as `build` would, without writing anything.

    Parses and checks the program, validates the mapping against it, instantiates the
    task tree, runs every compiler pass and the CUDA backend (emission, harness, ABI) in
    memory.  Prints one summary line saying what was checked and exits 0 when `build`
    would succeed; otherwise prints every error as file:line:col with the offending line
    and exits 1.
    """
    from cypressc.build import render_build
    from cypressc.pipeline import step_names

    tree = load_program(program, mapping, dtypes, include_dirs)
    r = render_build(tree)
    nodes = list(tree.root.walk())
    tasks = {n.variant.task for n in nodes}
    click.echo(
        f"ok: {program} with {mapping}: {len(tree.program.variants)} variants of "
        f"{len(tree.program.tasks())} tasks, {len(nodes)} instantiated task(s) over "
        f"{len(tasks)} task(s) on {tree.machine.name}; {len(step_names())} passes and the "
        f"CUDA backend accept it ({len(r.files)} files of build/{r.plan.name}, none written)"
    )


def _kernel_index(kernel: int, kernels: list) -> int:
    """``--kernel N`` as an index into ``kernels`` (each one kernel's snapshots); a usage
    error naming the kernels when the program has fewer."""
    if kernel > len(kernels):
        names = ", ".join(f"{j} {k[0][1].name}" for j, k in enumerate(kernels, 1))
        raise click.UsageError(f"--kernel {kernel}: the program has {len(kernels)} ({names})")
    return kernel - 1


def _check_schedule(t, program: str, seed: int, schedules: int, kernel: int = 1) -> None:
    """``explain --check-schedule``: one verdict line; exit status 1 on a finding."""
    from cypressc.backend.lower import REFUSAL_CODE
    from cypressc.backend.sizes import check_sizes, shown
    from cypressc.ir.schedule_check import check_schedules, cluster_sizes, small_sizes
    from cypressc.ir.target import cluster_shape
    from cypressc.lang.syntax import LeafCall, walk
    from cypressc.backend.lower import CudaLowering
    from cypressc.pipeline import BACKEND, compile_program, pass_names, run_step

    last = pass_names()[-1]  # the synchronized IR the CUDA lowering takes
    kernels = compile_program(t, until=last)
    snaps = dict(kernels[_kernel_index(kernel, kernels)])
    try:  # the CUDA lowering, for the launcher's `requires` on the sizes
        snaps[BACKEND] = run_step(BACKEND, CudaLowering().apply, snaps[last])
    except CypressError as e:
        if e.code != REFUSAL_CODE:
            raise
    plan = getattr(snaps.get("cuda-lowering"), "kernel", None)
    requires = [{"tree": r.tree(), "why": r.why} for r in plan.requires] if plan is not None else []
    m = snaps[last]
    sizes = check_sizes(m, requires, cluster_sizes(m, small_sizes(m)))
    sizes = {**sizes, **{f: 0.75 for f in m.floats}}
    unit = "one cluster" if cluster_shape(m) else "one block"
    stderr(
        f"checking {program}: {schedules} random schedule(s) (seeds {seed}..{seed + schedules - 1}) of the "
        f"IR after {last} in the concurrent interpreter, {unit} at a time, at {shown(sizes)} "
        f"({unit}, two trips around each pipeline, sizes the launcher accepts); this can take a minute"
    )
    v = check_schedules(
        m, snaps["warp-specialization"], sizes=sizes, seed=seed, schedules=schedules
    )
    click.echo(v.line(program))
    called = {s.fn for var in t.program.variants for s in walk(var.body) if isinstance(s, LeafCall)}
    unref = [e for e in t.program.externals if e.name in called and e.reference is None]
    for e in unref:
        click.echo(
            f"note: external {e.name}() has no NumPy reference ({e.header} has no .py beside it): "
            "its events, races and deadlocks were checked, the values it computes were not"
        )
    if v.finding is not None:
        raise click.exceptions.Exit(1)


@click.command()
@program_arg
@mapping_opt
@dtype_opt
@include_opt
@click.option(
    "--after", "after", type=click.Choice(step_names()), help="Print only the IR after this pass."
)
@click.option(
    "--tree/--no-tree", default=True, show_default=True, help="Print the task tree first."
)
@click.option(
    "--graph",
    is_flag=True,
    help="Print the event graph (of --after, or the last pass) as DOT instead of IR.",
)
@click.option(
    "--graph-format",
    type=click.Choice(["dot", "svg"]),
    default="dot",
    show_default=True,
    help="svg renders the graph with graphviz `dot` (must be installed).",
)
@click.option(
    "--dump-ir", type=click.Path(file_okay=False), help="Also write one file per pass here."
)
@click.option("--timings", is_flag=True, help="Print how long each pass took.")
@click.option(
    "--full-mapping",
    is_flag=True,
    help="Print the full mapping MAPPING stands for (mapping templates and shared tunables "
    "written out, each row's origin in a comment; YAML that loads to the same rows) and stop.",
)
@click.option(
    "--check-schedule",
    is_flag=True,
    help="Run the synchronized IR (after sync-insertion) "
    "in the concurrent interpreter under random schedules; print one verdict line.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="First schedule seed (--check-schedule)."
)
@click.option(
    "--schedules",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Number of random schedules (--check-schedule).",
)
@click.option(
    "--kernel",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Which kernel of a program of several --graph and --check-schedule look at (1: the "
    "first the entry task launches).",
)
@guard
def explain(
    program: str,
    mapping: str,
    dtypes: dict[str, str],
    include_dirs: tuple[str, ...],
    after: str | None,
    tree: bool,
    graph: bool,
    graph_format: str,
    dump_ir: str | None,
    timings: bool,
    full_mapping: bool = False,
    check_schedule: bool = False,
    seed: int = 0,
    schedules: int = 50,
    kernel: int = 1,
) -> None:
    """Show how PROGRAM is compiled under MAPPING: the task tree (instance, variant,
    processor, memory of each argument, tunables), then the event IR after every pass
    in the paper's notation (Figs. 7-10), or only after --after PASS.

    \b
    Reading the IR:  %e3: [(2, WARPGROUP), (32, THREAD)] = call f(...) {%e1[warpgroup_id(), :]}
      - %e3 is the event the op produces; its type lists the processors it runs on;
      - {...} are the events it waits for; [:] waits for all along that dimension.
    """
    from rich.console import Console

    from cypressc.ir.graph import to_dot, render_svg
    from cypressc.ir.printer import print_module
    from cypressc.mapping.render import print_task_tree
    from cypressc.pipeline import compile_program

    t = load_program(program, mapping, dtypes, include_dirs)
    if full_mapping:
        from cypressc.mapping.render import expanded_mapping_text

        click.echo(expanded_mapping_text(t.mapping), nl=False)
        return
    if check_schedule:
        _check_schedule(t, program, seed, schedules, kernel)
        return
    console = Console()
    if tree and not graph:
        print_task_tree(t)
    times: list[tuple[int, str, float]] = []
    refused = None
    try:
        kernels = compile_program(t, until=after, hook=lambda i, n, m, dt: times.append((i, n, dt)))
    except CypressError as e:
        from cypressc.backend.lower import REFUSAL_CODE

        done = [name for i, name, _ in times if i == times[-1][0]] if times else []
        if e.code != REFUSAL_CODE or not done or (after is not None and after not in done):
            raise
        # a backend pass refuses the program; every pass before it still explains it
        refused = e
        times.clear()
        kernels = compile_program(
            t, until=done[-1], hook=lambda i, n, m, dt: times.append((i, n, dt))
        )
    several = len(kernels) > 1
    if dump_ir:
        from cypressc.pipeline import dump_snapshots

        for j, snaps in enumerate(kernels, 1):
            dump_snapshots(Path(dump_ir), snaps, prefix=f"k{j}-" if several else "")
    if graph:
        name, m = kernels[_kernel_index(kernel, kernels)][-1]
        dot = to_dot(
            m, title=f"{t.program.path} after {name}" + (f" ({m.name})" if several else "")
        )
        if graph_format == "svg":
            click.echo(render_svg(dot, program), nl=False)
        else:
            click.echo(dot, nl=False)
        return
    for j, snaps in enumerate(kernels, 1):
        if several:
            head = f"kernel {snaps[0][1].name} ({j} of {len(kernels)})"
            if console.is_terminal:
                console.rule(f"[bold]{head}", characters="=")
            else:
                click.echo(f"// ==== {head}")
        for name, m in snaps[-1:] if after else snaps:
            text = print_module(m)
            if console.is_terminal:
                console.rule(f"[bold]after {name}")
                from rich.syntax import Syntax

                console.print(Syntax(text, "python", theme="ansi_dark", word_wrap=False))
            else:
                click.echo(f"// ---- after {name}")
                click.echo(text, nl=False)
    if refused is not None:
        stderr(render(refused, kind="warning"))
    if timings:
        for i, name, dt in times:
            label = f"{name} [{i + 1}]" if several else name
            click.echo(f"{label:<22} {dt * 1000:9.1f} ms", err=True)


@click.command()
@program_arg
@mapping_opt
@dtype_opt
@include_opt
@click.option(
    "-o",
    "--output",
    type=click.Path(),
    default=None,
    help="Output directory [default: build/<name> in the working directory]. Created, or "
    "replaced atomically when it is empty or an earlier `cypressc build` output that nobody "
    "changed; anything else is refused (E062).",
)
@guard
def build(
    program: str,
    mapping: str,
    dtypes: dict[str, str],
    include_dirs: tuple[str, ...],
    output: str | None,
) -> None:
    """Compile PROGRAM under MAPPING to CUDA: OUTPUT/<name>.cu (kernel + extern "C"
    launcher), <name>.h, main.cu (timing harness) with main.h (its kernel's tables), Makefile
    and <name>.json (the ABI), plus
    the stamp .cypressc-build that marks the directory as cypressc's.
    Then `make -C OUTPUT` builds ./<name> and lib<name>.so with nvcc for sm_90a."""
    from cypressc.build import write_build

    t = load_program(program, mapping, dtypes, include_dirs)
    summary = write_build(t, Path(output) if output is not None else None, dtypes)
    click.echo(summary)


def _parse_passes(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str]:
    """``-p vectorization,copy-elimination`` -> the registered passes' names, in order; an
    unknown name is a usage error listing the registered ones."""
    from cypressc.passes.manager import pass_names

    names = [n.strip() for n in (value or "").split(",") if n.strip()]
    for n in names:
        if n not in pass_names():
            raise click.BadParameter(
                f"no pass '{n}' (the passes are: {', '.join(pass_names())})", param=param
            )
    return names


@click.command("opt")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-p",
    "--passes",
    "passes",
    callback=_parse_passes,
    metavar="PASS[,PASS...]",
    help="The registered passes to run, in order (none: read, verify and print FILE).",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write here, not stdout."
)
@click.option(
    "-I",
    "--include-dir",
    "include_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Also look for the headers of `external` lines here (after FILE's folder; repeatable).",
)
@guard
def opt_cmd(
    file: str, passes: list[str], output: str | None, include_dirs: tuple[str, ...]
) -> None:
    """Run compiler passes on FILE, the event IR as `explain` prints it (`--dump-ir`, or
    written by hand), and print the IR they give.

    Each pass is verified after it runs (sync-insertion also by the happens-before check).
    The headers of `external` lines are looked for next to FILE and in the -I folders.

    \b
    Example:
      cypressc explain programs/gemm.cyp -m mappings/gemm/h100.yaml --dump-ir ir/
      cypressc opt ir/05-warp-specialization.ir -p sync-insertion
    """
    from cypressc.opt import optimize

    try:
        text = Path(file).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise CypressError("E063", f"cannot read {file}: {e}", Loc(file)) from None
    out = optimize(text, file, passes, include_dirs)
    if output is None:
        click.echo(out, nl=False)
        return
    try:
        Path(output).write_text(out)
    except OSError as e:
        raise CypressError("E061", f"cannot write {output}: {e.strerror}", Loc(output)) from None
