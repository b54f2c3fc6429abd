"""The console entry point's work (``doxa = "doxa.cli:main"`` in pyproject.toml calls :func:`run`).

A module of its own so that a program or a test reaches it by name: importing ``doxa.cli.main``
(the typer module) hides the function ``doxa.cli.main`` behind that module. No typer, rich or
pydantic here: `doxa belief` runs through it.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from doxa.cli import fast
from doxa.cli.common import prepare_streams, report_uncaught


def run(argv: Optional[list[str]] = None) -> None:
    """The console entry point's work (``doxa.cli:main``): `doxa belief` takes the fast path (cli/fast.py),
    everything else goes to typer (cli/main.py).

    Standard streams are set up once here (:func:`~doxa.cli.common.prepare_streams`); whatever a
    command raises becomes one ``Error:`` line (:func:`~doxa.cli.common.report_uncaught`, which
    the typer group uses too). A reader that stops early (`doxa beliefs --json | head`) closes
    the pipe: that ends the command quietly, as it does for any Unix tool, instead of with a
    traceback; so does Ctrl-C.
    """
    prepare_streams()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        try:  # the fast path has no typer group around it: the group's handler, here
            taken = fast.try_fast_path(argv)
        except Exception as err:  # noqa: BLE001 - the last line of defence
            report_uncaught(err, "--json" in argv)
        if not taken:
            from doxa.cli.main import app

            app(args=argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout once more at exit: point it at /dev/null so that flush is silent too
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(141)  # 128 + SIGPIPE, what a shell reports for a tool killed by the pipe
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        raise SystemExit(130)  # 128 + SIGINT
