"""`solveplan` command line: click only. The commands live in modules by topic and are
imported lazily (ortools and numpy are only loaded by the commands that need them):
`catalog_cmds` (models, gpus, clusters, show, schema), `plan_cmds` (optimize, evaluate),
`links_cmds` (links import/generate/show/place), `calibrate_cmds` (calibrate, validate), `probe_cmds` (probe),
`admission_cmds` (admit, serve); `options` maps flags to spec paths and back.

Exit codes: 0 success, 2 bad input, 3 infeasible, 4 no plan within the time limit.
Bad input never shows a traceback: `InputError` becomes one line on stderr, its spec path
turned into the flag that sets it (`options.flag_name`).
"""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn

import click

from ..errors import MAX_MESSAGE_CHARS, InputError, escape_text

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_NO_PLAN_IN_TIME = 4

# command name -> "module:function" inside solveplan.cli
COMMANDS = {
    "models": "catalog_cmds:models",
    "gpus": "catalog_cmds:gpus",
    "clusters": "catalog_cmds:clusters",
    "show": "catalog_cmds:show",
    "schema": "catalog_cmds:schema",
    "evaluate": "plan_cmds:evaluate",
    "optimize": "plan_cmds:optimize_command",
    "links": "links_cmds:links",
    "calibrate": "calibrate_cmds:calibrate",
    "validate": "calibrate_cmds:validate",
    "probe": "probe_cmds:probe",
    "admit": "admission_cmds:admit",
    "fewest-gpus": "admission_cmds:fewest_gpus_command",
    "serve": "admission_cmds:serve",
    "sweep": "sweep_cmds:sweep",
    "sweep-plot": "sweep_cmds:sweep_plot",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        try:
            mod = importlib.import_module(f"{__name__}.{module}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(__name__):
                return None  # command not built in this checkout
            raise
        return getattr(mod, attr)

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            import difflib

            close = difflib.get_close_matches(args[0], list(COMMANDS), n=2) if args else []
            hint = f"; did you mean {', '.join(close)}?" if close else "; see `solveplan --help`"
            raise click.UsageError(f"{exc.format_message().rstrip('.')}{hint}") from None


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """One line on stderr (user text in it escaped and cut: no ANSI sequence, newline or lone
    surrogate reaches the terminal, no file's contents pour out) and exit `code`."""
    click.echo(f"error: {escape_text(message, MAX_MESSAGE_CHARS)}", err=True)
    sys.exit(code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="solveplan")
def cli():
    """solveplan: the fastest parallel training plan that fits, with the solver's proof."""


def main(argv=None):
    """Console entry point: bad input is one line on stderr and exit code 2, never a traceback."""
    try:
        rv = cli.main(args=argv, prog_name="solveplan", standalone_mode=False)
        if isinstance(rv, int) and rv:  # ctx.exit(n) returns n when standalone_mode is off
            sys.exit(rv)
    except InputError as exc:
        from .options import flag_name

        fail(f"{flag_name(exc.field)}: {exc.message}" if exc.field else exc.message)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        fail("aborted", 130)
    except click.ClickException as exc:
        fail(exc.format_message().replace("\n", " "))
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except OSError as exc:  # a file the user named could not be written (or read) after all
        if exc.filename is None:
            raise
        fail(f"{exc.filename}: {exc.strerror or type(exc).__name__}")
    sys.exit(0)
