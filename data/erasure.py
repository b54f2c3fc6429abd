"""Erasure (`doxa forget`): a message, a source or a subject removed with everything derived from it,
and the store file rewritten so that the removed bytes leave the disk.

doxa keeps evidence forever by design; erasure is the one exception, asked for by a person (or a
law). What goes, for each kind (docs/formats.md, "doxa forget", says the same to users):

* ``message ID``: the message; its full-text terms; its readings (on every question, merged and
  split ones included); its ``remembered`` state.
* ``source ID``: every message of the source, as above, and the source itself.

A source is removed only by a ``source`` erasure: one left with no message by another kind stays
(its id may be in use by a writer) and the plan names it (``emptied_sources``).
* ``subject ID``: every question about the subject (any status) with its settlements, rejections,
  read-log rows and kept states; every message with a reading on one of those questions or whose
  text names the subject (its name or an alias, as a whole word); the instructions about the
  subject or resting on its questions; its relations; the subject itself.

And for every kind, what rested only on what goes:

* a question a model created (``instructions_version`` set) that only removed messages bear on — by
  a reading, by ``remember``'s note of the questions a message went to, or by the organizer's kept
  decision that created or linked it (a message organized with no reader has only the last two) —
  with nothing settled, rejected or instructed on it: its text is the model's paraphrase of them;
* a value of an open question that came from the evidence (the question was a model's, or an
  ``option_added`` added the value; a person's own question keeps the values it was written with)
  and only removed messages named (by a reading, or in the organizer's kept decision for them), with
  no remaining message, settlement, rejection or instruction naming it: values are the evidence's
  own words (the later values' operations are renumbered, so they stay undoable);
* read-log rows of removed questions, and those whose top answer is a removed value;
* maintenance proposals (``proposed_ops``) that name a removed message, question or value;
* the organizer's kept decisions (``organizer_decisions``) that hold a removed message's text (a
  window's decision holds every turn it showed: it goes whole), showed, created or linked a removed
  question, showed the removed subject, or quote a removed value;
* the organizer's operations whose record names a removed question or value (they can no longer
  be undone); from the merges and splits that stay, the removed messages (a split's ``assign`` and
  ``readings``, the readings an operation carried), so each still reads as a record of what remains.

Readings that shared a removed message's fingerprint are marked again (the oldest remaining copy
becomes the original), and the evidence epochs move as for a merge, so every kept filter state
and belief-cache entry computed before stops counting: the next read computes beliefs without
the removed evidence. Parameter versions are left as they are — they were learned with it, and
the next `doxa train` learns without it.

All of it runs in one transaction with an ``erasures`` row (what id, when, by whom, why, how
many rows of each table; never content). Deleting rows does not remove their bytes: DuckDB marks
the blocks free and reuses them later. So :func:`rewrite` then copies the store into a fresh file
(``COPY FROM DATABASE``) and renames it over the old one *while the old one is still held*
read-write: no other process can have the old file open (DuckDB admits one writer and no reader
beside it), and any process that opens the path after the rename gets the new file. The old
file's blocks are freed by the file system when the connection closes; what a file system or an
SSD keeps of freed blocks is below what any program can reach (docs/design.md says what to do
about it: an encrypted disk).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from .connection import remove_dead_writers_files
from .durable import fsync_path
from .errors import StoreError
from .evidence import mark_copies_sql
from .organizer_decisions import decisions_naming
from .bookkeeping import mark_evidence_changed
from .session import transaction

KINDS = ("message", "source", "subject")


class ErasureError(StoreError):
    """A forget that cannot run (an unknown id, an unknown kind); nothing was removed."""


@dataclass
class ErasurePlan:
    """What a forget removes, computed in the session that removes it (``doxa forget --dry-run`` prints it)."""

    kind: str
    target: str
    #: the messages removed, in id order
    messages: list[str] = field(default_factory=list)
    #: the questions removed (the subject's, and those that rested only on the removed messages)
    questions: list[str] = field(default_factory=list)
    #: questions that stay but lose readings: their beliefs change
    changed: list[str] = field(default_factory=list)
    #: (question, value) of open-question values only removed readings named
    values: list[tuple[str, str]] = field(default_factory=list)
    #: messages that stay although they hold the same text as a removed one (a copy: forget it by its id too)
    copies: list[str] = field(default_factory=list)
    #: the sources removed (the one a ``source`` erasure names)
    sources: list[str] = field(default_factory=list)
    #: sources that stay with none of their messages left: a source is removed only by name, since its
    #: id may be in use (a writer about to send through it); `doxa forget source ID` removes one
    emptied_sources: list[str] = field(default_factory=list)
    #: rows removed, per table
    counts: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.target, "messages": self.messages, "questions": self.questions,
                "sources": self.sources, "emptied_sources": self.emptied_sources,
                "changed_questions": self.changed,
                "values": [{"question": q, "value": v} for q, v in self.values],
                "copies_kept": self.copies, "removed": self.counts}


def _ids(con, sql: str, params: list[Any] | None = None) -> list[str]:
    return [row[0] for row in con.execute(sql, params or []).fetchall()]


def _known(con, table: str, target: str) -> bool:
    return con.execute(f"SELECT count(*) FROM {table} WHERE id = ?", [target]).fetchone()[0] > 0


def _name_pattern(names: list[str]) -> str | None:
    """A case-insensitive regular expression matching any of ``names`` as whole words (None: no names)."""
    words = [re.escape(n.strip()) for n in names if n and n.strip()]
    return "(?i)(^|[^[:alnum:]_])(" + "|".join(words) + ")($|[^[:alnum:]_])" if words else None


def _gone_messages(con, kind: str, target: str) -> list[str]:
    if kind == "message":
        if not _known(con, "messages", target):
            raise ErasureError(f"no message {target!r}: `doxa search WORDS --json` finds messages and their ids")
        return [target]
    if kind == "source":
        if not _known(con, "sources", target):
            known = _ids(con, "SELECT id FROM sources ORDER BY id LIMIT 8")
            raise ErasureError(f"no source {target!r}: sources are {', '.join(known) or 'none yet'}")
        return _ids(con, "SELECT id FROM messages WHERE source = ? ORDER BY id", [target])
    row = con.execute("SELECT name, aliases FROM subjects WHERE id = ?", [target]).fetchone()
    has_questions = con.execute("SELECT count(*) FROM questions WHERE subject = ?", [target]).fetchone()[0]
    if row is None and not has_questions:
        raise ErasureError(f"no subject {target!r}: `doxa beliefs --json` lists subjects with their questions")
    names = [row[0], *row[1]] if row is not None else []
    pattern = _name_pattern(names)
    named = "OR regexp_matches(m.text, ?)" if pattern else ""
    return _ids(con, f"""SELECT m.id FROM messages m
                         WHERE m.id IN (SELECT r.message FROM readings r JOIN questions q ON q.id = r.question
                                        WHERE q.subject = ?) {named}
                         ORDER BY m.id""", [target, *([pattern] if pattern else [])])


def plan(con: duckdb.DuckDBPyConnection, kind: str, target: str) -> ErasurePlan:
    """What forgetting ``kind`` ``target`` removes. Leaves temporary tables on ``con`` for :func:`erase`
    (which drops them; a caller that only looks calls :func:`drop_plan_tables`)."""
    if kind not in KINDS:
        raise ErasureError(f"cannot forget a {kind!r}: say what to forget — one of {', '.join(KINDS)}")
    if not isinstance(target, str) or not target.strip():
        raise ErasureError(f"give the id of the {kind} to forget")
    found = ErasurePlan(kind, target, messages=_gone_messages(con, kind, target))
    con.execute("CREATE OR REPLACE TEMP TABLE _gone_messages AS SELECT unnest(?::VARCHAR[]) AS id", [found.messages])
    subject_questions = _ids(con, "SELECT id FROM questions WHERE subject = ?", [target]) if kind == "subject" else []
    con.execute(f"CREATE OR REPLACE TEMP TABLE _support AS {_SUPPORT}")
    # a question a model wrote from the removed messages alone (its text paraphrases them)
    only_on = _ids(con, """
        SELECT q.id FROM questions q
        WHERE q.instructions_version IS NOT NULL
          AND EXISTS (SELECT 1 FROM _support s WHERE s.question = q.id AND s.message IN (SELECT id FROM _gone_messages))
          AND NOT EXISTS (SELECT 1 FROM _support s WHERE s.question = q.id
                          AND s.message NOT IN (SELECT id FROM _gone_messages))
          AND NOT EXISTS (SELECT 1 FROM settlements s WHERE s.question = q.id)
          AND NOT EXISTS (SELECT 1 FROM rejections j WHERE j.question = q.id)
          AND NOT EXISTS (SELECT 1 FROM instructions i WHERE i.rests_on_question = q.id)""")
    found.questions = sorted(set(subject_questions) | set(only_on))
    con.execute("CREATE OR REPLACE TEMP TABLE _gone_questions AS SELECT unnest(?::VARCHAR[]) AS id",
                [found.questions])
    found.changed = _ids(con, """SELECT DISTINCT question FROM readings
                                 WHERE message IN (SELECT id FROM _gone_messages)
                                   AND question NOT IN (SELECT id FROM _gone_questions) ORDER BY 1""")
    found.values = _values_only_removed_messages_name(con)
    found.copies = _ids(con, """SELECT id FROM messages WHERE id NOT IN (SELECT id FROM _gone_messages)
                                AND fingerprint IN (SELECT fingerprint FROM messages
                                                    WHERE id IN (SELECT id FROM _gone_messages)) ORDER BY id""")
    found.sources = [target] if kind == "source" else []
    found.emptied_sources = _ids(con, """SELECT DISTINCT source FROM messages WHERE id IN (SELECT id FROM _gone_messages)
                                         AND source NOT IN (SELECT source FROM messages
                                                            WHERE id NOT IN (SELECT id FROM _gone_messages))
                                         AND source <> ? ORDER BY 1""", [target if kind == "source" else ""])
    found.counts = _counts(con, kind, target, found)
    return found


#: (question, message): the messages that bear on each question as the store records it — a reading, the
#: questions ``remember`` noted for the message, the questions the organizer's kept decision for it
#: created or linked (a message organized with no reader has only the last two).
_SUPPORT = """
    SELECT question, message FROM readings
    UNION SELECT unnest(questions), message FROM remembered
    UNION SELECT q, unnest(d.messages) FROM (SELECT unnest(created || linked) AS q, messages FROM organizer_decisions) d
"""

#: (question, value, message): the messages that name each value of an open question — a reading that
#: gives it a number (not NaN), or the organizer's kept decision for the message, whose output names it
#: for a question it created or linked (a window's decision: every turn it showed).
_NAMED = """
    WITH opts AS (SELECT q.id AS question, unnest(q.options) AS value, generate_subscripts(q.options, 1) AS i
                  FROM questions q WHERE q.is_open
                    AND q.id IN (SELECT question FROM _support WHERE message IN (SELECT id FROM _gone_messages))
                    AND q.id NOT IN (SELECT id FROM _gone_questions))
    SELECT o.question, o.value, o.i, r.message FROM opts o JOIN readings r ON r.question = o.question
    WHERE len(r.probs) >= o.i AND NOT isnan(r.probs[o.i])
    UNION
    SELECT o.question, o.value, o.i, unnest(d.messages) FROM opts o JOIN organizer_decisions d
        ON list_contains(d.created || d.linked, o.question) AND contains(d.output, to_json(o.value)::VARCHAR)
"""


def drop_plan_tables(con) -> None:
    """Drop the temporary tables :func:`plan` leaves on ``con``."""
    for table in ("_gone_messages", "_gone_questions", "_support"):
        con.execute(f"DROP TABLE IF EXISTS temp.{table}")


def _values_only_removed_messages_name(con) -> list[tuple[str, str]]:
    """(question, value) of each open question whose value came from the evidence — a model wrote the
    question, or an ``option_added`` added the value (a person's own question keeps the values it was
    written with) —, some removed message named, and nothing that stays names: no remaining message
    (:data:`_NAMED`), settlement, rejection or instruction."""
    rows = con.execute(f"""
        WITH named AS ({_NAMED}),
        tally AS (SELECT question, value, min(i) AS i,
                      bool_or(message IN (SELECT id FROM _gone_messages)) AS by_gone,
                      bool_or(message NOT IN (SELECT id FROM _gone_messages)) AS by_kept
               FROM named GROUP BY question, value)
        SELECT n.question, n.value FROM tally n JOIN questions q ON q.id = n.question
        WHERE n.by_gone AND NOT n.by_kept
          AND (q.instructions_version IS NOT NULL
               OR EXISTS (SELECT 1 FROM organizer_ops o WHERE o.op = 'option_added' AND NOT o.undone
                          AND json_extract_string(o.body, '$.effects.questions[0]') = n.question
                          AND json_extract_string(o.body, '$.effects.option') = n.value))
          AND NOT EXISTS (SELECT 1 FROM settlements s WHERE s.question = n.question AND s.answer = n.value)
          AND NOT EXISTS (SELECT 1 FROM rejections j WHERE j.question = n.question AND j.answer = n.value)
          AND NOT EXISTS (SELECT 1 FROM instructions x WHERE x.rests_on_question = n.question
                          AND x.rests_on_answer = n.value)
        ORDER BY n.question, n.i""").fetchall()
    return [(q, v) for q, v in rows]


def _json_names(values: list[str]) -> list[str]:
    """Each value as it appears inside a stored JSON record: a JSON string, quotes included."""
    return [json.dumps(v, ensure_ascii=False) for v in values]


def _ops_naming(con, questions: list[str], values: list[tuple[str, str]]) -> list[str]:
    """Ids of the organizer operations whose stored record names a removed question or value."""
    names = _json_names(questions)
    pairs = [[json.dumps(q, ensure_ascii=False), json.dumps(v, ensure_ascii=False)] for q, v in values]
    return _ids(con, """SELECT id FROM organizer_ops
                        WHERE list_bool_or(list_transform(?::VARCHAR[], n -> contains(body, n)))
                           OR list_bool_or(list_transform(?::VARCHAR[][], p -> contains(body, p[1])
                                                                              AND contains(body, p[2])))
                        ORDER BY id""", [names, pairs])


def _counts(con, kind: str, target: str, found: ErasurePlan) -> dict[str, int]:
    one = lambda sql, params=None: int(con.execute(sql, params or []).fetchone()[0])  # noqa: E731
    gone_q = "(SELECT id FROM _gone_questions)"
    gone_m = "(SELECT id FROM _gone_messages)"
    counts = {
        "messages": len(found.messages),
        "message_terms": one(f"SELECT count(*) FROM message_terms WHERE message IN {gone_m}"),
        "readings": one(f"SELECT count(*) FROM readings WHERE message IN {gone_m} OR question IN {gone_q}"),
        "remembered": one(f"SELECT count(*) FROM remembered WHERE message IN {gone_m}"),
        "questions": len(found.questions),
        "values": len(found.values),
        "settlements": one(f"SELECT count(*) FROM settlements WHERE question IN {gone_q}"),
        "rejections": one(f"SELECT count(*) FROM rejections WHERE question IN {gone_q}"),
        "instructions": one(f"SELECT count(*) FROM instructions WHERE rests_on_question IN {gone_q}"
                            + (" OR subject = ?" if kind == "subject" else ""),
                            [target] if kind == "subject" else None),
        "reads": one(f"""SELECT count(*) FROM reads r WHERE r.question IN {gone_q}
                         OR list_contains(?::VARCHAR[][], [r.question, r.top])""",
                     [[list(p) for p in found.values]]),
        "organizer_ops": len(_ops_naming(con, found.questions, found.values)),
        "proposed_ops": len(_proposals_naming(con, found)),
        "organizer_decisions": len(_decisions(con, kind, target, found)),
        "relations": one("SELECT count(*) FROM relations WHERE from_id = ? OR to_id = ?", [target, target])
        if kind == "subject" else 0,
        "subjects": one("SELECT count(*) FROM subjects WHERE id = ?", [target]) if kind == "subject" else 0,
        "sources": len(found.sources),
    }
    return counts


def _drop_value(con, question: str, value: str) -> None:
    """Remove ``value`` from ``question``'s options and its place from every stored reading's probabilities
    (readings written before the value was listed end before it and are left as they are)."""
    (options,) = con.execute("SELECT options FROM questions WHERE id = ?", [question]).fetchone()
    at = options.index(value) + 1  # 1-based, as DuckDB lists count
    con.execute(f"UPDATE questions SET options = list_filter(options, lambda x, i: i <> {at}) WHERE id = ?",
                [question]).fetchall()
    con.execute(f"""UPDATE readings SET probs = list_filter(probs, lambda x, i: i <> {at})
                    WHERE question = ? AND len(probs) >= {at}""", [question]).fetchall()
    # the values added after it moved up one place: their operations say where they are, for an undo
    for op_id, body in con.execute("""SELECT id, body FROM organizer_ops WHERE op = 'option_added'
                                      AND json_extract_string(body, '$.effects.questions[0]') = ?
                                      AND (body::JSON -> '$.effects.index')::INTEGER >= ?""",
                                   [question, at]).fetchall():
        stored = json.loads(body)
        stored["effects"]["index"] -= 1
        con.execute("UPDATE organizer_ops SET body = ? WHERE id = ?", [json.dumps(stored, sort_keys=True), op_id])


def erase(con: duckdb.DuckDBPyConnection, kind: str, target: str, *, by: str, reason: str | None,
          at: datetime, planned: ErasurePlan | None = None) -> tuple[ErasurePlan, str]:
    """Forget ``kind`` ``target`` in one transaction (see the module docstring for what goes), with its
    erasure record. Returns the plan it carried out and the erasure record's id. The bytes are still in
    the file until :func:`rewrite`. ``planned``: the :func:`plan` of the same target made on ``con``
    under the same write lock, its tables still there (a caller that looked at it first); else it
    plans here."""
    if not by or not by.strip():
        raise ErasureError("say who asks for the erasure (by), e.g. by=user")
    with transaction(con):
        found = planned if planned is not None else plan(con, kind, target)
        try:
            _remove(con, kind, target, found)
            record_id = _free_id(con, f"{kind}:{target}")
            con.execute("INSERT INTO erasures (id, kind, target, erased_at, erased_by, reason, counts) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [record_id, kind, target, at, by, reason, json.dumps(found.counts, sort_keys=True)]).fetchall()
        finally:
            drop_plan_tables(con)
    return found, record_id


def _remove(con, kind: str, target: str, found: ErasurePlan) -> None:
    gone_q = "(SELECT id FROM _gone_questions)"
    gone_m = "(SELECT id FROM _gone_messages)"
    ops = _ops_naming(con, found.questions, found.values)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _gone_fps AS
                    SELECT DISTINCT fp FROM readings WHERE message IN {gone_m} AND fp IS NOT NULL""")
    try:
        con.execute(f"DELETE FROM readings WHERE message IN {gone_m} OR question IN {gone_q}").fetchall()
        # the oldest remaining copy of a removed message is now the original
        con.execute(mark_copies_sql("SELECT fp FROM _gone_fps")).fetchall()
    finally:
        con.execute("DROP TABLE IF EXISTS temp._gone_fps")
    con.execute(f"DELETE FROM message_terms WHERE message IN {gone_m}").fetchall()
    con.execute(f"DELETE FROM remembered WHERE message IN {gone_m}").fetchall()
    con.execute(f"DELETE FROM messages WHERE id IN {gone_m}").fetchall()
    con.execute(f"DELETE FROM reads WHERE question IN {gone_q} OR list_contains(?::VARCHAR[][], [question, top])",
                [[list(p) for p in found.values]]).fetchall()
    for question, value in found.values:
        _drop_value(con, question, value)
    if found.questions:
        con.execute("UPDATE remembered SET questions = list_filter(questions, lambda q: NOT list_contains($1, q)) "
                    "WHERE list_has_any(questions, $1)", [found.questions]).fetchall()
    con.execute(f"DELETE FROM settlements WHERE question IN {gone_q}").fetchall()
    con.execute(f"DELETE FROM rejections WHERE question IN {gone_q}").fetchall()
    con.execute(f"DELETE FROM instructions WHERE rests_on_question IN {gone_q}"
                + (" OR subject = ?" if kind == "subject" else ""), [target] if kind == "subject" else []).fetchall()
    con.execute(f"DELETE FROM belief_states WHERE question IN {gone_q}").fetchall()
    con.execute(f"DELETE FROM evidence_epochs WHERE question IN {gone_q}").fetchall()
    con.execute(f"DELETE FROM questions WHERE id IN {gone_q}").fetchall()
    if ops:
        con.execute("DELETE FROM organizer_ops WHERE list_contains(?::VARCHAR[], id)", [ops]).fetchall()
    _take_messages_out_of_operations(con, set(found.messages))
    decided = _decisions(con, kind, target, found)
    if decided:
        con.execute("DELETE FROM organizer_decisions WHERE list_contains(?::VARCHAR[], key)", [decided]).fetchall()
    proposals = _proposals_naming(con, found)
    if proposals:
        con.execute("DELETE FROM proposed_ops WHERE list_contains(?::VARCHAR[], id)", [proposals]).fetchall()
    if found.sources:
        con.execute("DELETE FROM sources WHERE list_contains(?::VARCHAR[], id)", [found.sources]).fetchall()
    if kind == "subject":
        con.execute("DELETE FROM relations WHERE from_id = ? OR to_id = ?", [target, target]).fetchall()
        con.execute("DELETE FROM subjects WHERE id = ?", [target]).fetchall()
    # every kept state and belief-cache entry computed before stops counting, as after a merge
    mark_evidence_changed(con, found.changed, structure=True)


def _decisions(con, kind: str, target: str, found: ErasurePlan) -> list[str]:
    """Keys of the organizer's kept decisions that hold a removed message's text, or showed, created or
    linked a removed question, or (a subject) showed the subject: a decision keeps its whole prompt."""
    keys = set(decisions_naming(con, found.messages, found.questions, [target] if kind == "subject" else []))
    values = [v for _, v in found.values]
    if values:  # a decision that showed or named a removed value quotes it
        keys |= set(_ids(con, """SELECT key FROM organizer_decisions WHERE list_bool_or(list_transform(?::VARCHAR[],
                                     v -> contains(prompt, v) OR contains(output, v) OR contains(coalesce(reply, ''), v)
                                          OR contains(request, v)))""", [values]))
    return sorted(keys)


def _strings(value) -> set[str]:
    """Every string in a parsed JSON value, keys included."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set(value) | set().union(*(_strings(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value))
    return set()


def _proposals_naming(con, found: ErasurePlan) -> list[str]:
    """Ids of maintenance proposals (any status) whose record or reasons name a removed message, question or
    value: a proposal's record quotes question texts and assigns messages. Proposals are few."""
    gone = set(found.messages) | set(found.questions)
    values = {v for _, v in found.values}
    if not gone and not values:
        return []
    return sorted(i for i, record, reasons in con.execute("SELECT id, record, reasons FROM proposed_ops").fetchall()
                  if (named := _strings(json.loads(record)) | _strings(json.loads(reasons))) & gone
                  or any(v in text for v in values for text in named))  # a value quoted inside a text too


def _take_messages_out_of_operations(con, gone: set[str]) -> None:
    """Remove the removed messages from the merges' and splits' stored records and effects (a split's
    ``assign`` and ``readings``, the readings each carried), so that an operation still reads as a record
    of what remains: `doxa export` writes it, and ingest refuses a split that assigns a missing message.
    Operations are few (one per merge or split), so they are rewritten one by one."""
    if not gone:
        return
    for op_id, body in con.execute("SELECT id, body FROM organizer_ops WHERE op IN ('merge', 'split')").fetchall():
        stored = json.loads(body)
        record, effects = stored.get("record", {}), stored.get("effects", {})
        before = json.dumps(stored, sort_keys=True)
        if isinstance(record.get("assign"), dict):
            record["assign"] = {m: q for m, q in record["assign"].items() if m not in gone}
        if isinstance(record.get("readings"), list):
            record["readings"] = [r for r in record["readings"] if r.get("message") not in gone]
        if isinstance(effects.get("readings"), list):
            effects["readings"] = [r for r in effects["readings"] if not (r and r[0] in gone)]
        after = json.dumps(stored, sort_keys=True)
        if after != before:
            con.execute("UPDATE organizer_ops SET body = ? WHERE id = ?", [after, op_id]).fetchall()


def _free_id(con, base: str) -> str:
    taken = set(_ids(con, "SELECT id FROM erasures WHERE id = ? OR starts_with(id, ?)", [base, base + "#"]))
    n = 1
    while (candidate := base if n == 1 else f"{base}#{n}") in taken:
        n += 1
    return candidate


def erasures(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Every erasure record, oldest first (``doxa forget --list``)."""
    rows = con.execute("SELECT id, kind, target, erased_at, erased_by, reason, counts, rewritten FROM erasures "
                       "ORDER BY erased_at, id").fetchall()
    return [{"id": i, "kind": k, "target": t, "erased_at": at.isoformat(), "erased_by": by, "reason": why,
             "removed": json.loads(counts), "rewritten": done} for i, k, t, at, by, why, counts, done in rows]


def pending_rewrite(con: duckdb.DuckDBPyConnection) -> int:
    """How many erasures still wait for the file to be rewritten (their bytes may remain on disk)."""
    return int(con.execute("SELECT count(*) FROM erasures WHERE NOT rewritten").fetchone()[0])


def rewrite(con: duckdb.DuckDBPyConnection, file: str) -> int:
    """Copy the store into a fresh file and put it in place of ``file``, so that no freed block of the
    old file survives in the store; returns the new file's size in bytes.

    ``con`` must hold ``file`` read-write, and is the last thing that may use the old file: the caller
    closes it right after and writes nothing more through it (a write would go to the old file, gone
    once it closes). The old file is checkpointed first so that its write-ahead log is empty; the copy
    is complete (checkpointed, fsynced) before it gets the store's name, so a crash leaves either the
    old store or the new one, never half of one. The copy keeps the old file's permissions.
    """
    path = Path(file)
    fresh = path.with_name(f"{path.name}.rewrite-{os.getpid()}-{os.urandom(4).hex()}")
    name = con.execute("SELECT current_database()").fetchone()[0]
    con.execute("CHECKPOINT")
    try:
        con.execute(f"ATTACH '{_quoted(str(fresh))}' AS doxa_rewrite")
        try:
            con.execute(f'COPY FROM DATABASE "{name.replace(chr(34), chr(34) * 2)}" TO doxa_rewrite')
            con.execute("UPDATE doxa_rewrite.main.erasures SET rewritten = true WHERE NOT rewritten").fetchall()
        finally:
            con.execute("DETACH doxa_rewrite")  # checkpoints the copy: no log left beside it
        os.chmod(fresh, os.stat(path).st_mode & 0o7777)
        fsync_path(fresh)
        os.replace(fresh, path)
        fsync_path(path.parent)
    except BaseException:
        for leftover in (fresh, Path(str(fresh) + ".wal")):
            leftover.unlink(missing_ok=True)
        raise
    return path.stat().st_size


def _quoted(text: str) -> str:
    return text.replace("'", "''")


def remove_dead_staging(folder: str | Path | None = None) -> int:
    """Delete what killed ingests staged in the temporary folder (``doxa-ingest-<pid>-…``, its pid no longer
    running: an ingest that ends deletes its own): staged records hold message text. A live ingest's files
    are left alone. Returns how many files or folders were removed."""
    from .fast_ingest import STAGING_PREFIX

    return len(remove_dead_writers_files(folder or tempfile.gettempdir(), STAGING_PREFIX))


__all__ = ["KINDS", "ErasureError", "ErasurePlan", "plan", "drop_plan_tables", "erase", "erasures", "pending_rewrite", "rewrite",
           "remove_dead_staging"]
