"""The options every command shares (``--db``, ``--json``, ``--at``), defined once.

``--json`` is a flag, shown as one in ``--help`` (no ``<bool>``: it takes no value). It
also switches error reporting to JSON before any other option is read, so that a bad
``--at`` or a missing store is reported as one JSON object too (see cli/common.py).
"""

from __future__ import annotations

import typer

from doxa.cli import common


def _json_mode(value: bool) -> bool:
    common.set_json_mode(bool(value))
    return value


def db_option(help: str = "Store path (default: $DOXA_DB, else ./doxa.duckdb).") -> typer.models.OptionInfo:
    return typer.Option(None, "--db", help=help, show_default=False)


def json_option(help: str = "Machine-readable JSON output (an error is one JSON object on standard error).") \
        -> typer.models.OptionInfo:
    return typer.Option(False, "--json", help=help, metavar="", callback=_json_mode, is_eager=True)


def flag(default: bool, name: str, help: str, **extra) -> typer.models.OptionInfo:
    """A boolean flag shown without a value in ``--help`` (``--read``, not ``--read <bool>``)."""
    return typer.Option(default, name, help=help, metavar="", **extra)


def at_option(help: str = "Only evidence up to this time (ISO 8601); default now.") -> typer.models.OptionInfo:
    return typer.Option(None, "--at", help=help)


def act_at_option(help: str = "Below this probability the top answer is flagged too uncertain to act on.") \
        -> typer.models.OptionInfo:
    return typer.Option(0.8, "--act-at", min=0.0, max=1.0, help=help)


#: The largest ``--limit``: more than any store holds, and within what DuckDB's LIMIT takes (a 64-bit
#: integer), so a huge number is refused with the range instead of failing inside a query.
MAX_LIMIT = 1_000_000_000


def limit_option(default: int, help: str, min: int = 1) -> typer.models.OptionInfo:
    """``--limit``: at most this many (``min=0`` where 0 means all)."""
    return typer.Option(default, "--limit", min=min, max=MAX_LIMIT, help=help)


def by_option(help: str, default: str = "user") -> typer.models.OptionInfo:
    """``--by``: who does or says this, recorded with what it does."""
    return typer.Option(default, "--by", help=help)


DbOption = db_option()
JsonOption = json_option()
AtOption = at_option()
