"""`doxa remember` and `doxa organize`: raw messages in, beliefs out.

Registered by cli/main.py through :func:`register`; every import beyond typer happens inside
a command. The organizer's own verbs (its instructions, merge, split, …) are in cli/organizer_cmds.py.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from doxa.cli.common import answers_text, markup_safe as _e
from doxa.cli.options import DbOption, JsonOption, at_option, flag, limit_option


def register(app: typer.Typer) -> None:
    app.command()(remember)
    app.command()(organize)


def _read_messages(path: str, default_source: str | None) -> list[dict]:
    """Bare messages, one JSON object a line: ``{"text", "source", "sent_at"?, "id"?}`` (``source``
    may be left out when ``--source`` gives it)."""
    from doxa.cli.common import fail, json_lines, utf8_input

    items = []
    try:
        handle = sys.stdin if path == "-" else open(path, encoding="utf-8")
    except FileNotFoundError:
        fail(f"no such file: {path}")
    problems = []
    with handle, utf8_input(path):
        for number, value, problem in json_lines(handle):
            if problem:
                problems.append(f"line {number}: {problem}")
                continue
            if not isinstance(value, dict):
                problems.append(f"line {number}: expected a JSON object {{\"text\", \"source\", \"sent_at\"}}")
                continue
            unknown = sorted(set(value) - {"text", "source", "sent_at", "id"})
            if default_source and "source" not in value:
                value = dict(value, source=default_source)
            missing = [k for k in ("text", "source") if not isinstance(value.get(k), str) or not value[k].strip()]
            if missing:
                problems.append(f"line {number}: missing or empty {', '.join(repr(k) for k in missing)}: "
                                "each line is {\"text\": …, \"source\": …, \"sent_at\": … (optional)}")
            elif unknown:
                problems.append(f"line {number}: unknown field(s) {unknown}: a bare message has text, source, "
                                "sent_at and id only")
            else:
                items.append(value)
    if problems:
        shown = problems[:20] + ([f"… and {len(problems) - 20} more"] if len(problems) > 20 else [])
        fail(f"{path}: {len(problems)} bad line(s); nothing was remembered. Fix them and run again:\n  "
             + "\n  ".join(shown))
    return items


def remember(
    text: Optional[str] = typer.Argument(None, help="The message exactly as it arrived."),
    source: Optional[str] = typer.Option(
        None, "--source",
        help="Who it came from: a stored source id, or a new source's path (layers, then id: person/self/chat/maya-chat)."),
    at: Optional[str] = at_option("When it was sent (ISO 8601); default now."),
    file: Optional[str] = typer.Option(
        None, "--file", help="A JSON Lines file of bare messages {\"text\", \"source\", \"sent_at\"} (- for stdin)."),
    keep: bool = flag(False, "--keep",
                      help="When a model fails, keep the message as pending for `doxa organize`."),
    conversation: Optional[str] = typer.Option(
        None, "--conversation",
        help="A conversation file: a LongMemEval record or list of records, or JSON Lines of turns "
             "{\"session\", \"date\", \"role\", \"content\"} (docs/formats.md)."),
    keep_only: bool = flag(False, "--keep-only",
                           help="With --conversation: keep every turn, call no model (`doxa answer` reads them later)."),
    window: int = typer.Option(10, "--window", min=1,
                               help="With --conversation: the most user turns per organizer call (within a session)."),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """Keep a raw message; the organizer links it to questions, the reader reads it; print what changed.

    --conversation FILE keeps a whole conversation (every turn, dated by its session) and organizes the
    user's turns a window at a time; --keep-only keeps it with no model call.

    The model servers come from DOXA_ORGANIZER_URL / DOXA_READER_URL (docs/organizer.md). Without one the
    message is kept as pending and `doxa organize` finishes it later.
    """
    from doxa.cli.common import emit_json, fail, guarded, open_memory
    from doxa.inference.agent import tools
    from doxa.inference.agent.remember import remember, remember_many

    given = [x for x in (text, file, conversation) if x is not None]
    if len(given) != 1:
        fail("give the message TEXT with --source, or --file FILE of messages, or --conversation FILE (one of them)", 2)
    if keep_only and conversation is None:
        fail("--keep-only goes with --conversation FILE (a single message without a model is kept as pending)", 2)
    if conversation is not None:  # the file is read whole before the store is opened: a bad one writes nothing
        from doxa.inference.agent.conversation import load_sessions

        sessions = guarded(lambda: load_sessions(conversation))
        _remember_conversation(open_memory(db, must_exist=False), sessions, keep_only, window, as_json)
        return
    mem = open_memory(db, must_exist=False)
    if file is None:
        if not source:
            fail("--source is required: a stored source id, or a new source's path such as person/self/chat/maya-chat", 2)
        if as_json:
            emit_json(guarded(lambda: tools.remember(mem, text, source, at, keep)))
        else:
            _render([guarded(lambda: remember(mem, text, source=source, sent_at=at, keep_on_failure=keep))])
        return
    items = _read_messages(file, source)
    if as_json or not _terminal():
        results = guarded(lambda: remember_many(mem, items, keep_on_failure=keep))
    else:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("remembering", total=len(items))
            results = guarded(lambda: remember_many(mem, items, keep_on_failure=keep,
                                                    progress=lambda done, total: bar.update(task, completed=done)))
    if as_json:
        emit_json({"messages": len(results), "calls": _calls(results), "results": [r.to_dict() for r in results]})
    else:
        _render(results)


def _remember_conversation(mem, sessions, keep_only: bool, window: int, as_json: bool) -> None:
    from doxa.cli.common import emit_json, guarded
    from doxa.inference.agent.conversation import remember_conversation

    if as_json or not _terminal() or keep_only:
        result = guarded(lambda: remember_conversation(mem, sessions, keep_only=keep_only, window=window))
    else:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("organizing", total=None)
            result = guarded(lambda: remember_conversation(
                mem, sessions, keep_only=keep_only, window=window,
                progress=lambda done, total: bar.update(task, completed=done, total=total)))
    if as_json:
        emit_json(result.to_dict())
        return
    from doxa.cli.console import console

    con = console()
    con.print(f"{result.sessions} session(s), {result.turns} turn(s) ({result.user_turns} from the user): "
              f"{result.messages_added} new message(s) kept.")
    if keep_only:
        con.print("[dim]No model called (--keep-only): `doxa answer` reads the kept turns when asked.[/]")
        return
    if result.windows:
        con.print(f"Organized {result.organized_turns} turn(s) in {result.windows} window(s) "
                  f"({result.skipped_turns} skipped: nothing to track); "
                  f"{len(result.questions_created)} new question(s), {len(result.questions_linked)} linked, "
                  f"{result.readings} reading(s).")
    for question, values in result.values_added.items():
        con.print(f"  {_e(question)}: " + ", ".join(_e(v) for v in values))
    con.print(f"[dim]model calls: organizer {result.organizer.calls} ({result.organizer.seconds:.1f} s), "
              f"reader {result.reader.calls} ({result.reader.seconds:.1f} s)[/]")
    if result.hint:
        con.print(f"[yellow]{_e(result.hint)}[/]")


def organize(
    limit: int = limit_option(0, min=0, help="Process at most this many pending messages (0: all)."),
    maintain: bool = flag(False, "--maintain", "Only maintenance instead: propose merges of duplicate questions "
                                               "and splits of questions whose answers keep being true together "
                                               "(by rule, no model; `doxa ops --proposed` lists them)."),
    apply_above: Optional[float] = typer.Option(
        None, "--apply-above", min=0.0, max=1.0, help="With --maintain: apply the proposals scoring at least this."),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """Finish the messages `remember` kept pending: organize them, read them, print what changed.

    `--maintain` proposes merges of duplicate questions and splits instead (by rule, no model)."""
    from doxa.cli.common import emit_json, fail, guarded, open_memory

    if maintain:
        from doxa.cli.organizer_cmds import maintain as run_maintenance

        run_maintenance(db, as_json, apply_above)
        return
    if apply_above is not None:
        fail("--apply-above applies maintenance's proposals: give it with --maintain", 2)
    from doxa.data.remembered import count_pending
    from doxa.inference.agent.remember import organize_pending

    mem = open_memory(db)
    total = count_pending(mem.store)
    if as_json or not _terminal() or not total:
        results = guarded(lambda: organize_pending(mem, limit=limit or None))
    else:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("organizing", total=min(total, limit) if limit else total)
            results = guarded(lambda: organize_pending(mem, limit=limit or None,
                                                       progress=lambda d, t: bar.update(task, completed=d)))
    left = count_pending(mem.store)
    if as_json:
        emit_json({"pending_before": total, "pending_after": left, "calls": _calls(results),
                   "results": [r.to_dict() for r in results]})
        return
    if not total:
        typer.echo("Nothing pending: every remembered message is organized and read.")
        return
    _render(results)
    typer.echo(f"{total - left} of {total} pending message(s) finished; {left} still pending.")


def _terminal() -> bool:
    return sys.stderr.isatty()


def _calls(results) -> dict[str, int]:
    return {"organizer": sum(r.calls["organizer"] for r in results), "reader": sum(r.calls["reader"] for r in results)}


def _render(results) -> None:
    from doxa.cli.console import console

    con = console()
    for r in results:
        head = f"[bold]{_e(r.message)}[/] from {_e(r.source)} ({r.sent_at[:10]})"
        if r.status == "already":
            con.print(f"{head}: already remembered, nothing new.")
            continue
        if r.error:
            con.print(f"{head}: [red]{_e(r.error)}[/]")
            continue
        parts = []
        if r.linked:
            parts.append("linked " + ", ".join(_e(q) for q in r.linked))
        if r.created:
            parts.append("new question(s) " + ", ".join(_e(q) for q in r.created))
        for question, values in r.values_added.items():
            parts.append(f"new value(s) for {_e(question)}: " + ", ".join(_e(v) for v in values))
        if r.new_subjects:
            parts.append("new subject(s) " + ", ".join(_e(s) for s in r.new_subjects))
        nothing = "kept, pending" if r.status == "pending" and not parts else "nothing to track"
        con.print(f"{head}: " + ("; ".join(parts) if parts else nothing)
                  + (f" [dim](instructions v{r.instructions_version})[/]" if r.instructions_version else ""))
        for c in r.changed:
            before = answers_text(c.before) if c.before is not None else "new"
            con.print(f"  {_e(c.question)}: {_e(before)}  →  [bold]{_e(answers_text(c.after))}[/]")
        if r.hint:
            con.print(f"  [yellow]{_e(r.hint)}[/]")
    calls = _calls(results)
    con.print(f"[dim]{len(results)} message(s) · model calls: organizer {calls['organizer']}, "
              f"reader {calls['reader']}[/]")
