"""``cypressc tune``: search a mapping's tunables on the GPU (:mod:`cypressc.tuner`,
docs/tuning.md) and print or write the best mapping."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from cypressc.cli.common import dtype_opt, guard, load_program, mapping_opt, program_arg
from cypressc.diagnostics import CypressError, Loc


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


@click.command()
@program_arg
@mapping_opt
@dtype_opt
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
@guard
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

    tree = load_program(program, mapping, dtypes)  # located errors for the starting point first
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
    # the tuning cache's key: the program with the modules it imports, and the mapping
    from cypressc.lang.imports import source_files

    prog_text = "\0".join(f.read_text() for f in source_files(tree.program))
    map_text = Path(mapping).read_text()
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
