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
``option_added``    a value joins an open question's options, appended (options are never
                    reordered: readings store their probabilities by position).
``question_opened`` a closed choice question becomes open.
``undo``            reverses one operation exactly: carried rows are removed, statuses and
                    re-pointed instructions restored; questions a split created become
                    ``withdrawn``; an added value is removed (only while nothing stored names
                    it), an opened question closed again. An operation that a later, still
                    active one depends on cannot be undone before that one.

A reading's probabilities carry through a map ``f: old options → new options`` as
``p'_j = Σ_{i: f(i)=j} p_i``; the mass of an old option with no counterpart goes to
``unclear`` (the message is about the question, but says nothing the new options can
tell apart), so ``probs + unclear + unrelated`` still sums to 1. A new option is
rejected only when every old option mapping to it was. Into an *open* question, such mass
goes to ``unlisted`` instead (the message states a value the question does not list), and
an open question merged into an open one brings its values along (appended to ``into``'s);
an old reading's ``unlisted`` stays ``unlisted`` in an open question and is ``unclear`` in a
closed one. An option a reading of an open question does not name (NaN, or past its list's
end) names no new option it maps to either.

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
from .models import UNLISTED
from .operation_records import (OP_TYPES, OptionAddedRecord, QuestionMergeRecord, QuestionOpenedRecord,
                                QuestionSplitRecord, SettlementOption, UndoRecord)
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
        new_probs, new_unclear, _ = self.carry_all(probs, unclear, np.zeros(len(probs)), into_open=False)
        return new_probs, new_unclear

    def carry_all(self, probs: np.ndarray, unclear: np.ndarray, unlisted: np.ndarray, *,
                  into_open: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(N, K_old) probabilities (NaN: not named) → (N, K_new), with ``unclear`` and ``unlisted``.

        Unmapped named mass, and ``unlisted``, go to ``unlisted`` when the new question is open, else to
        ``unclear``. In an open question a new option no named old option maps to is not named (NaN)."""
        if len(probs) == 0:
            return np.zeros((0, len(self.new))), unclear, unlisted
        named = ~np.isnan(probs)
        given = np.where(named, probs, 0.0)
        new_probs = given @ self.matrix
        unmapped = given[:, self.matrix.sum(axis=1) == 0].sum(axis=1)
        if into_open:
            new_probs = np.where(named.astype(np.float64) @ self.matrix > 0, new_probs, np.nan)
            return new_probs, unclear, unlisted + unmapped
        return new_probs, unclear + unmapped + unlisted, np.zeros(len(probs))

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
    rows = _rows(con, "SELECT id, subject, kind, text, shape, options, status, is_open FROM questions WHERE id = ?",
                 [qid])
    if not rows:
        return None
    keys = ("id", "subject", "kind", "text", "shape", "options", "status", "open")
    out = dict(zip(keys, rows[0]))
    out["options"] = list(out["options"])
    return out


def insert_readings(con, question: str, rows: list[tuple]) -> None:
    """rows: (message, reader, reader_version, probs list (NaN: not named), unclear, unrelated, one_off, unlisted,
    changed)."""
    if not rows:
        return
    cols = list(zip(*rows))
    insert_arrow_con(con, "readings", pa.table({
        "message": pa.array(cols[0], pa.string()), "question": pa.array([question] * len(rows), pa.string()),
        "reader": pa.array(cols[1], pa.string()), "reader_version": pa.array(cols[2], pa.string()),
        "probs": pa.array([list(map(float, p)) for p in cols[3]], pa.list_(pa.float64())),
        "unclear": pa.array(cols[4], pa.float64()), "unrelated": pa.array(cols[5], pa.float64()),
        "one_off": pa.array(cols[6], pa.float64()), "unlisted": pa.array(cols[7], pa.float64()),
        "changed": pa.array(cols[8], pa.float64())}))


class _OpError(Exception):
    pass


class OrganizerWriter(ExtraWriter):
    """Writes the organizer's operations in line order, inside ingest's transaction.

    Core ingest calls ``check`` once per record type, then ``write`` once per record type;
    operations of different types in one file must still run in line order (a merge, then
    its undo), so ``check`` collects all of them (with the option_added operations that the
    file's settlements imply, which ingest hands over among the ``option_added`` items) and
    the first ``write`` runs them all. Problems found while running raise :class:`IngestError`,
    which rolls the whole file back. ``changed`` then says what they changed.
    """

    def __init__(self) -> None:
        self._batch = None
        self._pending: list[tuple[int, Any]] | None = None
        self._seen: dict[str, tuple[int, Any]] = {}
        self._touched: set[str] = set()
        self._structure = False

    def check(self, con, items, batch, problems) -> None:
        if self._batch is not batch:  # a new file: called once per operation type of it
            self._batch, self._pending, self._seen = batch, [], {}
            self._touched, self._structure = set(), False
        for line, rec in items:
            if isinstance(rec, SettlementOption):  # its id is chosen when it runs
                self._pending.append((line, rec))
                continue
            op_id = rec.id if isinstance(rec, (QuestionMergeRecord, QuestionSplitRecord)) else rec.op_id
            if op_id in self._seen:
                first_line, first = self._seen[op_id]
                if first != rec:
                    problems.add(line, f"operation id {op_id!r} was already given differently on line "
                                       f"{first_line}: give each operation its own id")
                continue
            self._seen[op_id] = (line, rec)
            self._pending.append((line, rec))

    def write(self, con, items) -> dict[str, int]:
        ops, self._pending, self._batch, self._seen = self._pending, None, None, {}
        if not ops:
            return {}
        problems: list[Problem] = []
        done: dict[str, int] = {}
        for line, rec in sorted(ops, key=lambda item: item[0]):
            try:
                n = self._run(con, rec)
            except _OpError as err:
                problems.append(Problem(line, str(err)))
                continue
            name = {OptionAddedRecord: "options_added", SettlementOption: "options_added",
                    QuestionOpenedRecord: "questions_opened"}.get(type(rec), "organizer_ops")
            done[name] = done.get(name, 0) + n
        if problems:
            raise IngestError(problems)
        return done

    def changed(self) -> tuple[set[str], bool]:
        return set(self._touched), self._structure

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
        same = stored["body"]["record"] == _record_json(rec) or _as_record(stored["body"]["record"]) == rec
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
        if isinstance(rec, SettlementOption):
            return self._add_option(con, rec, free_op_id(con, rec.op_id))
        if isinstance(rec, OptionAddedRecord):
            q = _question(con, rec.question)
            if q is not None and q["status"] == "active" and q["open"] and rec.option in q["options"]:
                return 0  # listed already (by this operation or another, a settlement's): nothing new
            return 0 if self._already(con, rec.op_id, rec) else self._add_option(con, rec, rec.op_id)
        if isinstance(rec, QuestionOpenedRecord):
            return 0 if self._already(con, rec.op_id, rec) else self._open(con, rec)
        if isinstance(rec, QuestionMergeRecord):
            self._structure = True
            return 0 if self._already(con, rec.id, rec) else self._merge(con, rec)
        if isinstance(rec, QuestionSplitRecord):
            self._structure = True
            return 0 if self._already(con, rec.id, rec) else self._split(con, rec)
        return 0 if self._already(con, rec.op_id, rec) else self._undo(con, rec)

    @staticmethod
    def _active(con, qid: str) -> dict[str, Any]:
        q = _question(con, qid)
        if q is None:
            raise _OpError(f"question: unknown question {qid!r}: add a question record first")
        if q["status"] != "active":
            raise _OpError(f"question {qid!r} is {q['status']}, not active: change the question it became "
                           "(`doxa ops` lists merges and splits)")
        return q

    # -- values of open questions ---------------------------------------------------
    def _add_option(self, con, rec: OptionAddedRecord, op_id: str) -> int:
        q = self._active(con, rec.question)
        if not q["open"]:
            raise _OpError(f"question {rec.question!r} is closed (options {q['options']}): open it first (a "
                           f"question_opened record, `doxa open {rec.question}`), then add {rec.option!r}")
        if rec.option in q["options"]:
            return 0  # already listed: nothing new
        _rows(con, "UPDATE questions SET options = list_append(options, ?) WHERE id = ?", [rec.option, rec.question])
        self._record_op(con, op_id, "option_added", rec,
                        {"questions": [rec.question], "option": rec.option, "index": len(q["options"])})
        self._touched.add(rec.question)
        return 1

    def _open(self, con, rec: QuestionOpenedRecord) -> int:
        q = self._active(con, rec.question)
        if q["open"]:
            return 0  # already open: nothing new
        if q["shape"] != "choice":
            raise _OpError(f"question {rec.question!r} has shape {q['shape']!r}: only a choice question opens "
                           f"(a {q['shape']} question's answers are fixed); write an open choice question and "
                           f"`doxa merge {rec.question} --into` it")
        if UNLISTED in q["options"]:
            raise _OpError(f"question {rec.question!r} has an option {UNLISTED!r}, the word an open question keeps "
                           "for values not listed yet: write an open question naming that answer otherwise and "
                           f"`doxa merge {rec.question} --into` it")
        _rows(con, "UPDATE questions SET is_open = true WHERE id = ?", [rec.question])
        self._record_op(con, rec.op_id, "open", rec, {"questions": [rec.question], "n_options": len(q["options"])})
        self._touched.add(rec.question)
        return 1

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
        added: list[str] = []
        if src["open"] and into["open"]:  # two open questions: into lists the values of both
            added = [o for o in src["options"] if o not in omap.mapping]
            if added:
                into = dict(into, options=into["options"] + added)
                _rows(con, "UPDATE questions SET options = ? WHERE id = ?", [into["options"], rec.into])
                omap = OptionMap(src["options"], into["options"], {**omap.mapping, **{o: o for o in added}})
        elif omap.empty:
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
                       questions=[rec.into, rec.from_], added_options=added,
                       added_at=len(into["options"]) - len(added))
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
        new_open = {q.id: q.open for q in rec.into}
        for r in rec.readings:
            if r.message not in known_msgs:
                problems.append(f"readings: unknown message {r.message!r}")
            if new_open[r.question]:
                if not set(r.probs) <= set(new_options[r.question]):
                    problems.append(f"readings: probs of {r.message!r} for {r.question!r} name "
                                    f"{sorted(set(r.probs) - set(new_options[r.question]))}, not among its options "
                                    f"{new_options[r.question]}: list them in the new question, or give their mass "
                                    "to unlisted")
            elif r.unlisted:
                problems.append(f"readings: {r.message!r} for {r.question!r} gives unlisted {r.unlisted!r}, but "
                                f"{r.question!r} is closed: put that mass in unclear")
            elif set(r.probs) != set(new_options[r.question]):
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
            "created_by": [rec.by] * len(rec.into), "is_open": pa.array([q.open for q in rec.into], pa.bool_())}))
        effects: dict[str, Any] = {"readings": [], "settlements": [], "rejections": []}
        for q in rec.into:
            messages = [m for m in rec.assign if q.id in rec.targets(m)]
            given = [r for r in rec.readings if r.question == q.id]
            carried_keys = set()
            if messages:
                rows = carried_readings(con, rec.question, maps[q.id], messages, into_open=q.open)
                rows = [r for r in rows if (r[0], q.id, r[1]) not in given_keys]
                insert_readings(con, q.id, rows)
                carried_keys = {(r[0], r[1]) for r in rows}
                effects["readings"] += [[r[0], q.id, r[1]] for r in rows]
            insert_readings(con, q.id, [
                (r.message, r.reader, r.reader_version, [r.probs.get(o, np.nan) for o in q.options],
                 r.unclear, r.unrelated, r.one_off, r.unlisted, r.changed)
                for r in given if (r.message, r.reader) not in carried_keys])
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
        if target["op"] in ("option_added", "open"):
            self._undo_value_op(con, target)
            _rows(con, "UPDATE organizer_ops SET undone = true WHERE id = ?", [rec.op])
            self._record_op(con, rec.op_id, "undo", rec, {"questions": [], "undid": rec.op})
            return 1
        self._structure = True
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
        if effects.get("added_options"):  # the values a merge of open questions added to into
            _drop_values(con, into, effects["added_at"], effects["added_options"], f"the merge {rec.op!r}")
        _rows(con, "UPDATE organizer_ops SET undone = true WHERE id = ?", [rec.op])
        self._record_op(con, rec.op_id, "undo", rec, {"questions": [], "undid": rec.op})
        return 1


    def _undo_value_op(self, con, target: dict[str, Any]) -> None:
        """Undo an ``option_added`` (the value leaves the options) or an ``open`` (the question closes)."""
        effects = target["body"]["effects"]
        qid = effects["questions"][0]
        q = _question(con, qid)
        if target["op"] == "option_added":
            _drop_values(con, qid, effects["index"], [effects["option"]], f"the option_added {target['id']!r}")
        else:
            added = q["options"][effects["n_options"]:]
            if added:
                raise _OpError(f"values {added} were added to {qid!r} since it was opened: undo their "
                               "option_added operations first")
            (n,) = _rows(con, """SELECT count(*) FROM readings WHERE question = ? AND (unlisted <> 0
                                 OR list_bool_or(list_transform(probs, x -> isnan(x))))""", [qid])[0]
            if n:
                raise _OpError(f"{n} reading(s) of {qid!r} give mass to a value not listed, or name only some of "
                               "its options, as only readings of an open question may: the question stays open")
            _rows(con, "UPDATE questions SET is_open = false WHERE id = ?", [qid])
        self._touched.add(qid)


def free_op_id(con, base: str) -> str:
    """``base``, or the first of ``base-2``, ``base-3``, … that no stored operation has."""
    taken = {i for (i,) in _rows(con, "SELECT id FROM organizer_ops WHERE id = ? OR starts_with(id, ?)",
                                 [base, base + "-"])}
    n = 1
    while (candidate := base if n == 1 else f"{base}-{n}") in taken:
        n += 1
    return candidate


def _drop_values(con, qid: str, at: int, values: list[str], what: str) -> None:
    """Remove ``values``, listed from position ``at`` (0-based) to the end of ``qid``'s options, and the
    places stored readings keep for them (each NaN: not named); refused while anything stored names one."""
    options = _question(con, qid)["options"]
    if options[at:] != values:
        raise _OpError(f"{what} added {values} to {qid!r}, which now lists {options[at:]} there: undo the later "
                       "operations first")
    named = []
    (n,) = _rows(con, f"""SELECT count(*) FROM readings WHERE question = ? AND len(probs) > {int(at)}
                          AND NOT list_bool_and(list_transform(probs[{int(at) + 1}:], x -> isnan(x)))""", [qid])[0]
    if n:
        named.append(f"{n} reading(s)")
    for table, label in (("settlements", "settlement(s)"), ("rejections", "rejection(s)")):
        (n,) = _rows(con, f"SELECT count(*) FROM {table} WHERE question = ? AND list_contains(?, answer)",
                     [qid, values])[0]
        if n:
            named.append(f"{n} {label}")
    (n,) = _rows(con, "SELECT count(*) FROM instructions WHERE rests_on_question = ? AND list_contains(?, "
                      "rests_on_answer)", [qid, values])[0]
    if n:
        named.append(f"{n} instruction(s)")
    if named:
        listed = ", ".join(map(repr, values))
        raise _OpError(f"{listed} of {qid!r} {'is' if len(values) == 1 else 'are'} named by {', '.join(named)}: a "
                       "value the evidence names stays listed (if it is wrong, reject it: "
                       f"`doxa reject {qid} {values[0] if len(values) == 1 else 'VALUE'}`)")
    _rows(con, f"UPDATE questions SET options = options[1:{int(at)}] WHERE id = ?", [qid])
    _rows(con, f"UPDATE readings SET probs = probs[1:{int(at)}] WHERE question = ? AND len(probs) > {int(at)}", [qid])


def _with_question(rows: list[list], into: str | None) -> list[list]:
    """Merge effects omit the question (always ``into``); split effects carry it."""
    return [[into, *r] for r in rows] if into is not None else rows


def _record_json(rec) -> dict[str, Any]:
    return rec.model_dump(mode="json", by_alias=True)


def _as_record(stored: dict[str, Any]):
    """A stored operation's record read back as a record of today's fields (a field added since, such as a
    question's ``open``, at its default), or None where it no longer reads as one."""
    from .records import record_adapter

    try:
        return record_adapter.validate_python(stored)
    except ValueError:
        return None


def carried_readings(con, question: str, omap: OptionMap, messages: list[str] | None, *,
                     into_open: bool = False) -> list[tuple]:
    """Readings of ``question`` (optionally only of ``messages``), mapped through ``omap`` into a question
    that is open (``into_open``) or not (:meth:`OptionMap.carry_all`)."""
    where = "question = ?" + (" AND list_contains(?, message)" if messages is not None else "")
    params: list[Any] = [question] + ([messages] if messages is not None else [])
    # an option added after a reading was written is past its list's end: not named, as NaN
    width = len(omap.old)
    rows = _rows(con, f"""SELECT message, reader, reader_version,
                                 list_concat(probs, list_transform(range({width} - len(probs)), x -> 'NaN'::DOUBLE)),
                                 unclear, unrelated, one_off, unlisted, changed
                          FROM readings WHERE {where} ORDER BY message, reader""", params)
    if not rows:
        return []
    probs = np.array([list(r[3]) for r in rows], dtype=np.float64).reshape(len(rows), width)
    unclear = np.array([r[4] for r in rows], dtype=np.float64)
    unlisted = np.array([r[7] for r in rows], dtype=np.float64)
    new_probs, new_unclear, new_unlisted = omap.carry_all(probs, unclear, unlisted, into_open=into_open)
    return [(r[0], r[1], r[2], new_probs[i].tolist(), float(new_unclear[i]), r[5], r[6], float(new_unlisted[i]), r[8])
            for i, r in enumerate(rows)]


def _carry_question(con, src: dict[str, Any], into: dict[str, Any], omap: OptionMap) -> dict[str, Any]:
    """Carry every reading, settlement and rejection of ``src`` to ``into`` (merge)."""
    taken = {(m, r) for m, r in _rows(con, "SELECT message, reader FROM readings WHERE question = ?", [into["id"]])}
    rows = [r for r in carried_readings(con, src["id"], omap, None, into_open=into["open"])
            if (r[0], r[1]) not in taken]
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
__all__ = ["OptionMap", "OrganizerWriter", "OPERATION_WRITERS", "operations", "free_op_id", "WITHDRAWN"]
