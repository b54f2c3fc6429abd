"""Commands for what a task needs to know and for the organizer's operations.

`context`, `search`, `ask`, and the organizer's verbs `merge`, `split`, `undo`,
`replay`, `ops`. Registered by cli/main.py through :func:`register`. Every import
beyond typer happens inside a command, so `doxa belief` starts no slower for them.
"""

from __future__ import annotations

from typing import Optional

import typer

from doxa.cli.common import emit_json, fail, guarded, json_lines, markup_safe as _e, memory_at, open_memory
from doxa.cli.console import console
from doxa.cli.options import AtOption, DbOption, JsonOption, act_at_option, by_option, flag, limit_option
from doxa.cli.terminal import printable
ByOption = by_option("Who does this (recorded with the operation).")




def _bar(p: float, width: int = 20) -> str:
    return "█" * int(round(p * width))


def _answers(answers: dict[str, float]) -> str:
    return "  ".join(f"{o} {p:.2f}" for o, p in sorted(answers.items(), key=lambda kv: -kv[1]))


def _pairs(text: Optional[str], what: str) -> dict[str, str]:
    """'a=b,c=d' → {'a': 'b', 'c': 'd'}."""

    out: dict[str, str] = {}
    for piece in (text or "").split(","):
        if not piece.strip():
            continue
        if "=" not in piece:
            fail(f"{what}: {piece!r} is not OLD=NEW; write e.g. {what} 'yes=vegetarian,no=eats fish'", 2)
        old, new = piece.split("=", 1)
        out[old.strip()] = new.strip()
    return out


def _read_jsonl(path: str, what: str) -> list[dict]:

    records = []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, value, problem in json_lines(handle):
                if problem:
                    fail(f"{path} line {number}: {problem}: {what} is one JSON object a line")
                if not isinstance(value, dict):
                    fail(f"{path} line {number}: expected a JSON object")
                records.append(value)
    except FileNotFoundError:
        fail(f"no such file: {path}")
    return records


def _new_op_id(store, base: str) -> str:
    from doxa.data.organizer import operations

    taken = {op["id"] for op in operations(store)}
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def register(app: typer.Typer) -> None:
    @app.command()
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

    @app.command()
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

    @app.command()
    def ask(
        question: str = typer.Argument(..., help="The question in words, e.g. \"Does Maya have allergies?\"."),
        subject: str = typer.Option(..., "--subject", help="Whom it is about (subject id)."),
        options: str = typer.Option(..., "--options", help="The possible answers, comma-separated: yes,no."),
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
        answers = [o for o in options.split(",")]

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

    @app.command()
    def merge(
        duplicate: str = typer.Argument(..., help="The duplicate question: it becomes status 'merged'."),
        into: str = typer.Option(..., "--into", help="The question it joins: it keeps the evidence of both."),
        option_map: Optional[str] = typer.Option(
            None, "--map", help="Duplicate's option=kept question's option, comma-separated "
                                "(same-named options map by themselves)."),
        op_id: Optional[str] = typer.Option(None, "--id", help="Operation id (default: merge-DUP-into-INTO)."),
        by: str = ByOption,
        db: Optional[str] = DbOption,
        as_json: bool = JsonOption,
    ):
        """Merge a duplicate question into another; `doxa undo OP` reverses it exactly."""

        mem = open_memory(db)
        record = {"type": "question_merge", "id": op_id or _new_op_id(mem.store, f"merge-{duplicate}-into-{into}"),
                  "into": into, "from": duplicate, "by": by}
        mapping = _pairs(option_map, "--map")
        if mapping:
            record["option_map"] = mapping
        _apply(mem, record, [into], as_json)

    @app.command()
    def split(
        question: str = typer.Argument(..., help="The question to split: it becomes status 'split'."),
        into: str = typer.Option(..., "--into", help="JSON Lines file of the new question records."),
        assign: Optional[str] = typer.Option(
            None, "--assign", help="MESSAGE=NEW_QUESTION pairs, comma-separated: carry that message's "
                                   "readings to the new question."),
        option_map: Optional[list[str]] = typer.Option(
            None, "--map", help="NEW_QUESTION:old=new,old=new (repeatable); same-named options map by themselves."),
        readings: Optional[str] = typer.Option(None, "--readings",
                                               help="JSON Lines file of new reading records for the new questions."),
        op_id: Optional[str] = typer.Option(None, "--id", help="Operation id (default: split-QUESTION)."),
        by: str = ByOption,
        db: Optional[str] = DbOption,
        as_json: bool = JsonOption,
    ):
        """Split one question into several; readings follow --assign and --readings."""

        mem = open_memory(db)
        new_questions = _read_jsonl(into, "a question record")
        if not new_questions:
            fail(f"{into} holds no question records: a split needs the new questions")
        assigned: dict[str, list[str]] = {}
        for message, target in _pairs(assign, "--assign").items():
            assigned.setdefault(message, []).append(target)
        maps: dict[str, dict[str, str]] = {}
        for item in option_map or []:
            if ":" not in item:
                fail(f"--map {item!r}: write NEW_QUESTION:old=new,old=new", 2)
            qid, pairs = item.split(":", 1)
            maps[qid.strip()] = _pairs(pairs, "--map")
        record = {"type": "question_split", "id": op_id or _new_op_id(mem.store, f"split-{question}"),
                  "question": question, "into": new_questions, "assign": assigned, "by": by}
        if maps:
            record["option_map"] = maps
        if readings:
            record["readings"] = _read_jsonl(readings, "a reading record")
        _apply(mem, record, [q.get("id") for q in new_questions], as_json)

    @app.command()
    def undo(
        op: str = typer.Argument(..., help="The operation to undo (`doxa ops` lists them)."),
        by: str = ByOption,
        db: Optional[str] = DbOption,
        as_json: bool = JsonOption,
    ):
        """Reverse one organizer operation exactly (a later one that depends on it must be undone first)."""
        from doxa.data.organizer import operations

        mem = open_memory(db)
        target = next((o for o in operations(mem.store) if o["id"] == op), None)
        if target is None:
            fail(f"no organizer operation {op!r}: `doxa ops` lists them")
        _apply(mem, {"type": "undo", "op": op, "by": by}, target["questions"], as_json)

    @app.command()
    def ops(
        db: Optional[str] = DbOption,
        as_json: bool = JsonOption,
    ):
        """Every organizer operation (merge, split, undo): who, when, and whether it was undone."""
        from doxa.data.organizer import operations

        mem = open_memory(db)
        found = operations(mem.store)
        if as_json:
            emit_json(found)
            return
        if not found:
            typer.echo("No organizer operations yet.")
            return
        from rich.table import Table

        table = Table(title=f"{len(found)} organizer operation(s)")
        for name in ("id", "op", "questions", "by", "at", "undone"):
            table.add_column(name, overflow="fold")
        for o in found:
            what = ", ".join(o["questions"]) if o["op"] != "undo" else f"undoes {o['record'].get('op')}"
            table.add_row(_e(o["id"]), o["op"], _e(what), _e(o["by"]), f"{o['at']:%Y-%m-%d %H:%M}",
                          "yes" if o["undone"] else "")
        console().print(table)

    @app.command()
    def replay(
        questions: str = typer.Argument(..., help="JSON Lines file of the question records to rebuild under."),
        to: str = typer.Option(..., "--to", help="Path of the new store (must not exist)."),
        from_map: Optional[str] = typer.Option(
            None, "--from", help="NEW_ID=OLD_ID pairs, comma-separated: carry an old question's readings "
                                 "to a new id (default: the same id)."),
        read: bool = flag(False, "--read", "Have the configured reader read kept messages for "
                                           "new questions nothing carried to."),
        limit: int = limit_option(20, min=1, help="With --read: messages read per question."),
        db: Optional[str] = DbOption,
        as_json: bool = JsonOption,
    ):
        """Rebuild a store from the kept evidence under another set of questions."""
        from doxa.data.replay import replay as run
        from doxa.inference.read.memory import Memory

        mem = open_memory(db)
        records = _read_jsonl(questions, "a question record")
        target, report = guarded(lambda: run(mem.store, to, records, from_questions=_pairs(from_map, "--from")))
        if read and report["unread"]:
            from doxa.inference.agent.ask import NO_READER_HINT, read_question
            from doxa.inference.agent.readers import reader_from_env

            reader = reader_from_env()
            if reader is None:
                target.close()
                fail(NO_READER_HINT.format(question="the new questions"))
            new_mem = Memory(target)
            report["read"] = {}
            for qid in report["unread"]:
                result = guarded(lambda: read_question(new_mem, qid, reader, limit=limit))
                report["read"][qid] = len(result.readings)
        target.close()
        if as_json:
            emit_json(report)
            return
        typer.echo(f"Rebuilt {printable(to)}: {report['questions']} question(s); copied "
                   + ", ".join(f"{n} {t}" for t, n in report["copied"].items()))
        for qid, n in report["carried_readings"].items():
            read_n = report.get("read", {}).get(qid)
            extra = f", {read_n} read now" if read_n is not None else ""
            typer.echo(f"  {printable(qid)}: {n} reading(s) carried{extra}")
        if report["unread"] and not read:
            typer.echo("Nothing carried to: " + printable(", ".join(report["unread"]))
                       + ". Run again with --read (and a reader configured) to read kept messages for them.")


def _apply(mem, record: dict, show: list[str], as_json: bool) -> None:
    """Ingest one organizer record and show the beliefs it touched."""

    added = guarded(lambda: mem.ingest([record]))
    active = [q for q in show if q and _active(mem, q)]
    beliefs = mem.beliefs(question_ids=active) if active else []
    op = record.get("id") or f"undo:{record['op']}"
    if as_json:
        emit_json({"op": op, "record": record, "added": added, "beliefs": [b.to_dict() for b in beliefs]})
        return
    con = console()
    verb = {"question_merge": "Merged", "question_split": "Split", "undo": "Undid"}[record["type"]]
    what = record.get("from") or record.get("question") or record.get("op")
    if not added:
        con.print(f"Nothing to do: operation {_e(repr(op))} is already recorded.")
    else:
        con.print(f"{verb} {_e(what)} (operation [bold]{_e(op)}[/]; `doxa undo {_e(op)}` reverses it)."
                  if record["type"] != "undo" else f"{verb} {_e(what)}.")
    for b in beliefs:
        con.print(f"  {_e(b.question)}: {_e(_answers(b.answers))}" + ("" if b.act else "  [yellow]ask[/]"))


def _active(mem, question_id: str) -> bool:
    try:
        return mem.store.question(question_id)["status"] == "active"
    except Exception:
        return False


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
        _indented(con, _answers(q.answers), 6)
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
