"""The organizer's verbs: `merge`, `split`, `add-option`, `open`, `undo`, `ops`, `replay`, and
`organizer-instructions`.

`merge`, `split`, `add-option`, `open` and `undo` record an organizer operation on the questions (and
`ops` lists them; `ops --proposed`, `ops apply ID` and `ops dismiss ID` review the merges and splits that
`organize --maintain`, through :func:`maintain` here, proposes);
`replay` rebuilds a store under another set of questions; `organizer-instructions` shows and
versions the text the organizer follows, lists the cases its decisions are judged by (`cases`), and
searches for a better text on them (`search`).
Registered by cli/main.py through :func:`register`.
Every import beyond typer and doxa.cli happens inside a command, so `doxa belief` starts no
slower for them.
"""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from doxa.cli.common import answers_text, emit_json, fail, guarded, json_lines, markup_safe as _e, open_memory, \
    utf8_input
from doxa.cli.console import console
from doxa.cli.options import Commands, DbOption, JsonOption, at_option, by_option, flag, limit_option
from doxa.cli.terminal import printable

ByOption = by_option("Who does this (recorded with the operation).")

#: `doxa organizer-instructions …`: the organizer's instructions, one sub-command per verb.
instructions = Commands(help="The organizer's instructions: a versioned text in the store (show, set, "
                             "history, diff, rollback), the cases that show its mistakes (cases), and a "
                             "search for a better text scored on them (search).",
                        no_args_is_help=True)


def register(app: typer.Typer) -> None:
    for command in (merge, split, add_option, undo, ops, replay):
        app.command()(command)
    app.command("open")(open_question)
    app.add_typer(instructions, name="organizer-instructions")


# ---------------------------------------------------------------------------- operations on questions
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


OpAt = at_option("When (ISO 8601); default now.")


def add_option(
    question: str = typer.Argument(..., help="An open question's id."),
    value: str = typer.Argument(..., help="The value to add to its options (appended; never 'unlisted')."),
    at: Optional[str] = OpAt,
    by: str = ByOption,
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """Add a value to an open question's options (`doxa undo OP` removes it while nothing names it)."""
    mem = open_memory(db)
    _show_change(guarded(lambda: mem.add_option(question, value, by=by, at=at)), as_json)


def open_question(
    question: str = typer.Argument(..., help="A closed choice question's id."),
    at: Optional[str] = OpAt,
    by: str = ByOption,
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """Open a closed choice question: values may be added to its options from now on."""
    mem = open_memory(db)
    _show_change(guarded(lambda: mem.open_question(question, by=by, at=at)), as_json)


def _show_change(change, as_json: bool) -> None:
    if as_json:
        emit_json(change.to_dict())
        return
    typer.echo(printable(change.message))
    typer.echo(f"  {printable(change.record['question'])}: options "
               + (printable(", ".join(change.options)) if change.options else "none yet")
               + ", and unlisted")


def undo(
    op: str = typer.Argument(..., help="The operation to undo (`doxa ops` lists them)."),
    by: str = ByOption,
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """Reverse one organizer operation exactly (a later one that depends on it must be undone first)."""
    from doxa.data.question_ops import operations

    mem = open_memory(db)
    target = next((o for o in operations(mem.store) if o["id"] == op), None)
    if target is None:
        fail(f"no organizer operation {op!r}: `doxa ops` lists them")
    _apply(mem, {"type": "undo", "op": op, "by": by}, target["questions"], as_json)


def ops(
    action: Optional[str] = typer.Argument(
        None, metavar="ACTION", help="apply or dismiss: decide one of maintenance's proposals "
                                     "(`doxa ops --proposed` lists them). Leave out to list the operations done."),
    proposal: Optional[str] = typer.Argument(None, metavar="ID", help="With apply or dismiss: the proposal's id."),
    proposed: bool = flag(False, "--proposed", "List maintenance's proposals (`doxa organize --maintain`) "
                                               "instead of the operations done."),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """Every organizer operation (merge, split, option_added, open, undo): who, when, and whether it was undone.

    `--proposed` lists maintenance's proposals; `doxa ops apply ID` applies one, `doxa ops dismiss ID` dismisses it."""
    from doxa.data.question_ops import operations

    if action is not None or proposal is not None:
        if action not in ("apply", "dismiss") or proposal is None or proposed:
            fail("write `doxa ops apply ID` or `doxa ops dismiss ID` (ids from `doxa ops --proposed`), "
                 "or `doxa ops` alone for the operations done", 2)
        _decide(action, proposal, db, as_json)
        return
    mem = open_memory(db)
    if proposed:
        _show_proposals(mem, as_json)
        return
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


# ---------------------------------------------------------------------------- maintenance's proposals
def _proposal_line(p) -> str:
    record = p.record
    if p.op == "question_merge":
        what = f"merge {record['from']} into {record['into']}"
    else:
        what = f"split {record['question']} into " + ", ".join(q["id"] for q in record["into"])
    return what


def _show_proposals(mem, as_json: bool) -> None:
    from doxa.inference.agent.maintenance import proposals

    found = proposals(mem)
    if as_json:
        emit_json([p.to_dict() for p in found])
        return
    if not found:
        typer.echo("No proposals: `doxa organize --maintain` looks for duplicate questions and questions to split.")
        return
    waiting = sum(p.status == "proposed" for p in found)
    con = console()
    con.print(f"{len(found)} proposal(s), {waiting} waiting for a decision:")
    for p in found:
        _print_proposal(con, p, p.status + (", undone since" if p.undone else ""))
    if waiting:
        con.print("`doxa ops apply ID` applies one (`doxa undo OP` reverses it); `doxa ops dismiss ID` dismisses it.")


def _print_proposal(con, p, status: str) -> None:
    con.print(f"[bold]{_e(p.id)}[/]  score {p.score:.2f}  {status}: {_e(_proposal_line(p))}")
    for reason in p.reasons:
        con.print(f"  · {_e(reason)}")


def _decide(action: str, pid: str, db: Optional[str], as_json: bool) -> None:
    """`doxa ops apply ID` / `doxa ops dismiss ID`."""
    from doxa.inference.agent import maintenance

    mem = open_memory(db)
    if action == "dismiss":
        found = guarded(lambda: maintenance.dismiss(mem, pid))
        if as_json:
            emit_json(found.to_dict())
        else:
            typer.echo(f"Dismissed {printable(pid)}: maintenance will not propose it again.")
        return
    done = guarded(lambda: maintenance.apply(mem, pid))
    _show_applied(mem, [done], as_json)


def _show_applied(mem, applied: list[dict], as_json: bool) -> None:
    """What applying proposals did, and the beliefs of the questions it left active."""
    shown = []
    for done in applied:
        record = done["record"]
        qids = ([record["into"]] if record["type"] == "question_merge" else [q["id"] for q in record["into"]])
        active = [q for q in qids if _active(mem, q)]
        shown.append((done, mem.beliefs(question_ids=active) if active else []))
    if as_json:  # one proposal (`doxa ops apply ID`)
        done, beliefs = shown[0]
        emit_json(dict(done, beliefs=[b.to_dict() for b in beliefs]))
        return
    con = console()
    for done, beliefs in shown:
        con.print(f"Applied {_e(done['proposal'])} (operation [bold]{_e(done['op'])}[/]; "
                  f"`doxa undo {_e(done['op'])}` reverses it).")
        for b in beliefs:
            con.print(f"  {_e(b.question)}: {_e(answers_text(b.answers))}" + ("" if b.act else "  [yellow]ask[/]"))


def maintain(db: Optional[str], as_json: bool, apply_above: Optional[float]) -> None:
    """`doxa organize --maintain [--apply-above P]`: propose merges and splits by rule (no model), and apply
    those scoring at least P."""
    from doxa.inference.agent.maintenance import maintain as run

    mem = open_memory(db)
    result = guarded(lambda: run(mem, apply_above=apply_above))
    if as_json:
        emit_json(result.to_dict())
        return
    con = console()
    if not result.proposed and not result.applied:
        con.print("Nothing to propose: no duplicate questions, no answers that keep being true together"
                  + (f" ({len(result.decided)} found again, decided before)." if result.decided else "."))
    for p in result.proposed:
        _print_proposal(con, p, "new" if p.id in result.new else "proposed before")
    if result.applied:
        _show_applied(mem, result.applied, False)
    for item in result.not_applied:
        con.print(f"[yellow]Not applied {_e(item['id'])}[/]: {_e(item['error'])}")
    if result.proposed:
        con.print("Review: `doxa ops --proposed`; `doxa ops apply ID` applies one (`doxa undo OP` reverses it), "
                  "`doxa ops dismiss ID` dismisses it.")


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
    from doxa.data.question_ops import operations

    taken = {op["id"] for op in operations(store)}
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


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
        con.print(f"  {_e(b.question)}: {_e(answers_text(b.answers))}" + ("" if b.act else "  [yellow]ask[/]"))


def _active(mem, question_id: str) -> bool:
    try:
        return mem.store.question(question_id)["status"] == "active"
    except Exception:
        return False


# ---------------------------------------------------------------------------- organizer-instructions
@instructions.command("show")
def show_instructions(version: Optional[int] = typer.Option(None, "--version",
                                                            help="An older version (default: current)."),
                      db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """Print the instructions the organizer follows now (or an older version)."""
    from doxa.data import organizer_instructions

    mem = open_memory(db, must_exist=False)
    found = guarded(lambda: organizer_instructions.get(mem.store, version) if version
                    else organizer_instructions.current(mem.store))
    if as_json:
        emit_json(found.to_dict())
        return
    typer.echo(f"# organizer instructions, version {found.version} (set {found.set_at:%Y-%m-%d %H:%M} by "
               f"{printable(found.set_by)}{': ' + printable(found.note) if found.note else ''})")
    typer.echo(printable(found.text, multiline=True), nl=not found.text.endswith("\n"))


@instructions.command("set")
def set_instructions(file: Optional[str] = typer.Argument(None, help="A text file with the new instructions "
                                                                     "(- for stdin)."),
                     default: bool = flag(False, "--default", help="Adopt this doxa's built-in text."),
                     note: str = typer.Option("", "--note", help="Why (kept with the version)."),
                     by: str = by_option("Who sets it."),
                     db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """Make a new version of the instructions (the old ones stay: `rollback` returns to one)."""
    from doxa.data import organizer_instructions

    if (file is None) == (not default):
        fail("give a FILE with the new text, or --default for the built-in one", 2)
    if default:
        text = organizer_instructions.built_in_text(organizer_instructions.ORGANIZER)
    else:
        try:
            with utf8_input(file):
                text = sys.stdin.read() if file == "-" else open(file, encoding="utf-8").read()
        except FileNotFoundError:
            fail(f"no such file: {file}")
    mem = open_memory(db, must_exist=False)
    found, added = guarded(lambda: organizer_instructions.set_text(mem.store, text, by=by, note=note))
    if as_json:
        emit_json({"added": added, "current": found.to_dict()})
    elif added:
        typer.echo(f"Organizer instructions: version {found.version} is current "
                   f"(`doxa organizer-instructions diff {found.version - 1} {found.version}` shows the change).")
    else:
        typer.echo(f"Unchanged: version {found.version} already has this text.")


@instructions.command("history")
def instructions_history(db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """Every version: when, by whom, why, and how many questions it created."""
    from doxa.data import organizer_instructions

    mem = open_memory(db, must_exist=False)
    versions = organizer_instructions.history(mem.store)
    made = organizer_instructions.questions_by_version(mem.store)
    if as_json:
        emit_json([dict(v.to_dict(), questions_created=made.get(v.version, 0)) for v in versions])
        return
    for v in versions:
        typer.echo(f"v{v.version}  {v.set_at:%Y-%m-%d %H:%M}  {printable(v.set_by)}  "
                   f"{made.get(v.version, 0)} question(s)" + (f"  — {printable(v.note)}" if v.note else ""))


@instructions.command("diff")
def instructions_diff(old: int = typer.Argument(..., help="Version to compare from."),
                      new: int = typer.Argument(..., help="Version to compare to."),
                      db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """The change between two versions, as a unified diff."""
    from doxa.data import organizer_instructions

    mem = open_memory(db, must_exist=False)
    text = guarded(lambda: organizer_instructions.diff(mem.store, old, new))
    if as_json:
        emit_json({"from": old, "to": new, "diff": text})
    else:
        typer.echo(printable(text, multiline=True) or f"Versions {old} and {new} have the same text.",
                   nl=not text.endswith("\n"))


@instructions.command("rollback")
def roll_back_instructions(version: int = typer.Argument(..., help="The version whose text becomes current again."),
                           by: str = by_option("Who rolls back."),
                           db: Optional[str] = DbOption, as_json: bool = JsonOption):
    """Make an older version's text current again, as a new version (history is kept)."""
    from doxa.data import organizer_instructions

    mem = open_memory(db, must_exist=False)
    found, added = guarded(lambda: organizer_instructions.roll_back(mem.store, version, by=by))
    if as_json:
        emit_json({"added": added, "current": found.to_dict()})
    elif added:
        typer.echo(f"Rolled back: version {found.version} has the text of version {version}.")
    else:
        typer.echo(f"Unchanged: the current version already has the text of version {version}.")


#: ``--cases FILE`` of ``cases`` and ``search``.
CasesFileOption = typer.Option(None, "--cases", help="A JSON Lines file of gold cases to add to the store's "
                                                     "(docs/formats.md, \"Organizer cases\"; bench/organizer.py "
                                                     "writes one from a generated world's truth).")


def _case_file(path: Optional[str]) -> list:
    """The cases of ``--cases FILE`` (none without it); a bad file exits 2 naming its line and field."""
    from doxa.inference.agent.instruction_search import CaseFileError, read_cases

    if path is None:
        return []
    try:
        return read_cases(path)
    except CaseFileError as err:
        fail(str(err), 2)


@instructions.command("cases")
def instructions_cases(case_file: Optional[str] = CasesFileOption, db: Optional[str] = DbOption,
                       as_json: bool = JsonOption):
    """The organizer's mistakes as cases: what people, the world and the checkers said after it, each with
    the decision it concerns and the decision expected (docs/organizer.md, "Mistakes collected")."""
    from doxa.inference.agent.organizer_memory import cases

    extra = _case_file(case_file)
    mem = open_memory(db)
    found = guarded(lambda: cases(mem.store)) + extra
    if as_json:
        emit_json([c.to_dict() for c in found])
        return
    if not found:
        typer.echo("No cases: nothing the organizer decided was merged, split, undone, withdrawn or dismissed, "
                   "and no checker found a mistake.")
        return
    con = console()
    con.print(f"{len(found)} case(s):")
    for c in found:
        decision = f"decision {c.decision[:12]}" if c.decision else "no decision kept"
        con.print(f"[bold]{_e(c.id)}[/]  {c.source}, {decision}: {_e(c.observed)}")
        con.print(f"  expected: {_e(json.dumps(c.expected, ensure_ascii=False))}"
                  + (f"  messages: {_e(', '.join(c.messages))}" if c.messages else ""))


@instructions.command("search")
def instructions_search(
    rounds: int = typer.Option(3, "--rounds", min=1, max=50, help="Rounds of proposals (each revises the best "
                                                                  "kept text of the round before)."),
    candidates: int = typer.Option(3, "--candidates", min=1, max=20, help="Candidate texts proposed per round."),
    max_calls: int = typer.Option(200, "--max-calls", min=0, help="Model calls this run may make, organizer "
                                                                  "replays and proposer together (a hard bound: "
                                                                  "the search stops before passing it; a rerun "
                                                                  "resumes)."),
    proposer_url: Optional[str] = typer.Option(None, "--proposer-url", help="An OpenAI-compatible server for the "
                                                                            "proposer (default DOXA_PROPOSER_URL, "
                                                                            "else the organizer's)."),
    proposer_model: Optional[str] = typer.Option(None, "--proposer-model", help="The proposer's model (default "
                                                                                "DOXA_PROPOSER_MODEL, else the "
                                                                                "organizer's)."),
    proposer_mode: str = typer.Option("rule", "--proposer-mode", help="What the proposer writes: 'rule' (one "
                                                                       "new rule, added by code: what a small "
                                                                       "model can do) or 'rewrite' (the whole "
                                                                       "text, for a stronger model)."),
    activate: bool = flag(False, "--activate", "Make the best kept candidate the active version (`rollback` "
                                               "returns to the old one)."),
    by: str = by_option("Who activates (with --activate).", default="instruction search"),
    case_file: Optional[str] = CasesFileOption,
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
):
    """Propose revised instructions from the cases, score them by replaying the cases through the organizer,
    and keep those that beat the current text on held-out cases (docs/organizer.md, "Instruction search")."""
    from doxa.inference.agent.instruction_proposer import MODES, ProposerError, proposer_from_env
    from doxa.inference.agent.instruction_search import run_search
    from doxa.inference.agent.organizer_client import OrganizerError, organizer_from_env

    extra = _case_file(case_file)
    mem = open_memory(db)
    try:
        organizer = organizer_from_env()
        if proposer_mode not in MODES:
            fail(f"--proposer-mode {proposer_mode!r} is not one of {', '.join(MODES)}: 'rule' adds one rule the "
                 "proposer writes, 'rewrite' takes its whole text", 2)
        proposer = proposer_from_env(url=proposer_url, model=proposer_model, mode=proposer_mode)
    except (OrganizerError, ProposerError) as err:
        fail(str(err), 2)
    if organizer is None or proposer is None:
        fail("instruction search replays the cases through the organizer and asks a proposer for new texts: set "
             "DOXA_ORGANIZER_URL (or DOXA_READER_URL) to an OpenAI-compatible chat server, e.g. "
             "http://127.0.0.1:8080/v1, with DOXA_ORGANIZER_MODEL / DOXA_ORGANIZER_KEY where it needs them "
             "(--proposer-url names another server for the proposer)", 2)
    try:
        result = guarded(lambda: run_search(mem.store, organizer, proposer, rounds=rounds, candidates=candidates,
                                            max_calls=max_calls, activate=activate, by=by,
                                            extra_cases=extra))
    except (OrganizerError, ProposerError) as err:
        fail(f"{err} The search's state is kept: run it again to resume.")
    if as_json:
        emit_json(result.to_dict())
        return
    con = console()
    con.print(_e(result.message))
    cases = result.cases
    con.print(f"Cases: {cases.get('search', 0)} to search on, {cases.get('held_out', 0)} held out, "
              f"{cases.get('pinned', 0)} pinned (right already), {len(cases.get('skipped', []))} not replayable. "
              f"Model calls: {result.calls} this run (of --max-calls {result.max_calls}), {result.calls_total} "
              "in all.")
    for r in result.rounds:
        for c in r["candidates"]:
            con.print(f"  round {r['round']}  [bold]{_e(c['id'])}[/]  {c['status']}: {_e(c['reason'] or '')}")
    best = result.best
    if best is None:
        con.print("No candidate kept: the active instructions stay as they are.")
        return
    con.print(f"Best kept: [bold]{_e(best['id'])}[/] ({_e(best['reason'] or '')}). Its change:")
    typer.echo(printable(best["diff"], multiline=True), nl=not best["diff"].endswith("\n"))
    if result.activated is not None:
        con.print(f"Activated as version {result.activated} (`doxa organizer-instructions rollback "
                  f"{result.base_version}` returns to the old text).")
    else:
        con.print("Not activated: run the search again with --activate (no call: it is done), or save the text "
                  "(`--json`: best.text) and `doxa organizer-instructions set FILE`.")
