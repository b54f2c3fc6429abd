"""The `doxa` command line: a thin typer layer over :mod:`doxa.inference.read.memory`.

This module is the typer app: the group (:class:`_Doxa`), ``--version``, and the command
modules, each registered by its ``register(app)`` (cli/*_cmds.py, cli/mcp_cmd.py).
Every command takes ``--db`` (default ``$DOXA_DB``, else ./doxa.duckdb) and ``--json``.
Heavy libraries load only inside the commands that need them, so `doxa belief`
starts fast.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import _click  # typer's own copy of click: its exceptions are these

from doxa.cli import answer_cmds, belief_cmds, bench_cmds, context_cmds, feedback_cmds, forget_cmds, mcp_cmd, \
    organizer_cmds, remember_cmds, tokens_cmds, train_cmds, transfer_cmds
from doxa.cli.common import check_arguments, fail, report_uncaught, set_json_mode
from doxa.cli.options import Commands, Group, flag


class _Doxa(Group):
    """The command group: no traceback reaches a user, and ``--json`` makes every error JSON.

    A usage error (a missing argument, ``--json true``) with ``--json`` on the command line
    is one JSON object like every other error. An argument that is not UTF-8 is refused by
    number before any command reads it. Anything else a command raises goes to
    :func:`doxa.cli.common.report_uncaught` (shared with the fast path of `doxa belief`): a
    known condition (an unreadable path, input that is not UTF-8) in one clear line, anything
    unforeseen as an internal error in one line (``DOXA_DEBUG=1`` shows the traceback instead).
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        wants_json = "--json" in argv and standalone_mode
        set_json_mode(wants_json)
        check_arguments(argv)
        try:
            # with --json, click must hand its own errors over instead of printing them
            value = super().main(argv, prog_name, complete_var, standalone_mode and not wants_json, **extra)
        except _click.exceptions.ClickException as err:  # only reached with --json
            set_json_mode(True)
            fail(err.format_message(), err.exit_code)
        except typer.Abort:
            fail("aborted", 1)
        except Exception as err:  # noqa: BLE001 - the last line of defence, see the docstring
            report_uncaught(err, wants_json)
        if wants_json:
            raise SystemExit(value if isinstance(value, int) else 0)
        return value


app = Commands(
    cls=_Doxa,
    name="doxa",
    help="A belief memory for agents: every answer with the probability it deserves.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("doxa")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from doxa import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"doxa {_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = flag(False, "--version", "Print doxa's version and exit.", callback=_print_version, is_eager=True),
):
    """A belief memory for agents: every answer with the probability it deserves."""


# Each command module imports only typer and doxa.cli.common at import time; what the
# commands need beyond that loads inside them.
for _commands in (belief_cmds, train_cmds, bench_cmds, context_cmds, answer_cmds, organizer_cmds, remember_cmds,
                  feedback_cmds, forget_cmds, transfer_cmds, mcp_cmd, tokens_cmds):
    _commands.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
