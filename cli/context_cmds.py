"""Commands for what a task needs to know: `context`, `search`, `ask`.

Registered by cli/main.py through :func:`register`. Every import beyond typer happens inside
a command, so `doxa belief` starts no slower for them.
"""

from __future__ import annotations

from typing import Optional

import typer

from doxa.cli.common import answers_text, emit_json, guarded, markup_safe as _e, memory_at, open_memory
from doxa.cli.console import console
from doxa.cli.options import AtOption, DbOption, JsonOption, act_at_option, limit_option
from doxa.cli.terminal import printable


def register(app: typer.Typer) -> None:
    for command in (context, search, ask):
        app.command()(command)


def _bar(p: float, width: int = 20) -> str:
    return "█" * int(round(p * width))


def context(
    task: str = typer.Argument(..., help="The task in words, e.g. \"book Maya's birthday dinner\"."),
    at: Optional[str] = AtOption,
    act_at: float = act_at_option("Below this probability an answer is flagged: ask before acting."),
    limit: int = limit_option(20, min=1, help="Show at most this many questions."),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """What a task needs to know: subjects named, one hop out, ranked beliefs, instructions and conflicts."""
    from doxa.inference.agent.context import context as build

    mem, moment = memory_at(db, at)
    if as_json:
        from doxa.inference.agent import tools

        emit_json(guarded(lambda: tools.context(mem, task, moment, act_at, limit)))
        return
    render_context(guarded(lambda: build(mem, task, at=moment, act_at=act_at, limit=limit)))


def search(
    words: str = typer.Argument(..., help="Words to look for in every kept message."),
    subject: Optional[str] = typer.Option(None, "--subject", help="Only messages bearing on this subject."),
    limit: int = limit_option(20, min=1, help="Show at most this many messages."),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """Full-text search (BM25) over every kept message, best first."""
    from doxa.inference.agent import tools

    mem = open_memory(db)
    found = guarded(lambda: tools.search(mem, words, subject, limit))
    if as_json:
        emit_json(found)
        return
    terms, hits = found["terms"], found["hits"]
    con = console()
    if not hits:
        con.print(f"No kept message matches {_e(', '.join(terms)) or 'nothing'}"
                  + (f" among those about {_e(subject)}" if subject else "") + ".")
        return
    from rich.table import Table

    table = Table(title=f"{len(hits)} message(s) for: {_e(', '.join(terms))}")
    for name in ("score", "sent", "source", "message", "text"):
        table.add_column(name)
    for h in hits:
        text = _e(h["text"]) + (" [dim](assistant note: never evidence)[/]" if h["is_assistant"] else "")
        table.add_row(f"{h['score']:.2f}", h["sent_at"][:10], _e(h["source"]), _e(h["message"]), text)
    con.print(table)


def ask(
    question: str = typer.Argument(..., help="The question in words, e.g. \"Does Maya have allergies?\"."),
    subject: str = typer.Option(..., "--subject", help="Whom it is about (subject id)."),
    options: Optional[str] = typer.Option(None, "--options", help="The possible answers, comma-separated: yes,no "
                                                                  "(default: proposed by the organizer's model from "
                                                                  "the kept messages)."),
    kind: Optional[str] = typer.Option(None, "--kind", help="The question's kind (default: from its words)."),
    question_id: Optional[str] = typer.Option(None, "--id", help="Question id (default: SUBJECT.KIND)."),
    limit: int = limit_option(20, min=1, help="Read at most this many messages."),
    at: Optional[str] = AtOption,
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """A question nobody prepared: create it, read the kept evidence, answer now."""
    from doxa.inference.agent.ask import ask as run

    mem, moment = memory_at(db, at)
    answers = options.split(",") if options is not None else None

    def read(progress=None):
        return guarded(lambda: run(mem, question, subject, answers, kind=kind, question_id=question_id,
                                   at=moment, limit=limit, progress=progress))

    if as_json:
        emit_json(read().to_dict())
        return
    con = console()
    if not con.is_terminal:
        render_ask(read())
        return
    from rich.progress import Progress

    with Progress(transient=True, console=con) as bar:
        task_id = bar.add_task("reading messages", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task_id, completed=done, total=total)

        result = read(progress)
    render_ask(result)


def _indented(con, text: str, indent: int, style: str = "") -> None:
    """Print ``text`` wrapped to the terminal with every line indented (no markup inside; made printable)."""
    import textwrap

    pad = " " * indent
    wrapped = textwrap.fill(printable(text), width=max(con.width, indent + 20), initial_indent=pad,
                            subsequent_indent=pad)
    con.print(wrapped, style=style or None, markup=False, highlight=False, soft_wrap=True)


def render_context(ctx) -> None:

    con = console()
    con.print(f"[bold]Context for[/] “{_e(ctx.task)}” as of {ctx.at[:10]}")
    if ctx.note:
        con.print(f"[yellow]{_e(ctx.note)}[/]")
    if ctx.subjects:
        parts = []
        for s in ctx.subjects:
            if s["hop"] == 0:
                parts.append(f"[bold]{_e(s['name'])}[/] (named: “{_e(s['label'])}”)")
            else:
                parts.append(f"[bold]{_e(s['name'])}[/] (one hop: {_e(s['via'])})")
        con.print("Subjects: " + " · ".join(parts))
    if ctx.terms:
        con.print(f"Ranked by the words: {_e(', '.join(ctx.terms))}")
    con.print()
    for n, q in enumerate(ctx.questions, start=1):
        flag = "[yellow]ASK[/]" if q.ask else "[green]act[/]"
        con.print(f"{n:>2}. [bold]{_e(q.question)}[/] — {_e(q.text)}  {flag}")
        _indented(con, answers_text(q.answers), 6)
        _indented(con, q.reason, 6, "dim")
    if ctx.truncated:
        con.print(f"   … {ctx.truncated} more (raise --limit)")
    if not ctx.questions:
        con.print("No questions for these subjects yet: `doxa ask` answers one from the kept messages.")
    if ctx.instructions:
        con.print("\n[bold]Instructions[/] (from you, kept apart from beliefs; they stand: evidence never outranks you)")
        for i in ctx.instructions:
            _indented(con, f"{i.id} ({i.given_at[:10]}): {i.text}", 2)
            if i.conflict:
                _indented(con, f"? {i.conflict['ask_user']}", 4, "yellow")
            elif i.note:
                _indented(con, i.note, 4, "dim")


def render_ask(result) -> None:

    con = console()
    q = result.question
    con.print(f"[bold]{_e(q['id'])}[/]: {_e(q['text'])} ({_e(', '.join(q['options']))})"
              + (" — new question" if result.created else " — existing question"))
    con.print(f"Searched kept messages about {_e(q['subject'])} for: {_e(', '.join(result.terms))}")
    if result.hint is not None:
        if result.hits:
            con.print(f"Found {len(result.hits)} message(s) that bear on it:")
            for h in result.hits:
                con.print(f"  {_e(h.message)} {h.sent_at:%Y-%m-%d} {_e(h.source)}: “{_e(h.text)}” "
                          f"[dim](score {h.score:.2f})[/]")
        else:
            con.print("No kept message matches.")
        con.print(f"[yellow]{_e(result.hint)}[/]")
    else:
        con.print(f"Reader {_e(result.reader)} read {len(result.readings)} message(s)"
                  + (f" ({result.already_read} already read before)" if result.already_read else "") + ":")
        texts = {h.message: h for h in result.hits}
        for r in result.readings:
            top = max(r["probs"], key=r["probs"].get)
            h = texts.get(r["message"])
            text = f"“{_e(h.text)}”" if h else ""
            con.print(f"  {_e(r['message'])} {text} → {_e(top)} {r['probs'][top]:.2f}, "
                      f"unrelated {r['unrelated']:.2f}")
    b = result.belief
    if b is not None:
        for option, p in sorted(b.answers.items(), key=lambda kv: -kv[1]):
            con.print(f"  {_e(option):<16} {p:5.2f}  {_bar(p)}")
        verdict = "act on it" if b.act else "too uncertain to act on: ask"
        con.print(f"  → {_e(b.top)} ({b.p_top:.2f}): {verdict} · {b.n_evidence} evidence unit(s)")
