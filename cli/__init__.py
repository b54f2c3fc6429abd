"""doxa.cli."""


def main() -> None:
    """Console entry point: `doxa belief` takes a fast path; everything else goes to typer."""
    import sys

    from doxa.cli import fast

    if not fast.try_fast_path(sys.argv[1:]):
        from doxa.cli.main import app

        app()
