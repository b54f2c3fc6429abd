"""`doxa export`: a store written out as the JSON Lines `doxa ingest` takes (docs/formats.md).

The promise: ``doxa ingest`` of a whole export into an empty store gives the same beliefs, the same
explanations and the same parameter versions. Most tables are written as they stand; what the
organizer's operations did is not, because ingest does it again. An export therefore holds the
store *as it was before its operations*, then the operations, in the order they were done:

- a question a split created is no question record: the split's record creates it;
- a question's options are those it was written with (the values ``option_added`` operations and
  merges of open questions appended since are added again by them), and a question opened by a
  ``question_opened`` operation is written closed;
- readings, settlements and rejections a merge or a split carried to another question are left
  out (the operation carries them again), and an instruction a merge re-pointed rests on the
  question it was given for;
- undone operations are written with their undo (ingest does and undoes them again), but for
  those that added values to an open question or opened it (:func:`left_out`): they left nothing
  behind, and are left out with their undo.

Ingest writes the plain records of a file first and runs its operations after them, in line order
(data/writer.py), which is the order above. The operations come before the settlements in the file,
so a settlement that once added a value to an open question finds it added by its own, exported,
``option_added`` (under its own id) and adds nothing of its own.

Every record but the operations and the parameter versions is written by DuckDB (``json_object``),
in batches, so an export of millions of readings never holds them in Python; numbers are written
as the shortest text that reads back as the same double, times to the microsecond.

Not in the format, so not exported: reads (``reads``, the read log), the state of remembered
messages (``remembered``), erasures, maintenance proposals (``proposed_ops``: proposed again by
`doxa organize --maintain`), the organizer's instruction versions (``prompts``), instruction search's
state (``instruction_searches``, ``instruction_candidates``), kept filter states
and the posterior files beside the store; a question's and a subject's ``created_at`` (ingest
dates them at its own time).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, TextIO

from .connection import in_read_session
from .durable import rename_into_place
from .errors import StoreError

if TYPE_CHECKING:
    from .session import Session

#: How times are written: ISO 8601 to the microsecond, UTC without an offset (as the store keeps them).
TIME = "'%Y-%m-%dT%H:%M:%S.%f'"
#: Rows fetched from DuckDB at a time: bounds the memory of an export of any size.
BATCH_ROWS = 50_000
#: Joins the parts of a composite key into one string (no id holds a NUL).
SEP = "chr(0)"
#: The order of the sections of an export (see the module's docstring).
SECTIONS = ("params", "subject", "relation", "source", "question", "message", "reading", "instruction",
            "operations", "settlement", "rejection")


def _t(column: str) -> str:
    return f"strftime({column}, {TIME})"


@dataclass
class _Plan:
    """What the organizer's operations did, read from ``organizer_ops`` (a small table): which rows they
    wrote, and what the questions and instructions were before them."""

    ops: list[dict[str, Any]] = field(default_factory=list)
    created: set[str] = field(default_factory=set)
    readings: list[str] = field(default_factory=list)
    settlements: list[str] = field(default_factory=list)
    rejections: list[str] = field(default_factory=list)
    first_options: dict[str, int] = field(default_factory=dict)
    opened: set[str] = field(default_factory=set)
    rests_on: dict[str, tuple[str, str]] = field(default_factory=dict)


def _key(*parts: Any) -> str:
    return "\x00".join(str(p) for p in parts)


def _at_key(at: str) -> str:
    """A time of an operation's effects (``isoformat``) as :data:`TIME` writes it in SQL."""
    return datetime.fromisoformat(at).strftime("%Y-%m-%dT%H:%M:%S.%f")


def _plan(con) -> _Plan:
    plan = _Plan()
    rows = con.execute("SELECT id, op, body, done_by, done_at, undone FROM organizer_ops").fetchall()
    ops = []
    for op_id, op, body, by, at, undone in rows:
        doc = json.loads(body)
        ops.append({"id": op_id, "op": op, "record": doc["record"], "effects": doc["effects"], "by": by, "at": at,
                    "undone": bool(undone)})
    ops.sort(key=lambda o: o["effects"].get("seq", 0))
    dropped = {o["id"] for o in ops if left_out(o)}
    for o in ops:
        effects = o["effects"]
        if o["id"] in dropped or (o["op"] == "undo" and effects.get("undid") in dropped):
            continue
        plan.ops.append(o)
        if o["op"] == "split":
            plan.created.update(effects.get("created", []))
        if o["op"] == "option_added" and not o["undone"]:
            q = effects["questions"][0]
            plan.first_options[q] = min(plan.first_options.get(q, effects["index"]), effects["index"])
        if o["op"] == "open" and not o["undone"]:
            plan.opened.add(effects["questions"][0])
        if o["op"] not in ("merge", "split") or o["undone"]:
            continue  # what an undone operation wrote is gone already
        if o["op"] == "merge":
            into = o["record"]["into"]
            plan.readings += [_key(m, into, r) for m, r in effects.get("readings", [])]
            plan.settlements += [_key(into, a, _at_key(at)) for a, at in effects.get("settlements", [])]
            plan.rejections += [_key(into, a, _at_key(at)) for a, at in effects.get("rejections", [])]
            if effects.get("added_options"):
                plan.first_options[into] = min(plan.first_options.get(into, effects["added_at"]),
                                               effects["added_at"])
            for iid, question, answer in effects.get("instructions", []):
                plan.rests_on.setdefault(iid, (question, answer))  # the first merge that moved it
        else:
            plan.readings += [_key(m, q, r) for m, q, r in effects.get("readings", [])]
            plan.settlements += [_key(q, a, _at_key(at)) for q, a, at in effects.get("settlements", [])]
            plan.rejections += [_key(q, a, _at_key(at)) for q, a, at in effects.get("rejections", [])]
    return plan


def left_out(op: dict[str, Any]) -> bool:
    """Whether an export leaves out an operation (``{"op", "undone", "effects"}``, as ``organizer_ops``
    keeps it) with its undo: an undone one that added values to an open question or opened it. It left
    nothing behind, and done again on ingest it would not undo: the readings of the export are written
    before the operations run, placed by the values the question ends with, and a value added later
    may stand where the undone one stood, so the undo would find it named."""
    return op["undone"] and (op["op"] in ("option_added", "open")
                             or (op["op"] == "merge" and bool(op["effects"].get("added_options"))))


def _op_record(o: dict[str, Any]) -> dict[str, Any]:
    """An operation's record as stored, with the id it was stored under where that is not the record's
    default (a settlement's ``option_added`` takes the first free one) and the time it was done."""
    record = dict(o["record"])
    default = {"option_added": lambda r: f"option:{r['question']}:{r['option']}",
               "open": lambda r: f"open:{r['question']}", "undo": lambda r: f"undo:{r['op']}"}.get(o["op"])
    if default is not None and record.get("id") is None:
        record.pop("id", None)
        if default(record) != o["id"]:
            record["id"] = o["id"]
    if record.get("at") is None:
        record["at"] = o["at"].isoformat()
    if record.get("by") is None:
        record["by"] = o["by"]
    return record


@dataclass(frozen=True)
class Selection:
    """What an export keeps (docs/formats.md, `doxa export`): everything, or what is about ``subject``,
    or what is dated at or after ``since``, or both."""

    subject: str | None = None
    since: datetime | None = None


class _Writer:
    def __init__(self, out: TextIO):
        self.out = out
        self.counts: dict[str, int] = {}

    def lines(self, record_type: str, lines: Iterable[str]) -> None:
        n = 0
        for line in lines:
            self.out.write(line)
            self.out.write("\n")
            n += 1
        if n:
            self.counts[record_type] = self.counts.get(record_type, 0) + n

    def query(self, con, record_type: str, sql: str, params: dict[str, Any]) -> None:
        cursor = con.execute(sql, {k: v for k, v in params.items() if re.search(rf"\${k}\b", sql)})
        n = 0
        while batch := cursor.fetchmany(BATCH_ROWS):
            self.out.write("\n".join(row[0] for row in batch))
            self.out.write("\n")
            n += len(batch)
        if n:
            self.counts[record_type] = self.counts.get(record_type, 0) + n


@in_read_session
def export(store: "Session", out: TextIO, selection: Selection = Selection()) -> dict[str, int]:
    """Write the records of ``store`` (those ``selection`` keeps) to ``out``, one JSON object a line, in
    the order of :data:`SECTIONS`; returns how many records of each type were written."""
    con = store.con
    subject, since = selection.subject, selection.since
    if subject is not None and not con.execute("SELECT count(*) FROM subjects WHERE id = ?", [subject]).fetchone()[0]:
        close = con.execute("SELECT id FROM subjects ORDER BY jaro_winkler_similarity(id, ?) DESC LIMIT 1",
                            [subject]).fetchone()
        hint = f" (did you mean {close[0]!r}?)" if close else " (the store has no subjects)"
        raise StoreError(f"no subject {subject!r}{hint}: `doxa beliefs` and `doxa context` name the subjects")
    plan = _plan(con)
    p: dict[str, Any] = {
        "subject": subject, "since": since, "created": sorted(plan.created), "carried": plan.readings,
        "carried_s": plan.settlements, "carried_r": plan.rejections, "opened": sorted(plan.opened),
        "first_q": list(plan.first_options), "first_n": list(plan.first_options.values()),
        "moved_i": list(plan.rests_on), "moved_q": [q for q, _ in plan.rests_on.values()],
        "moved_a": [a for _, a in plan.rests_on.values()]}
    # the questions a subject's export is about: every one about it, those its operations created too
    about = "SELECT id FROM questions WHERE subject = $subject" if subject is not None else None
    ops = _selected_ops(con, plan.ops, subject, since)
    split_messages = sorted({m for o in ops if o["op"] == "split"
                             for m in [*o["record"].get("assign", {}), *(r["message"] for r in
                                                                        o["record"].get("readings", []))]})
    p["split_messages"] = split_messages
    after = (lambda column: f"{column} >= $since") if since is not None else (lambda column: "true")

    # the messages kept: about the subject (read for one of its questions, or named by one of its splits)
    messages = "true" if subject is None else (
        f"(m.id IN (SELECT message FROM readings WHERE question IN ({about})) "
        "OR m.id IN (SELECT unnest($split_messages::VARCHAR[])))")
    messages = f"{messages} AND {after('m.sent_at')}"
    kept_messages = f"SELECT m.id FROM messages m WHERE {messages}"

    w = _Writer(out)
    if subject is None:  # parameter versions are the whole store's, about no subject
        rows = con.execute(f"SELECT version, created_at, body FROM params WHERE {after('created_at')} "
                           "ORDER BY version", {"since": since} if since is not None else {}).fetchall()
        w.lines("params", (json.dumps({"type": "params", "version": v, "created_at": c.isoformat(),
                                       "body": json.loads(b)}, ensure_ascii=False) for v, c, b in rows))

    subjects = "true" if subject is None else (
        "(id = $subject OR id IN (SELECT to_id FROM relations WHERE from_id = $subject) "
        "OR id IN (SELECT from_id FROM relations WHERE to_id = $subject))")
    w.query(con, "subject", f"""
        SELECT json_object('type', 'subject', 'id', id, 'name', name, 'aliases', aliases)::VARCHAR FROM subjects
        WHERE {subjects} AND {after('created_at') if subject is None else 'true'} ORDER BY id""", p)
    relations = "true" if subject is None else "(from_id = $subject OR to_id = $subject)"
    if since is not None and subject is None:  # the relations of the subjects exported
        relations = "(from_id IN (SELECT id FROM subjects WHERE created_at >= $since) " \
                    "OR to_id IN (SELECT id FROM subjects WHERE created_at >= $since))"
    w.query(con, "relation", f"""
        SELECT json_object('type', 'relation', 'from', from_id, 'to', to_id, 'kind', kind)::VARCHAR FROM relations
        WHERE {relations} ORDER BY from_id, to_id, kind""", p)
    sources = "true" if subject is None and since is None else f"id IN (SELECT source FROM messages m WHERE {messages})"
    w.query(con, "source", f"""
        SELECT json_object('type', 'source', 'id', id, 'layers', layers, 'trust', trust)::VARCHAR FROM sources
        WHERE {sources} ORDER BY id""", p)
    w.query(con, "question", f"""
        WITH first AS (SELECT unnest($first_q::VARCHAR[]) AS id, unnest($first_n::INTEGER[]) AS n)
        SELECT json_object('type', 'question', 'id', q.id, 'subject', q.subject, 'kind', q.kind, 'text', q.text,
                           'shape', q.shape, 'options', q.options[1:coalesce(first.n, len(q.options))],
                           'created_by', q.created_by, 'instructions_version', q.instructions_version,
                           'open', q.is_open AND q.id NOT IN (SELECT unnest($opened::VARCHAR[]))
               )::VARCHAR
        FROM questions q LEFT JOIN first ON first.id = q.id
        WHERE q.id NOT IN (SELECT unnest($created::VARCHAR[]))
          AND {'q.subject = $subject' if subject is not None else 'true'} AND {after('q.created_at')}
        ORDER BY q.id""", p)
    w.query(con, "message", f"""
        SELECT json_object('type', 'message', 'id', m.id, 'source', m.source, 'sent_at', {_t('m.sent_at')},
                           'received_at', {_t('m.received_at')}, 'text', m.text)::VARCHAR
        FROM messages m WHERE {messages} ORDER BY m.sent_at, m.id""", p)
    w.query(con, "reading", f"""
        SELECT json_merge_patch(json_object('type', 'reading', 'message', r.message, 'question', r.question,
                           'reader', r.reader, 'reader_version', r.reader_version,
                           'probs', to_json(map_from_entries(list_filter(
                                list_zip(q.options[1:len(r.probs)], r.probs), x -> NOT isnan(x[2])))),
                           'unclear', r.unclear, 'unrelated', r.unrelated, 'one_off', r.one_off,
                           'unlisted', r.unlisted),
                           -- a reported change only where there is one: the records of readings without stay as they were
                           CASE WHEN r.changed > 0 THEN json_object('changed', r.changed) ELSE '{{}}'::JSON END)::VARCHAR
        FROM readings r JOIN questions q ON q.id = r.question
        WHERE r.message || {SEP} || r.question || {SEP} || r.reader NOT IN (SELECT unnest($carried::VARCHAR[]))
          AND {f'r.question IN ({about})' if subject is not None else 'true'}
          AND {f'r.message IN ({kept_messages})' if since is not None else 'true'}
        ORDER BY r.message, r.question, r.reader""", p)
    if subject is not None:  # an instruction rests on a question exported with it, or on none
        rests = f"coalesce(moved.q, i.rests_on_question) IN ({about})"
        instructions = f"(i.subject = $subject OR {rests})"
    else:
        rests, instructions = "true", "true"
    w.query(con, "instruction", f"""
        WITH moved AS (SELECT unnest($moved_i::VARCHAR[]) AS id, unnest($moved_q::VARCHAR[]) AS q,
                              unnest($moved_a::VARCHAR[]) AS a)
        SELECT json_object('type', 'instruction', 'id', i.id, 'subject', i.subject, 'text', i.text,
                           'at', {_t('i.given_at')}, 'by', i.given_by,
                           'rests_on', CASE WHEN i.rests_on_question IS NOT NULL AND {rests}
                                            THEN json_object('question', coalesce(moved.q, i.rests_on_question),
                                                             'answer', coalesce(moved.a, i.rests_on_answer)) END
               )::VARCHAR
        FROM instructions i LEFT JOIN moved ON moved.id = i.id
        WHERE {instructions} AND {after('i.given_at')} ORDER BY i.given_at, i.id""", p)
    w.lines("operations", (json.dumps(_op_record(o), ensure_ascii=False) for o in ops))
    questions = f"question IN ({about})" if subject is not None else "true"
    w.query(con, "settlement", f"""
        SELECT json_object('type', 'settlement', 'question', question, 'answer', answer,
                           'at', {_t('settled_at')}, 'how', how, 'by', settled_by, 'note', note,
                           'p_before', p_before, 'params_version', params_version)::VARCHAR
        FROM settlements
        WHERE question || {SEP} || answer || {SEP} || {_t('settled_at')} NOT IN (SELECT unnest($carried_s::VARCHAR[]))
          AND {questions} AND {after('settled_at')}
        ORDER BY settled_at, question, answer""", p)
    w.query(con, "rejection", f"""
        SELECT json_object('type', 'rejection', 'question', question, 'answer', answer,
                           'at', {_t('rejected_at')}, 'by', rejected_by)::VARCHAR
        FROM rejections
        WHERE question || {SEP} || answer || {SEP} || {_t('rejected_at')} NOT IN (SELECT unnest($carried_r::VARCHAR[]))
          AND {questions} AND {after('rejected_at')}
        ORDER BY rejected_at, question, answer""", p)
    counts = dict(w.counts)
    counts.pop("operations", None)
    for o in ops:  # counted by record type, as the file names them
        name = {"merge": "question_merge", "split": "question_split", "open": "question_opened"}.get(o["op"], o["op"])
        counts[name] = counts.get(name, 0) + 1
    return counts


def _selected_ops(con, ops: list[dict[str, Any]], subject: str | None, since: datetime | None) -> list[dict[str, Any]]:
    """The operations an export keeps: about a question of ``subject`` (an undo with the operation it
    undoes), done at or after ``since``."""
    if subject is not None:
        about = {q for (q,) in con.execute("SELECT id FROM questions WHERE subject = ?", [subject]).fetchall()}
        kept = {o["id"] for o in ops if o["op"] != "undo" and about & set(o["effects"].get("questions", []))}
        ops = [o for o in ops if o["id"] in kept or (o["op"] == "undo" and o["effects"].get("undid") in kept)]
    if since is not None:
        ops = [o for o in ops if o["at"] >= since]
    return ops


def export_to_file(store: "Session", path: str | os.PathLike, selection: Selection = Selection()) -> dict[str, int]:
    """:func:`export` into the file ``path``: written under a temporary name beside it and renamed into
    place once whole, so the file is never half an export (an earlier file of that name stays until then)."""
    final = Path(path)
    if final.is_dir():
        raise StoreError(f"{final} is a directory: give the name of the file to write")
    folder = final.parent if str(final.parent) else Path(".")
    if not folder.is_dir():
        raise StoreError(f"{folder} is no folder: create it first, or give another --out")
    handle, temporary = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".part", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as out:
            counts = export(store, out, selection)
        rename_into_place(Path(temporary), final)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return counts


__all__ = ["export", "export_to_file", "left_out", "Selection", "SECTIONS"]
