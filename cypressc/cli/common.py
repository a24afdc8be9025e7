"""What every ``cypressc`` command shares: the exit codes, the guard that renders user errors
and wraps internal ones, the program/mapping/dtype/include options, and the front end with its
warnings on stderr.

Exit codes: 0 success, 1 a user error (located diagnostics on stderr), 2 bad usage
(click), 70 an internal compiler error (re-run with ``--debug`` for the traceback).
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import click

from cypressc.diagnostics import CypressError, CypressErrors, render

EXIT_USER, EXIT_INTERNAL = 1, 70
EXIT_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a filter whose reader left


def stderr(text: str) -> None:
    click.echo(text, err=True)


class Ctx:
    def __init__(self, debug: bool) -> None:
        self.debug = debug


def guard(fn):
    """Run a command body: render user errors, wrap anything else as an internal error."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        debug = click.get_current_context().find_object(Ctx).debug
        try:
            return fn(*args, **kwargs)
        except CypressErrors as e:
            stderr(str(e))
            n = len(e.errors)
            stderr(f"{n} error{'s' if n != 1 else ''}")
            sys.exit(EXIT_USER)
        except CypressError as e:
            stderr(render(e))
            stderr("1 error")
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
            stderr(f"internal compiler error while processing {inputs}: {type(e).__name__}: {e}")
            if debug:
                stderr(traceback.format_exc())
            else:
                stderr(
                    "this is a bug in cypressc; re-run with --debug for the traceback and report it"
                )
            sys.exit(EXIT_INTERNAL)

    return wrapper


def parse_dtypes(
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


def load_program(
    program: str,
    mapping: str,
    dtypes: dict[str, str] | None = None,
    include_dirs: tuple[str, ...] = (),
):
    """:func:`cypressc.frontend.front_end`, its warnings shown on stderr."""
    from cypressc.frontend import front_end

    tree = front_end(program, mapping, dtypes=dtypes, include_dirs=include_dirs)
    for w in tree.warnings:
        stderr(render(w))
    return tree


program_arg = click.argument("program", type=click.Path(dir_okay=False))
mapping_opt = click.option(
    "-m",
    "--mapping",
    required=True,
    type=click.Path(dir_okay=False),
    help="The YAML mapping for PROGRAM (e.g. mappings/gemm/h100.yaml).",
)
dtype_opt = click.option(
    "--dtype",
    "--param",
    "dtypes",
    multiple=True,
    metavar="NAME=VALUE",
    callback=parse_dtypes,
    help="Bind a program parameter: a dtype declared `NAME = dtype(...)` (--dtype T=bf16) "
    "or a leaf function declared `NAME = choice(...)` (--param ACT=bias_silu); "
    "repeatable; unbound ones take their first value.",
)
include_opt = click.option(
    "-I",
    "--include-dir",
    "include_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Also look for include()d headers here (after the program's folder; repeatable).",
)
