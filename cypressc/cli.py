"""The ``cypressc`` command line (click + rich).

Exit codes: 0 success, 1 a user error (located diagnostics on stderr), 2 bad usage
(click), 70 an internal compiler error (re-run with ``--debug`` for the traceback).
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import click

from cypressc.diagnostics import CypressError, CypressErrors, Loc, render
from cypressc.pipeline import step_names  # light: the --after choices are the pipeline's steps

EXIT_USER, EXIT_INTERNAL = 1, 70
EXIT_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a filter whose reader left


def _stderr(text: str) -> None:
    click.echo(text, err=True)


class _Ctx:
    def __init__(self, debug: bool) -> None:
        self.debug = debug


def _guard(fn):
    """Run a command body: render user errors, wrap anything else as an internal error."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        debug = click.get_current_context().find_object(_Ctx).debug
        try:
            return fn(*args, **kwargs)
        except CypressErrors as e:
            _stderr(str(e))
            n = len(e.errors)
            _stderr(f"{n} error{'s' if n != 1 else ''}")
            sys.exit(EXIT_USER)
        except CypressError as e:
            _stderr(render(e))
            _stderr("1 error")
            sys.exit(EXIT_USER)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            # the reader went away (`cypressc explain … | head`): stop quietly, as a Unix filter
            # does; stdout goes to /dev/null so that Python's own flush at exit cannot fail again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(EXIT_PIPE)
        except Exception as e:  # noqa: BLE001 - the one place internal errors are caught
            order = sorted(kwargs, key=lambda k: (k != "program", k != "mapping"))  # program first
            inputs = " ".join(str(kwargs[k]) for k in order if isinstance(kwargs[k], (str, Path)))
            _stderr(f"internal compiler error while processing {inputs}: {type(e).__name__}: {e}")
            if debug:
                _stderr(traceback.format_exc())
            else:
                _stderr(
                    "this is a bug in cypressc; re-run with --debug for the traceback and report it"
                )
            sys.exit(EXIT_INTERNAL)

    return wrapper


def _parse_dtypes(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    """``--dtype T=bf16`` (repeatable) -> ``{"T": "bf16"}``; malformed -> a usage error."""
    out: dict[str, str] = {}
    for v in values:
        name, eq, dt = v.partition("=")
        if not eq or not name.isidentifier() or not dt:
            raise click.BadParameter(f"'{v}': write NAME=VALUE, e.g. --dtype T=bf16", param=param)
        if name in out and out[name] != dt:
            raise click.BadParameter(f"'{name}' is bound twice ({out[name]} and {dt})", param=param)
        out[name] = dt
    return out


def _front_end(
    program: str,
    mapping: str,
    dtypes: dict[str, str] | None = None,
    include_dirs: tuple[str, ...] = (),
):
    """:func:`cypressc.frontend.front_end`, its warnings shown on stderr."""
    from cypressc.frontend import front_end

    tree = front_end(program, mapping, dtypes=dtypes, include_dirs=include_dirs)
    for w in tree.warnings:
        _stderr(render(w))
    return tree


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show Python tracebacks for internal errors.")
@click.version_option(package_name="cypressc")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """cypressc: compile Cypress task programs to Hopper CUDA.

    A PROGRAM (.cyp) describes a tensor computation as tasks with sequential semantics;
    a MAPPING (.yaml) binds each task to a processor level (HOST, BLOCK, WARPGROUP,
    WARP, THREAD) and each tensor to a memory (GLOBAL, SHARED, REGISTER, NONE).

    \b
    Typical use:
      cypressc check   programs/gemm.cyp -m mappings/gemm/h100.yaml
      cypressc explain programs/gemm.cyp -m mappings/gemm/h100.yaml
    """
    ctx.obj = _Ctx(debug)


_program_arg = click.argument("program", type=click.Path(dir_okay=False))
_mapping_opt = click.option(
    "-m",
    "--mapping",
    required=True,
    type=click.Path(dir_okay=False),
    help="The YAML mapping for PROGRAM (e.g. mappings/gemm/h100.yaml).",
)
_dtype_opt = click.option(
    "--dtype",
    "--param",
    "dtypes",
    multiple=True,
    metavar="NAME=VALUE",
    callback=_parse_dtypes,
    help="Bind a program parameter: a dtype declared `NAME = dtype(...)` (--dtype T=bf16) "
    "or a leaf function declared `NAME = choice(...)` (--param ACT=bias_silu); "
    "repeatable; unbound ones take their first value.",
)
_include_opt = click.option(
    "-I",
    "--include-dir",
    "include_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Also look for include()d headers here (after the program's folder; repeatable).",
)


@main.command()
@_program_arg
@_mapping_opt
@_dtype_opt
@_include_opt
@_guard
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

    tree = _front_end(program, mapping, dtypes, include_dirs)
    r = render_build(tree)
    nodes = list(tree.root.walk())
    tasks = {n.variant.task for n in nodes}
    click.echo(
        f"ok: {program} with {mapping}: {len(tree.program.variants)} variants of "
        f"{len(tree.program.tasks())} tasks, {len(nodes)} instantiated task(s) over "
        f"{len(tasks)} task(s) on {tree.machine.name}; {len(step_names())} passes and the "
        f"CUDA backend accept it ({len(r.files)} files of build/{r.plan.name}, none written)"
    )


def _check_schedule(t, program: str, seed: int, schedules: int) -> None:
    """``explain --check-schedule``: one verdict line; exit status 1 on a finding."""
    from cypressc.backend.lower import REFUSAL_CODE
    from cypressc.backend.sizes import check_sizes, shown
    from cypressc.ir.schedule_check import check_schedules, small_sizes
    from cypressc.lang.syntax import LeafCall, walk
    from cypressc.pipeline import compile_module

    done: list[tuple[str, object]] = []
    try:  # through the CUDA lowering, for the launcher's `requires` on the sizes
        compile_module(t, hook=lambda name, m, _dt: done.append((name, m)))
    except CypressError as e:
        if e.code != REFUSAL_CODE or "sync-insertion" not in dict(done):
            raise
    snaps = dict(done)
    plan = getattr(snaps.get("cuda-lowering"), "kernel", None)
    requires = [{"tree": r.tree(), "why": r.why} for r in plan.requires] if plan is not None else []
    m = snaps["sync-insertion"]
    sizes = check_sizes(m, requires, small_sizes(m))
    sizes = {**sizes, **{f: 0.75 for f in m.floats}}
    _stderr(
        f"checking {program}: {schedules} random schedule(s) (seeds {seed}..{seed + schedules - 1}) of the "
        f"IR after sync-insertion in the concurrent interpreter, one block at a time, at {shown(sizes)} "
        "(one block, two trips around each pipeline, sizes the launcher accepts); this can take a minute"
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


@main.command()
@_program_arg
@_mapping_opt
@_dtype_opt
@_include_opt
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
@_guard
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
    check_schedule: bool = False,
    seed: int = 0,
    schedules: int = 50,
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
    from cypressc.pipeline import compile_module

    t = _front_end(program, mapping, dtypes, include_dirs)
    if check_schedule:
        _check_schedule(t, program, seed, schedules)
        return
    console = Console()
    if tree and not graph:
        print_task_tree(t)
    times: list[tuple[str, float]] = []
    refused = None
    try:
        snaps = compile_module(t, until=after, hook=lambda name, m, dt: times.append((name, dt)))
    except CypressError as e:
        from cypressc.backend.lower import REFUSAL_CODE

        done = [name for name, _ in times]
        if e.code != REFUSAL_CODE or not done or (after is not None and after not in done):
            raise
        # a backend pass refuses the program; every pass before it still explains it
        refused = e
        times.clear()
        snaps = compile_module(t, until=done[-1], hook=lambda name, m, dt: times.append((name, dt)))
    if dump_ir:
        from cypressc.pipeline import dump_snapshots

        dump_snapshots(Path(dump_ir), snaps)
    shown = snaps[-1:] if after else snaps
    if graph:
        name, m = snaps[-1]
        dot = to_dot(m, title=f"{t.program.path} after {name}")
        if graph_format == "svg":
            click.echo(render_svg(dot, program), nl=False)
        else:
            click.echo(dot, nl=False)
        return
    for name, m in shown:
        text = print_module(m)
        if console.is_terminal:
            console.rule(f"[bold]after {name}")
            from rich.syntax import Syntax

            console.print(Syntax(text, "python", theme="ansi_dark", word_wrap=False))
        else:
            click.echo(f"// ---- after {name}")
            click.echo(text, nl=False)
    if refused is not None:
        _stderr(render(refused, kind="warning"))
    if timings:
        for name, dt in times:
            click.echo(f"{name:<22} {dt * 1000:9.1f} ms", err=True)


@main.command()
@_program_arg
@_mapping_opt
@_dtype_opt
@_include_opt
@click.option(
    "-o",
    "--output",
    type=click.Path(),
    default=None,
    help="Output directory [default: build/<name> in the working directory]. Created, or "
    "replaced atomically when it is empty or an earlier `cypressc build` output that nobody "
    "changed; anything else is refused (E062).",
)
@_guard
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

    t = _front_end(program, mapping, dtypes, include_dirs)
    summary = write_build(t, Path(output) if output is not None else None, dtypes)
    click.echo(summary)


# --------------------------------------------------------------------------------------------
# cypressc tune (cypressc/tuner/, docs/tuning.md)
# --------------------------------------------------------------------------------------------


def _parse_sizes(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, int]:
    """``--size M=4096`` (repeatable) -> ``{"M": 4096}``; malformed -> a usage error."""
    out: dict[str, int] = {}
    for v in values:
        name, eq, n = v.partition("=")
        # 0 is a size too: an int flag such as FlashAttention's causal=0
        if not eq or not name.isidentifier() or not n.strip().isdigit():
            raise click.BadParameter(
                f"'{v}': write NAME=N with N a non-negative integer, e.g. --size M=4096",
                param=param,
            )
        if name in out and out[name] != int(n):
            raise click.BadParameter(f"'{name}' is bound twice ({out[name]} and {n})", param=param)
        out[name] = int(n)
    return out


def _parse_floats(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, float]:
    """``--float scale=0.125`` (repeatable) -> ``{"scale": 0.125}``; malformed -> a usage error."""
    out: dict[str, float] = {}
    for v in values:
        name, eq, x = v.partition("=")
        try:
            value = float(x)
        except ValueError:
            value = None
        if not eq or not name.isidentifier() or value is None:
            raise click.BadParameter(
                f"'{v}': write NAME=X with X a number, e.g. --float scale=0.125", param=param
            )
        if name in out and out[name] != value:
            raise click.BadParameter(
                f"'{name}' is bound twice ({out[name]:g} and {value:g})", param=param
            )
        out[name] = value
    return out


@main.command()
@_program_arg
@_mapping_opt
@_dtype_opt
@click.option(
    "--size",
    "sizes",
    multiple=True,
    required=True,
    metavar="NAME=N",
    callback=_parse_sizes,
    help="Bind a size of the kernel, e.g. --size M=4096 --size N=4096 --size K=4096 (every "
    "size the kernel takes, once each, by its name or another name of it: C_d0 for the M "
    "that a program names with M = C.shape[0]).",
)
@click.option(
    "--float",
    "floats",
    multiple=True,
    metavar="NAME=X",
    callback=_parse_floats,
    help="The value of a float parameter of the kernel in the checking and timing runs, "
    "e.g. --float scale=0.125 (repeatable; 1.0 for one not given).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the best mapping here (YAML with a header comment); default: print it.",
)
@click.option(
    "--compile-only",
    is_flag=True,
    help="Prune and compile only (no GPU needed): the static model ranks the candidates.",
)
@click.option(
    "--budget",
    type=click.IntRange(1, 10_000),
    default=24,
    show_default=True,
    help="Candidates compiled (and timed) at most, the starting mapping not counted.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(1, 1024),
    default=None,
    help="Processes for pruning and nvcc [default: every CPU core].",
)
@click.option(
    "--rounds",
    type=click.IntRange(1, 100),
    default=5,
    show_default=True,
    help="Interleaved timing rounds (the median over all calls counts).",
)
@click.option(
    "--reps",
    type=click.IntRange(1, 1000),
    default=10,
    show_default=True,
    help="Timed calls per candidate per round.",
)
@click.option(
    "--reference",
    metavar="FILE.py:FUNC",
    default=None,
    help="A PyTorch reference: FUNC(inputs: dict of the read tensors and the float "
    "parameters' values) -> dict of the written tensors [default: the starting mapping's kernel].",
)
@click.option(
    "--top",
    type=click.IntRange(1, 1000),
    default=10,
    show_default=True,
    help="Rows of the candidate table.",
)
@click.option("--force", is_flag=True, help="Tune again even if the tuning cache has this result.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bars on stderr (--no-progress: none) [default: bars when stderr is a "
    "terminal, else plain lines: each phase's start, every tenth, its end with counts and seconds].",
)
@_guard
def tune(
    program: str,
    mapping: str,
    dtypes: dict[str, str],
    sizes: dict[str, int],
    floats: dict[str, float],
    output: str | None,
    compile_only: bool,
    budget: int,
    jobs: int | None,
    rounds: int,
    reps: int,
    reference: str | None,
    top: int,
    force: bool,
    progress: bool | None,
) -> None:
    """Search the knobs of MAPPING (tiles, atoms, K tile, pipeline, warpgroups, warp
    specialization, persistence, raster, epilogue staging, wgmma groups in flight, register
    split) for the fastest correct kernel of PROGRAM at the given sizes.

    \b
    Candidates the compiler refuses are pruned before nvcc; the rest are ranked, the best
    --budget compiled on every core (content-cached under $CYPRESSC_CACHE_DIR, default
    ~/.cache/cypressc), checked against a reference and timed on every visible GPU.
    The mapping's `tune:` section lists or restricts candidates (docs/tuning.md).
    Ctrl-C stops early and still writes the best mapping found so far.

    \b
    Example:
      cypressc tune programs/gemm.cyp -m mappings/gemm/h100_plain.yaml \\
          --size M=4096 --size N=4096 --size K=4096 -o best.yaml
    """
    import sys as _sys

    from cypressc.tuner import report
    from cypressc.tuner.search import Options, OptionError, bind_sizes, kernel_sizes, search

    tree = _front_end(program, mapping, dtypes)  # located errors for the starting point first
    try:  # by the kernel's names (--size C_d0=... may name size M): the tuning cache's key
        sizes = bind_sizes(sizes, *kernel_sizes(tree))
    except OptionError as e:
        raise click.BadParameter(str(e), param_hint="--size") from None
    opts = Options(
        sizes=sizes,
        floats=floats,
        dtypes=dtypes,
        compile_only=compile_only,
        budget=budget,
        workers=jobs,
        rounds=rounds,
        reps=reps,
        reference=reference,
    )
    if reference is not None:
        target, _, func = reference.rpartition(":")
        if not target or not func or (target.endswith(".py") and not Path(target).is_file()):
            raise click.BadParameter(
                f"'{reference}': write FILE.py:FUNCTION (an existing file) or MODULE:FUNCTION",
                param_hint="--reference",
            )
    _check_best_output(output)  # before minutes of tuning, not after
    prog_text, map_text = Path(program).read_text(), Path(mapping).read_text()
    if not compile_only and not force:
        from cypressc.tuner.search import _device_name

        try:
            device = _device_name()
        except RuntimeError as e:
            raise click.ClickException(str(e)) from None
        hit = report.cached_result(prog_text, map_text, device, dtypes, sizes)
        if hit is not None:
            click.echo(hit["table"])
            click.echo(f"from the tuning cache ({device}); --force tunes again")
            _write_best(hit["yaml"], output)
            return
    # a terminal gets progress bars; a log file or a pipe plain lines (a tune runs for minutes)
    show = ("bars" if _sys.stderr.isatty() else "lines") if progress is None else progress
    try:
        with report.Progress(show) as bars:
            res = search(program, mapping, opts, progress=bars)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint=getattr(e, "option", "--size")) from None
    except RuntimeError as e:
        raise click.ClickException(str(e)) from None
    click.echo(report.table(res, top))
    click.echo(report.closing_note(res))
    text = report.best_yaml(res, program, mapping)
    if text is None:
        raise click.ClickException(
            "no candidate compiled" + ("" if compile_only else " and passed the check")
        )
    report.store_result(res, prog_text, map_text, text)
    _write_best(text, output)
    if res.partial:
        sys.exit(130)


_TUNE_HEADER = "# cypressc tune: "


def _check_best_output(output: str | None) -> None:
    """E062 unless ``output`` is new or an earlier `cypressc tune` result (its first line is
    the tune header): tune never overwrites a user's mapping."""
    if output is None:
        return
    out = Path(output)
    if out.is_symlink() or out.exists():
        try:
            ours = (
                out.is_file() and not out.is_symlink() and out.read_text().startswith(_TUNE_HEADER)
            )
        except (OSError, UnicodeDecodeError):
            ours = False
        if not ours:
            from cypressc.backend.outdir import REFUSED

            raise CypressError(
                REFUSED,
                f"refusing to overwrite {output}: it was not written by `cypressc tune`",
                Loc(str(output)),
                hint="pass -o a new file (without -o the best mapping is printed)",
            )


def _write_best(text: str, output: str | None) -> None:
    """Print the best mapping, or write it to ``output`` (checked by :func:`_check_best_output`)."""
    if output is None:
        click.echo("---- the best mapping (pass -o FILE to write it)")
        click.echo(text, nl=False)
        return
    _check_best_output(output)
    out = Path(output)
    try:
        out.write_text(text)
    except OSError as e:
        raise click.ClickException(f"cannot write {output}: {e.strerror}") from None
    click.echo(f"wrote the best mapping to {output}")


if __name__ == "__main__":  # pragma: no cover
    main()
