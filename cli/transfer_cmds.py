"""Moving memory in and out: `export` (a store as the JSON Lines `doxa ingest` takes) and `import`
(another memory's file — mem0's, the reference MCP memory server's — as messages pending organization).

The work is :mod:`doxa.data.export` and :mod:`doxa.data.importers`, through
:class:`doxa.inference.read.memory.Memory`'s ``export`` and ``import_file``; this module only reads
options and prints. Registered by cli/main.py through :func:`register`.
"""

from __future__ import annotations

import io
import sys
from typing import Any, Optional

import typer

from doxa.cli.options import Commands, DbOption, JsonOption, at_option

#: `doxa import …`: one sub-command per foreign format.
importing = Commands(help="Import another memory's file as messages pending organization (`doxa organize`): "
                          "mem0, mcp-memory.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command("export")(export)
    app.add_typer(importing, name="import")


def export(
    subject: Optional[str] = typer.Option(None, "--subject", help="Only what is about this subject (id): its "
                                                                  "questions, their evidence, its instructions."),
    since: Optional[str] = typer.Option(None, "--since", help="Only records dated at or after this time "
                                                              "(ISO 8601): messages by sent_at, settlements by "
                                                              "their time, …"),
    out: Optional[str] = typer.Option(None, "--out", help="Write to this file (whole, then renamed into place) "
                                                          "instead of standard output."),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """Write every record of the store as JSON Lines that `doxa ingest` takes back into an empty store."""
    from doxa.cli.common import emit_json, guarded, open_memory, parse_at

    moment = parse_at(since, "--since")
    mem = open_memory(db)
    if out is None:
        counts = guarded(lambda: _to_stdout(mem, subject, moment))
        if not as_json:
            print(f"Exported {_counted(counts)}", file=sys.stderr)
        return
    counts = guarded(lambda: mem.export(out, subject=subject, since=moment))
    if as_json:
        emit_json({"file": out, "records": counts})
        return
    print(f"Exported {_counted(counts)} to {out}")


class _SafeLines:
    """Standard output for an export: UTF-8 whatever the locale (the records are data, as in a file), and
    every character JSON leaves raw that a terminal would act on written as its ``\\uXXXX`` escape (the
    same text to a JSON reader; see doxa.cli.terminal.json_safe)."""

    def __init__(self, stream: io.TextIOBase):
        from doxa.cli.terminal import json_safe

        self.stream, self.safe = stream, json_safe

    def write(self, text: str) -> int:
        return self.stream.write(self.safe(text))


def _to_stdout(mem, subject: Optional[str], moment) -> dict[str, int]:
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a stream a caller put in place of standard output: write to it as it is
        return mem.export(_SafeLines(sys.stdout), subject=subject, since=moment)
    stream = io.TextIOWrapper(buffer, encoding="utf-8", newline="\n")
    try:
        return mem.export(_SafeLines(stream), subject=subject, since=moment)
    finally:
        stream.flush()
        stream.detach()


def _counted(counts: dict[str, int]) -> str:
    if not counts:
        return "nothing (the store holds no records of this selection)"
    return ", ".join(f"{n} {name}" for name, n in counts.items())


# ---------------------------------------------------------------------------- import
FileArg = typer.Argument(..., help="The file to import.")


@importing.command("mem0")
def import_mem0(file: str = FileArg, db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """Import mem0's memories (get_all's {"results": [...]}, a list, or JSON Lines): each a message from
    import/mem0, dated by its created_at, pending organization."""
    _import("mem0", file, None, db, as_json)


@importing.command("mcp-memory")
def import_mcp_memory(
    file: str = FileArg,
    at: Optional[str] = at_option("The time the observations are dated (ISO 8601); default the file's "
                                  "modification time."),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """Import the reference MCP memory server's memory.jsonl: entities become subjects, relations relations,
    each observation a message from import/mcp-memory, pending organization."""
    _import("mcp-memory", file, at, db, as_json)


def _import(format: str, file: str, at: Optional[str], db: Optional[str], as_json: bool) -> None:
    from doxa.cli.common import emit_json, guarded, open_memory, parse_at
    from doxa.cli.terminal import printable

    moment = parse_at(at)
    mem = open_memory(db, must_exist=False)
    result: dict[str, Any] = guarded(lambda: mem.import_file(format, file, at=moment))
    if as_json:
        emit_json(result)
        return
    added = result["added"]
    what = "memories" if format == "mem0" else "lines"
    if not added:
        print(f"Nothing new in {printable(file)} ({result['items']} {what}): imported before")
        return
    print(f"Imported {printable(file)} ({result['items']} {what}): {_counted(added)}; "
          f"{result['pending_added']} message(s) pending organization (`doxa organize`)")
