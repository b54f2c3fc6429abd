"""The organizer's operations on questions: merge, split, undo, and replay under new questions.

The organizer (a model, or a person) decides which questions exist; it never writes a
probability. Its operations are ingest record types (docs/formats.md additions, docs/organizer.md)
so they travel in the same JSON Lines as everything else and are written inside the
same all-or-nothing transaction:

``question_merge``  ``from`` is a duplicate of ``into``: ``from`` becomes status
                    ``merged``; its readings, settlements and rejections are carried to
                    ``into`` through ``option_map`` (``from``'s option → ``into``'s option;
                    options with the same name map to each other unless told otherwise).
``question_split``  one question becomes several (``into``: question records): the old
                    one becomes status ``split``; messages listed in ``assign`` carry their
                    readings to the new question(s) named, through ``option_map[new_id]``;
                    ``readings`` gives new readings (a reader re-read the message) outright.
                    Settlements and rejections carry to every new question whose option
                    map covers their answer.
``undo``            reverses one operation exactly: carried rows are removed, statuses and
                    re-pointed instructions restored; questions a split created become
                    ``withdrawn``. An operation that a later, still active one depends on
                    cannot be undone before that one.

A reading's probabilities carry through a map ``f: old options → new options`` as
``p'_j = Σ_{i: f(i)=j} p_i``; the mass of an old option with no counterpart goes to
``unclear`` (the message is about the question, but says nothing the new options can
tell apart), so ``probs + unclear + unrelated`` still sums to 1. A new option is
rejected only when every old option mapping to it was.

Nothing is deleted that was not inserted by the operation being undone: questions keep
their rows (status ``merged``, ``split`` or ``withdrawn``), and every operation stays in
``organizer_ops`` with who did it and when, undone or not.

The records themselves are in :mod:`doxa.data.operation_records`; :func:`doxa.data.replay.replay`
rebuilds a store from the kept evidence under another set of questions.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from .connection import in_read_session
from .errors import IngestError, Problem
from .insert import insert_arrow_con
from .operation_records import OP_TYPES, QuestionMergeRecord, QuestionSplitRecord, UndoRecord
from .sql import bind
from .times import utc_now
from .writer import ExtraWriter

if TYPE_CHECKING:
    from .session import Session

WITHDRAWN = "withdrawn"


# ---------------------------------------------------------------------------- option maps
class OptionMap:
    """A map from one question's options to another's, as a 0/1 matrix ``M[i, j] = [f(i) = j]``."""

    def __init__(self, old: list[str], new: list[str], mapping: dict[str, str]):
        self.old, self.new, self.mapping = list(old), list(new), dict(mapping)
        self.matrix = np.zeros((len(old), len(new)))
        for o, n in mapping.items():
            self.matrix[old.index(o), new.index(n)] = 1.0

    @classmethod
    def build(cls, old: list[str], new: list[str], given: dict[str, str] | None) -> tuple["OptionMap", list[str]]:
        """Same-named options map to each other; ``given`` adds or overrides. Returns (map, problems)."""
        problems = []
        mapping = {o: o for o in old if o in new}
        for o, n in (given or {}).items():
            if o not in old:
                problems.append(f"option_map: {o!r} is not an option of the old question (options {old})")
            elif n not in new:
                problems.append(f"option_map: {n!r} is not an option of the new question (options {new})")
            else:
                mapping[o] = n
        return cls(old, new, mapping), problems

    @property
    def empty(self) -> bool:
        return not self.mapping

    def carry(self, probs: np.ndarray, unclear: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, K_old) probabilities → (N, K_new), with unmapped mass added to ``unclear``."""
        if len(probs) == 0:
            return np.zeros((0, len(self.new))), unclear
        unmapped = self.matrix.sum(axis=1) == 0
        return probs @ self.matrix, unclear + probs[:, unmapped].sum(axis=1)

    def rejected(self, rejected_old: set[str]) -> list[str]:
        """New options all of whose old options are rejected."""
        out = []
        for j, n in enumerate(self.new):
            pre = [self.old[i] for i in np.flatnonzero(self.matrix[:, j])]
            if pre and all(o in rejected_old for o in pre):
                out.append(n)
        return out


# ---------------------------------------------------------------------------- the writer
def _rows(con, sql: str, params: list[Any] | None = None) -> list[tuple]:
    return con.execute(bind(sql, params)).fetchall()


def _question(con, qid: str) -> dict[str, Any] | None:
    rows = _rows(con, "SELECT id, subject, kind, text, shape, options, status FROM questions WHERE id = ?", [qid])
    if not rows:
        return None
    keys = ("id", "subject", "kind", "text", "shape", "options", "status")
    out = dict(zip(keys, rows[0]))
    out["options"] = list(out["options"])
    return out


def insert_readings(con, question: str, rows: list[tuple]) -> None:
    """rows: (message, reader, reader_version, probs list, unclear, unrelated, one_off)."""
    if not rows:
        return
    cols = list(zip(*rows))
    insert_arrow_con(con, "readings", pa.table({
        "message": pa.array(cols[0], pa.string()), "question": pa.array([question] * len(rows), pa.string()),
        "reader": pa.array(cols[1], pa.string()), "reader_version": pa.array(cols[2], pa.string()),
        "probs": pa.array([list(map(float, p)) for p in cols[3]], pa.list_(pa.float64())),
        "unclear": pa.array(cols[4], pa.float64()), "unrelated": pa.array(cols[5], pa.float64()),
        "one_off": pa.array(cols[6], pa.float64())}))


class _OpError(Exception):
    pass


class OrganizerWriter(ExtraWriter):
    """Writes merge / split / undo records in line order, inside ingest's transaction.

    Core ingest calls ``check`` then ``write`` once per record type; operations of
    different types in one file must still run in line order (a merge, then its undo),
    so ``check`` collects all of them from the batch and the first ``write`` runs them
    all. Problems found while running raise :class:`IngestError`, which rolls the whole
    file back.
    """

    def __init__(self) -> None:
        self._batch = None
        self._pending: list[tuple[int, Any]] | None = None

    def check(self, con, items, batch, problems) -> None:
        if self._batch is batch:  # already collected for this file (called once per op type)
            return
        self._batch = batch
        ops = sorted((item for t in OP_TYPES for item in batch.by_type.get(t, [])), key=lambda x: x[0])
        seen: dict[str, tuple[int, Any]] = {}
        pending = []
        for line, rec in ops:
            op_id = rec.op_id if isinstance(rec, UndoRecord) else rec.id
            if op_id in seen:
                first_line, first = seen[op_id]
                if first != rec:
                    problems.add(line, f"operation id {op_id!r} was already given differently on line "
                                       f"{first_line}: give each operation its own id")
                continue
            seen[op_id] = (line, rec)
            pending.append((line, rec))
        self._pending = pending

    def write(self, con, items) -> dict[str, int]:
        ops, self._pending, self._batch = self._pending, None, None
        if not ops:
            return {}
        problems: list[Problem] = []
        done = 0
        for line, rec in ops:
            try:
                done += self._run(con, rec)
            except _OpError as err:
                problems.append(Problem(line, str(err)))
        if problems:
            raise IngestError(problems)
        return {"organizer_ops": done}

    # -- bookkeeping ----------------------------------------------------------------
    def _stored_op(self, con, op_id: str) -> dict[str, Any] | None:
        rows = _rows(con, "SELECT id, op, body, done_by, done_at, undone FROM organizer_ops WHERE id = ?", [op_id])
        if not rows:
            return None
        i, op, body, by, at, undone = rows[0]
        return {"id": i, "op": op, "body": json.loads(body), "by": by, "at": at, "undone": bool(undone)}

    def _already(self, con, op_id: str, rec) -> bool:
        """True when this exact operation is stored (ingest is idempotent); refuse a different one."""
        stored = self._stored_op(con, op_id)
        if stored is None:
            return False
        same = stored["body"]["record"] == _record_json(rec)
        if not same:
            raise _OpError(f"operation {op_id!r} is stored with other content: use a new id")
        if stored["undone"]:
            raise _OpError(f"operation {op_id!r} was undone: to do it again, give it a new id")
        return True

    def _record_op(self, con, op_id: str, op: str, rec, effects: dict[str, Any]) -> None:
        seq = _rows(con, "SELECT count(*) FROM organizer_ops")[0][0] + 1
        effects = dict(effects, seq=int(seq))
        body = json.dumps({"record": _record_json(rec), "effects": effects}, sort_keys=True)
        _rows(con, "INSERT INTO organizer_ops (id, op, body, done_by, done_at, undone) VALUES (?, ?, ?, ?, ?, false)",
              [op_id, op, body, rec.by, rec.at or utc_now()])

    def _run(self, con, rec) -> int:
        if isinstance(rec, QuestionMergeRecord):
            return 0 if self._already(con, rec.id, rec) else self._merge(con, rec)
        if isinstance(rec, QuestionSplitRecord):
            return 0 if self._already(con, rec.id, rec) else self._split(con, rec)
        return 0 if self._already(con, rec.op_id, rec) else self._undo(con, rec)

    # -- merge ----------------------------------------------------------------------
    def _merge(self, con, rec: QuestionMergeRecord) -> int:
        into, src = _question(con, rec.into), _question(con, rec.from_)
        for name, q, qid in (("into", into, rec.into), ("from", src, rec.from_)):
            if q is None:
                raise _OpError(f"{name}: unknown question {qid!r}: add a question record first")
            if q["status"] != "active":
                raise _OpError(f"{name}: question {qid!r} is {q['status']}, not active: only active questions merge")
        if into["subject"] != src["subject"]:
            raise _OpError(f"{rec.from_!r} is about {src['subject']!r} and {rec.into!r} about {into['subject']!r}: "
                           "a merge joins duplicates of one question about one subject")
        omap, problems = OptionMap.build(src["options"], into["options"], rec.option_map)
        if problems:
            raise _OpError("; ".join(problems))
        if omap.empty:
            raise _OpError(f"no option of {rec.from_!r} {src['options']} maps to one of {rec.into!r} {into['options']}: "
                           'give "option_map": {"<from option>": "<into option>", …}')
        effects = _carry_question(con, src, into, omap)
        repointed = []
        for iid, answer in _rows(con, "SELECT id, rests_on_answer FROM instructions WHERE rests_on_question = ?",
                                 [rec.from_]):
            if answer in omap.mapping:
                _rows(con, "UPDATE instructions SET rests_on_question = ?, rests_on_answer = ? WHERE id = ?",
                      [rec.into, omap.mapping[answer], iid])
                repointed.append([iid, rec.from_, answer])
        _rows(con, "UPDATE questions SET status = 'merged' WHERE id = ?", [rec.from_])
        effects.update(instructions=repointed, status={rec.from_: "active"}, created=[],
                       questions=[rec.into, rec.from_])
        self._record_op(con, rec.id, "merge", rec, effects)
        return 1

    # -- split ----------------------------------------------------------------------
    def _split(self, con, rec: QuestionSplitRecord) -> int:
        old = _question(con, rec.question)
        if old is None:
            raise _OpError(f"question: unknown question {rec.question!r}")
        if old["status"] != "active":
            raise _OpError(f"question {rec.question!r} is {old['status']}, not active: only active questions split")
        known_subjects = {r[0] for r in _rows(con, "SELECT id FROM subjects")}
        problems = []
        maps: dict[str, OptionMap] = {}
        for q in rec.into:
            if _question(con, q.id) is not None:
                problems.append(f"into: question {q.id!r} already exists: a split creates new questions, use a new id")
            if q.subject and q.subject not in known_subjects:
                problems.append(f"into: unknown subject {q.subject!r} of {q.id!r}: add a subject record first")
            omap, bad = OptionMap.build(old["options"], q.options, rec.option_map.get(q.id))
            if q.id in rec.option_map and not rec.option_map[q.id]:
                omap = OptionMap(old["options"], q.options, {})  # an explicit {}: carry nothing
            problems += [f"{q.id}: {p}" for p in bad]
            maps[q.id] = omap
        read_on_old = {m for (m,) in _rows(
            con, "SELECT DISTINCT message FROM readings WHERE question = ? AND list_contains(?, message)",
            [rec.question, sorted(rec.assign) or [""]])}
        for message in rec.assign:
            if message not in read_on_old:
                problems.append(f"assign: message {message!r} has no reading of {rec.question!r} to carry: "
                                "give its reading for the new question in 'readings'")
            for target in rec.targets(message):
                if maps[target].empty:
                    problems.append(f"assign: {message!r} → {target!r}, but no option of {rec.question!r} maps to "
                                    f"one of {target!r}: give option_map[{target!r}], or a new reading in 'readings'")
        new_options = {q.id: q.options for q in rec.into}
        known_msgs = {m for (m,) in _rows(con, "SELECT id FROM messages WHERE list_contains(?, id)",
                                          [sorted({r.message for r in rec.readings}) or [""]])}
        given_keys = set()
        for r in rec.readings:
            if r.message not in known_msgs:
                problems.append(f"readings: unknown message {r.message!r}")
            if set(r.probs) != set(new_options[r.question]):
                problems.append(f"readings: probs of {r.message!r} for {r.question!r} must cover exactly "
                                f"its options {new_options[r.question]}")
            key = (r.message, r.question, r.reader)
            if key in given_keys:
                problems.append(f"readings: {r.message!r} for {r.question!r} by {r.reader!r} is given twice")
            given_keys.add(key)
        if problems:
            raise _OpError("; ".join(problems))

        insert_arrow_con(con, "questions", pa.table({
            "id": [q.id for q in rec.into], "subject": pa.array([q.subject for q in rec.into], pa.string()),
            "kind": [q.kind for q in rec.into], "text": [q.text for q in rec.into],
            "shape": [q.shape for q in rec.into],
            "options": pa.array([q.options for q in rec.into], pa.list_(pa.string())),
            "created_by": [rec.by] * len(rec.into)}))
        effects: dict[str, Any] = {"readings": [], "settlements": [], "rejections": []}
        for q in rec.into:
            messages = [m for m in rec.assign if q.id in rec.targets(m)]
            given = [r for r in rec.readings if r.question == q.id]
            carried_keys = set()
            if messages:
                rows = carried_readings(con, rec.question, maps[q.id], messages)
                rows = [r for r in rows if (r[0], q.id, r[1]) not in given_keys]
                insert_readings(con, q.id, rows)
                carried_keys = {(r[0], r[1]) for r in rows}
                effects["readings"] += [[r[0], q.id, r[1]] for r in rows]
            insert_readings(con, q.id, [
                (r.message, r.reader, r.reader_version, [r.probs[o] for o in q.options],
                 r.unclear, r.unrelated, r.one_off) for r in given if (r.message, r.reader) not in carried_keys])
            effects["readings"] += [[r.message, q.id, r.reader] for r in given]
            target = {"id": q.id, "options": q.options}
            part = _carry_outcomes(con, old, target, maps[q.id])
            effects["settlements"] += [[q.id, *s] for s in part["settlements"]]
            effects["rejections"] += [[q.id, *s] for s in part["rejections"]]
        _rows(con, "UPDATE questions SET status = 'split' WHERE id = ?", [rec.question])
        effects.update(status={rec.question: "active"}, created=[q.id for q in rec.into], instructions=[],
                       questions=[rec.question, *[q.id for q in rec.into]])
        self._record_op(con, rec.id, "split", rec, effects)
        return 1

    # -- undo -----------------------------------------------------------------------
    def _undo(self, con, rec: UndoRecord) -> int:
        target = self._stored_op(con, rec.op)
        if target is None:
            raise _OpError(f"op: no organizer operation {rec.op!r}: `doxa ops` lists them")
        if target["op"] == "undo":
            raise _OpError(f"op: {rec.op!r} is itself an undo: to redo the operation, ingest it again under a new id")
        if target["undone"]:
            raise _OpError(f"op: {rec.op!r} is already undone")
        effects = target["body"]["effects"]
        touched = set(effects["questions"])
        for later_id, body in _rows(con, "SELECT id, body FROM organizer_ops WHERE NOT undone AND op <> 'undo' "
                                         "AND id <> ?", [rec.op]):
            later = json.loads(body)["effects"]
            if later["seq"] > effects["seq"] and touched & set(later["questions"]):
                raise _OpError(f"operation {later_id!r} came later and involves "
                               f"{sorted(touched & set(later['questions']))}: undo {later_id!r} first")
        record = target["body"]["record"]
        into = record.get("into") if target["op"] == "merge" else None
        for message, question, reader in ([[m, into, r] for m, r in effects["readings"]]
                                          if target["op"] == "merge" else effects["readings"]):
            _rows(con, "DELETE FROM readings WHERE message = ? AND question = ? AND reader = ?",
                  [message, question, reader])
        for question, answer, at in _with_question(effects["settlements"], into):
            _rows(con, "DELETE FROM settlements WHERE question = ? AND answer = ? AND settled_at = ?",
                  [question, answer, datetime.fromisoformat(at)])
        for question, answer, at in _with_question(effects["rejections"], into):
            _rows(con, "DELETE FROM rejections WHERE question = ? AND answer = ? AND rejected_at = ?",
                  [question, answer, datetime.fromisoformat(at)])
        for iid, question, answer in effects["instructions"]:
            _rows(con, "UPDATE instructions SET rests_on_question = ?, rests_on_answer = ? WHERE id = ?",
                  [question, answer, iid])
        for qid, status in effects["status"].items():
            _rows(con, "UPDATE questions SET status = ? WHERE id = ?", [status, qid])
        for qid in effects["created"]:
            _rows(con, "UPDATE questions SET status = ? WHERE id = ?", [WITHDRAWN, qid])
        _rows(con, "UPDATE organizer_ops SET undone = true WHERE id = ?", [rec.op])
        self._record_op(con, rec.op_id, "undo", rec, {"questions": [], "undid": rec.op})
        return 1


def _with_question(rows: list[list], into: str | None) -> list[list]:
    """Merge effects omit the question (always ``into``); split effects carry it."""
    return [[into, *r] for r in rows] if into is not None else rows


def _record_json(rec) -> dict[str, Any]:
    return rec.model_dump(mode="json", by_alias=True)


def carried_readings(con, question: str, omap: OptionMap, messages: list[str] | None) -> list[tuple]:
    """Readings of ``question`` (optionally only of ``messages``), mapped through ``omap``."""
    where = "question = ?" + (" AND list_contains(?, message)" if messages is not None else "")
    params: list[Any] = [question] + ([messages] if messages is not None else [])
    rows = _rows(con, f"""SELECT message, reader, reader_version, probs, unclear, unrelated, one_off
                          FROM readings WHERE {where} ORDER BY message, reader""", params)
    if not rows:
        return []
    probs = np.array([list(r[3]) for r in rows], dtype=np.float64)
    unclear = np.array([r[4] for r in rows], dtype=np.float64)
    new_probs, new_unclear = omap.carry(probs, unclear)
    return [(r[0], r[1], r[2], new_probs[i].tolist(), float(new_unclear[i]), r[5], r[6])
            for i, r in enumerate(rows)]


def _carry_question(con, src: dict[str, Any], into: dict[str, Any], omap: OptionMap) -> dict[str, Any]:
    """Carry every reading, settlement and rejection of ``src`` to ``into`` (merge)."""
    taken = {(m, r) for m, r in _rows(con, "SELECT message, reader FROM readings WHERE question = ?", [into["id"]])}
    rows = [r for r in carried_readings(con, src["id"], omap, None) if (r[0], r[1]) not in taken]
    insert_readings(con, into["id"], rows)
    outcomes = _carry_outcomes(con, src, into, omap)
    return {"readings": [[r[0], r[1]] for r in rows], **outcomes}


#: A settlement's columns besides its question, answer and time: carried unchanged by merge, split and replay.
SETTLEMENT_FACTS = "how, settled_by, note, p_before, params_version"


def _carry_outcomes(con, src: dict[str, Any], target: dict[str, Any], omap: OptionMap) -> dict[str, list]:
    """Settlements and rejections of ``src`` carried to ``target``; returns what was inserted."""
    inserted: dict[str, list] = {"settlements": [], "rejections": []}
    existing = {(a, t) for a, t in _rows(con, "SELECT answer, settled_at FROM settlements WHERE question = ?",
                                         [target["id"]])}
    for answer, at, *facts in _rows(con, f"SELECT answer, settled_at, {SETTLEMENT_FACTS} FROM settlements "
                                         "WHERE question = ? ORDER BY settled_at", [src["id"]]):
        new = omap.mapping.get(answer)
        if new is None or (new, at) in existing:
            continue
        _rows(con, f"INSERT INTO settlements (question, answer, settled_at, {SETTLEMENT_FACTS}) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [target["id"], new, at, *facts])
        existing.add((new, at))
        inserted["settlements"].append([new, at.isoformat()])
    old_rejections = _rows(con, "SELECT answer, rejected_at, rejected_by FROM rejections WHERE question = ?",
                           [src["id"]])
    first_at: dict[str, tuple[datetime, str]] = {}
    for answer, at, by in old_rejections:
        if answer not in first_at or at < first_at[answer][0]:
            first_at[answer] = (at, by)
    existing_rej = {(a, t) for a, t in _rows(con, "SELECT answer, rejected_at FROM rejections WHERE question = ?",
                                             [target["id"]])}
    for new in omap.rejected(set(first_at)):
        # the new option is out from the moment its last old option was rejected
        pre = [o for o, n in omap.mapping.items() if n == new]
        at, by = max((first_at[o] for o in pre), key=lambda x: x[0])
        if (new, at) in existing_rej:
            continue
        _rows(con, "INSERT INTO rejections VALUES (?, ?, ?, ?)", [target["id"], new, at, by])
        inserted["rejections"].append([new, at.isoformat()])
    return inserted


ORGANIZER_WRITER = OrganizerWriter()
#: The writer of each operation record type; the store hands these to ingest's writer.
OPERATION_WRITERS = {type_name: ORGANIZER_WRITER for type_name in OP_TYPES}


# ---------------------------------------------------------------------------- reading back
@in_read_session
def operations(store: "Session") -> list[dict[str, Any]]:
    """Every organizer operation in the order done: id, op, by, at, undone, and the record."""
    rows = store.con.execute(
        "SELECT id, op, body, done_by, done_at, undone FROM organizer_ops").fetchall()
    out = []
    for i, op, body, by, at, undone in rows:
        doc = json.loads(body)
        out.append({"id": i, "op": op, "by": by, "at": at, "undone": bool(undone),
                    "seq": doc["effects"].get("seq", 0), "record": doc["record"],
                    "questions": doc["effects"].get("questions", [])})
    out.sort(key=lambda o: o["seq"])
    return out


# ---------------------------------------------------------------------------- replay
__all__ = ["OptionMap", "OrganizerWriter", "OPERATION_WRITERS", "operations", "WITHDRAWN"]
