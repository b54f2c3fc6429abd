"""Feedback as settled facts: `correct`, `approve`, `outcome`, `reject`, `instruct`.

Each command calls the verb of :mod:`doxa.inference.agent.tools` (the MCP server calls the same
function), prints its result, and with ``--json`` prints that result as it is. Registered
by cli/main.py through :func:`register`.
"""

from __future__ import annotations

from typing import Any, Optional

import typer

from doxa.cli.options import DbOption, JsonOption, at_option, by_option
from doxa.cli.terminal import printable

FeedbackAt = at_option("When it happened (ISO 8601); default now. Given: a repeat with the same --at is the "
                       "same record.")
QuestionArg = typer.Argument(..., help="Question id, e.g. maya.diet.")


def register(app: typer.Typer) -> None:
    for command in (correct, approve, outcome, reject, instruct):
        app.command()(command)


def _by(default: str):
    return by_option("Who says so (recorded with the fact).", default)


def _run(db: Optional[str], as_json: bool, verb: str, **arguments: Any) -> None:
    from doxa.cli.common import emit_json, guarded, open_memory
    from doxa.inference.agent import tools

    mem = open_memory(db)
    result = guarded(lambda: getattr(tools, verb)(mem, **arguments))
    if as_json:
        emit_json(result)
        return
    print(printable(result["message"]))
    before, after = result.get("before"), result.get("after")
    if before and after and result["recorded"]:
        def top(b):
            return f"{printable(b['top'])} {b['p_top']:.2f}" if b["top"] else "no answer left"

        print(f"  {printable(before['question'])}: {top(before)} → {top(after)}")


def correct(question: str = QuestionArg,
            answer: str = typer.Argument(..., help="The right answer: one of the question's options (a value an open "
                                                 "question does not list yet is added to them)."),
            at: Optional[str] = FeedbackAt, by: str = _by("user"),
            db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """The user corrected the assistant: record ANSWER as settled (a settlement, how: correction)."""
    _run(db, as_json, "correct", question=question, answer=answer, at=at, by=by)


def approve(question: str = QuestionArg,
            answer: Optional[str] = typer.Argument(None, help="What was approved (default: the current top "
                                                              "answer, recorded with its probability then)."),
            at: Optional[str] = FeedbackAt, by: str = _by("user"),
            db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """The user approved what was proposed: a settlement (how: approval) with what doxa said then."""
    _run(db, as_json, "approve", question=question, answer=answer, at=at, by=by)


def outcome(question: str = QuestionArg,
            answer: str = typer.Argument(..., help="The answer the world showed (a value an open question does not list "
                                                 "yet is added to its options)."),
            how: str = typer.Option(..., "--how", help="How the world showed it, e.g. \"the parcel arrived\"."),
            at: Optional[str] = FeedbackAt, by: str = _by("world"),
            db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """The world said so (a parcel arrived, an email bounced): a settlement (how: outcome)."""
    _run(db, as_json, "outcome", question=question, answer=answer, how=how, at=at, by=by)


def reject(question: str = QuestionArg,
           answer: str = typer.Argument(..., help="The answer that is not it."),
           at: Optional[str] = FeedbackAt, by: str = _by("user"),
           db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """The user says ANSWER is not it: it reads 0 from then on."""
    _run(db, as_json, "reject", question=question, answer=answer, at=at, by=by)


def instruct(subject: str = typer.Argument(..., help="Whom it is about (subject id)."),
             text: str = typer.Argument(..., help="The instruction in words, e.g. \"Avoid loud restaurants\"."),
             rests_on: Optional[str] = typer.Option(
                 None, "--rests-on", help="QUESTION=ANSWER: the belief it presumes; doxa says when the "
                                          "evidence turns against it."),
             at: Optional[str] = FeedbackAt, by: str = _by("user"),
             db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """A directive from the user: kept beside beliefs, never merged with them, never evidence."""
    from doxa.cli.common import guarded
    from doxa.inference.agent.tools import parse_rests_on

    _run(db, as_json, "instruct", subject=subject, text=text, at=at, by=by,
         rests_on=guarded(lambda: parse_rests_on(rests_on)))


def show_uncertain(found: list[dict], as_json: bool) -> None:
    """`doxa beliefs --uncertain`: the beliefs to ask about, most useful first."""
    from doxa.cli.common import emit_json

    if as_json:
        emit_json(found)
        return
    if not found:
        print("Nothing to ask: every belief is sure enough to act on and no instruction is contradicted.")
        return
    from rich.table import Table

    from doxa.cli.common import markup_safe as escape
    from doxa.cli.console import console

    table = Table(title=f"{len(found)} belief(s) to ask about, most useful first")
    for name in ("question", "top", "P(wrong)", "reads", "usefulness", "ask the user"):
        table.add_column(name)
    for u in found:
        b = u["belief"]
        top = f"{b['top']} ({b['p_top']:.2f})" if b["top"] else "—"
        table.add_row(escape(b["question"]), escape(top), f"{u['p_wrong']:.2f}", str(u["recent_reads"]),
                      f"{u['usefulness']:.2f}", escape(u["ask_user"]))
    console().print(table)
