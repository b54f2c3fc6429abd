"""doxa.cli."""


def main() -> None:
    """Console entry point: `doxa belief` takes a fast path; everything else goes to typer.

    The work is :func:`doxa.cli.entry.run`'s (see there).
    """
    from doxa.cli.entry import run

    run()
