"""doxa.cli."""


def main() -> None:
    """Console entry point: `doxa belief` takes a fast path; everything else goes to typer.

    A reader that stops early (`doxa beliefs --json | head`) closes the pipe: that ends the
    command quietly, as it does for any Unix tool, instead of with a traceback.
    """
    import os
    import sys

    from doxa.cli import fast

    try:
        if not fast.try_fast_path(sys.argv[1:]):
            from doxa.cli.main import app

            app()
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout once more at exit: point it at /dev/null so that flush is silent too
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(141)  # 128 + SIGPIPE, what a shell reports for a tool killed by the pipe
