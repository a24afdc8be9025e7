"""The ``cypressc`` command line (click + rich): the group and its commands, one module per
family (:mod:`.compile`: check, explain, build, opt; :mod:`.tune`), the shared options and
error handling in :mod:`.common`.

Exit codes: 0 success, 1 a user error (located diagnostics on stderr), 2 bad usage
(click), 70 an internal compiler error (re-run with ``--debug`` for the traceback).
"""

from __future__ import annotations

import click

from cypressc.cli.common import Ctx
from cypressc.cli.compile import build, check, explain, opt_cmd
from cypressc.cli.tune import tune

__all__ = ["main"]


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
      cypressc opt     ir/05-warp-specialization.ir -p sync-insertion
    """
    ctx.obj = Ctx(debug)


for _command in (check, explain, build, opt_cmd, tune):
    main.add_command(_command)
