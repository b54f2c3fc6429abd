"""Commands for a question in words and a belief over time: `answer`, `history`.

Registered by cli/main.py through :func:`register`. Thin: each calls the function of
:mod:`doxa.inference.agent.tools` that the MCP tool of the same name calls; every import beyond
typer happens inside a command, so `doxa belief` starts no slower for them.
"""

from __future__ import annotations

from typing import Optional

import typer

from doxa.cli.common import answers_text, emit_json, guarded, markup_safe as _e, memory_at, open_memory, parse_at
from doxa.cli.console import console
from doxa.cli.options import AtOption, DbOption, JsonOption, act_at_option, limit_option


def register(app: typer.Typer) -> None:
    for command in (answer, history):
        app.command()(command)


def answer(
    question: str = typer.Argument(..., help="The question in words, e.g. \"Where does Maya live?\" or "
                                             "\"What was my previous job?\"."),
    subject: Optional[str] = typer.Option(None, "--subject", help="Whom it is about (subject id; default: whom "
                                                                  "the words name, the user for I/my/me)."),
    at: Optional[str] = AtOption,
    act_at: float = act_at_option("Below this probability doxa abstains: I don't know."),
    limit: int = limit_option(20, min=1, help="Read at most this many messages."),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """A question in words: the tracked question it asks (found, or made), the answer with its probability, or I don't know."""
    from doxa.inference.agent import tools

    mem, moment = memory_at(db, at)
    found = guarded(lambda: tools.answer(mem, question, subject, moment, act_at, limit))
    if as_json:
        emit_json(found)
        return
    render_answer(found)


def history(
    question: str = typer.Argument(..., help="Question id, e.g. maya.home."),
    start: Optional[str] = typer.Option(None, "--from", help="Show the changes from this time on (ISO 8601); "
                                                             "default: from the first evidence."),
    end: Optional[str] = typer.Option(None, "--to", help="Only evidence up to this time (ISO 8601); default now."),
    act_at: float = act_at_option(),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """The top answer and its probability after each change of evidence, and when the top answer changed."""
    from doxa.inference.agent import tools

    start_at, end_at = parse_at(start, "--from"), parse_at(end, "--to")
    mem = open_memory(db)
    found = guarded(lambda: tools.history(mem, question, start_at, end_at, act_at))
    if as_json:
        emit_json(found)
        return
    render_history(found)


def render_answer(found: dict) -> None:
    con = console()
    if found["question"] is not None:
        how = {"search": "found by search", "model": "chosen by the model among close matches",
               "created": "new question"}.get(found["found_by"] or "", "")
        con.print(f"[bold]{_e(found['question'])}[/]: {_e(found['question_text'])} ({how})")
    flag = "[green]act[/]" if found["act"] else "[yellow]abstain[/]"
    con.print(f"{_e(found['message'])}  {flag}")
    if found["alternatives"]:
        con.print("  alternatives: " + _e(answers_text({a["answer"]: a["p"] for a in found["alternatives"]})))
    if found["when"] != "now":
        con.print(f"  answer for {found['at'][:10]} ({found['when']} value; asked as of {found['asked_at'][:10]})")
        for c in found["changes"]:
            con.print(f"  changed {c['at'][:10]}: {_e(c['from'])} → {_e(c['to'])}")
    if found["settle"]:
        con.print(f"  to settle it: {_e(found['settle'])}")
    if found["evidence"]:
        con.print("  evidence:")
        for ev in found["evidence"]:
            if "settlement" in ev:
                con.print(f"    {ev['sent_at'][:10]} settled by {_e(ev['source'])} ({_e(ev['how'])}): "
                          f"{_e(ev['settlement'])}")
            else:
                con.print(f"    {_e(ev['message'])} {ev['sent_at'][:10]} {_e(ev['source'])}: “{_e(ev['text'])}”")
    for line in found["skipped"]:
        con.print(f"[dim]skipped: {_e(line)}[/]")


def render_history(found: dict) -> None:
    con = console()
    con.print(f"[bold]{_e(found['question'])}[/]: {_e(found['text'])}")
    if not found["points"]:
        con.print("No evidence in this window: `doxa explain` shows the question's evidence.")
        return
    from rich.table import Table

    table = Table(title=f"{len(found['points'])} change(s) of evidence, up to {found['end'][:10]}")
    for name in ("at", "top", "p", "act", "event"):
        table.add_column(name)
    for point in found["points"]:
        ev = point["event"]
        what = {"reading": lambda: f"reading of {ev['message']} ({ev['source']}): {ev['stated']}",
                "settlement": lambda: f"settlement ({ev['how']}): {ev['answer']}",
                "rejection": lambda: f"rejection: {ev['answer']}"}[ev["kind"]]()
        if len(point["also"]):
            what += f" (+{len(point['also'])} more)"
        table.add_row(point["at"][:10], _e(point["top"]), f"{point['p']:.2f}", "act" if point["act"] else "ask",
                      _e(what))
    con.print(table)
    if found["changes"]:
        for c in found["changes"]:
            con.print(f"changed {c['at'][:10]}: {_e(c['from'])} → {_e(c['to'])}")
    else:
        con.print("The top answer did not change.")
