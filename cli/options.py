"""The options every command shares (``--db``, ``--json``, ``--at``, ``--help``), defined once.

``--json`` is a flag, shown as one in ``--help`` (no ``<bool>``: it takes no value). It
also switches error reporting to JSON before any other option is read, so that a bad
``--at`` or a missing store is reported as one JSON object too (see cli/common.py).
``--help`` is shown as a flag too: every command and group is made by :class:`Commands`.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from doxa.cli import common
from doxa.inference.read.params import DEFAULT_ACT_AT


class _FlagHelp:
    """``--help`` shown as the flag it is: typer 0.29 labels every flag ``<bool>``, which reads as if
    it took a value (``--help true`` is refused)."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


class Command(_FlagHelp, TyperCommand):
    """A doxa command (:class:`_FlagHelp`)."""


class Group(_FlagHelp, TyperGroup):
    """A doxa command group (:class:`_FlagHelp`); cli/main.py's group subclasses it."""


class Commands(typer.Typer):
    """A typer app whose group is a :class:`Group` and whose commands are :class:`Command` unless told otherwise:
    one place for every command and group of doxa."""

    def __init__(self, *, cls: type[TyperGroup] = Group, **settings: Any) -> None:
        super().__init__(cls=cls, **settings)

    def command(self, name: str | None = None, *, cls: type[TyperCommand] = Command, **settings: Any):
        return super().command(name, cls=cls, **settings)


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
    return typer.Option(DEFAULT_ACT_AT, "--act-at", min=0.0, max=1.0, help=help)


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
