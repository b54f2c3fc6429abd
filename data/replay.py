"""Replay: a new store holding another's kept evidence under a new set of questions.

docs/design.md §7: replay the kept evidence through each version of the organizer and keep
the one that scores best. Readings, settlements and rejections are carried through the options
old and new questions share by name (:class:`doxa.data.question_ops.OptionMap`). An open question
replayed as an open one keeps every value the evidence named: the values its new record does not
list are added to it (``option_added``, by whom and when they were first added), so its readings,
settlements and rejections carry whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import json

import pyarrow as pa

from . import models
from .errors import StoreError
from .insert import insert_arrow
from .question_ops import SETTLEMENT_FACTS, OptionMap, carried_readings, insert_readings
from .session import transaction
from .sql import bind
from .store import Store
from .bookkeeping import complete_readings, mark_evidence_changed, settle_copies


#: Tables replay copies as they are: the evidence and everything the user said.
_COPIED = ("subjects", "relations", "sources", "messages", "message_terms", "params")


def replay(
    source: "Store",
    target_path: str | Path,
    question_records: list[dict[str, Any]],
    *,
    from_questions: dict[str, str] | None = None,
) -> tuple["Store", dict[str, Any]]:
    """A new store at ``target_path`` holding ``source``'s kept evidence under other questions.

    Copied as they are: subjects, relations, sources, messages (with their term index)
    and parameter versions. The questions are ``question_records`` (docs/formats.md question
    records, validated). For each new question, readings, settlements and rejections are
    carried from the source question of the same id (or ``from_questions[new_id]``)
    through the options both share by name; an old option with no counterpart leaves its
    mass as ``unclear``. Instructions come along; their ``rests_on`` is kept only where
    it names a new question and one of its options. New questions nothing carries to are
    listed under ``unread``: a reader can read the kept messages for them
    (:func:`doxa.inference.agent.ask.read_question`). Returns the open target store and a report.
    """
    target_path = str(target_path)
    if target_path != ":memory:" and Path(target_path).exists():
        raise StoreError(f"{target_path} exists: replay builds a new store, give a path that does not exist yet")
    batch = [dict(r) for r in question_records]
    for n, r in enumerate(batch, start=1):
        if r.get("type", "question") != "question":
            raise StoreError(f"record {n}: replay takes question records only, got type {r.get('type')!r}")
        r["type"] = "question"
    new_questions = [models.QuestionRecord.model_validate(r) for r in batch] if batch else []
    ids = [q.id for q in new_questions]
    if len(set(ids)) != len(ids):
        raise StoreError("two question records share an id: each question needs its own id")
    origin = {q.id: (from_questions or {}).get(q.id, q.id) for q in new_questions}

    target = Store.open(target_path)
    try:
        with target.writing(), source.reading():
            carried, tables = _replay_into(source, target, batch, new_questions, origin)
    except Exception:
        target.close()
        raise
    report = {
        "target": target_path,
        "copied": {t: tables[t].num_rows for t in _COPIED},
        "questions": len(new_questions),
        "carried_readings": carried,
        "unread": [qid for qid, n in carried.items() if n == 0],
    }
    return target, report


def _replay_into(source, target, batch, new_questions, origin):
    """Copy the kept evidence into ``target`` (both stores held for the whole copy)."""
    # read each result whole before the next query: a pending result dies with the next execute
    tables = {t: _as_table(source.con.execute(f"SELECT * FROM {t}").arrow()) for t in _COPIED}
    insert_arrow(target, tables, index_terms=False)
    target.ingest_records(batch)

    rows = source.execute("SELECT id, options, is_open FROM questions WHERE list_contains(?, id)",
                          [sorted(set(origin.values())) or [""]]).fetchall()
    old = {r[0]: list(r[1]) for r in rows}
    old_open = {r[0]: bool(r[2]) for r in rows}
    options = _carry_values(source, target, new_questions, origin, old, old_open)
    carried: dict[str, int] = {}
    con = target.con
    with transaction(con):
        for q in new_questions:
            src_id = origin[q.id]
            if src_id not in old:
                carried[q.id] = 0
                continue
            omap = OptionMap(old[src_id], options[q.id], {o: o for o in old[src_id] if o in options[q.id]})
            if omap.empty and not (q.open and old_open[src_id]):
                carried[q.id] = 0
                continue
            rows = carried_readings(source.con, src_id, omap, None, into_open=q.open)
            insert_readings(con, q.id, rows)
            carried[q.id] = len(rows)
            src_q = {"id": src_id}
            _copy_outcomes(source.con, con, src_q, {"id": q.id}, omap)
        _copy_instructions(source, con, options, origin)
        complete_readings(con)
        settle_copies(con)
        mark_evidence_changed(con, [], structure=True)
    return carried, tables


def _carry_values(source, target, new_questions, origin, old, old_open) -> dict[str, list[str]]:
    """Each new question's options once the values of its open source question that its record does not
    list are added to it (only where both are open), as ``option_added`` records in the target, each by
    whom and when it was added in the source (a value of the source's own record: by ``replay``, now)."""
    added_by: dict[tuple[str, str], tuple[str, Any]] = {}
    for body, by, at in source.execute("SELECT body, done_by, done_at FROM organizer_ops "
                                       "WHERE op = 'option_added' AND NOT undone").fetchall():
        effects = json.loads(body)["effects"]
        added_by.setdefault((effects["questions"][0], effects["option"]), (by, at))
    options, records = {}, []
    for q in new_questions:
        src_id = origin[q.id]
        extra = ([v for v in old[src_id] if v not in q.options]
                 if q.open and old_open.get(src_id) else [])
        options[q.id] = list(q.options) + extra
        for value in extra:
            by, at = added_by.get((src_id, value), ("replay", None))
            records.append({"type": "option_added", "question": q.id, "option": value, "by": by,
                            "at": at.isoformat() if at is not None else None})
    if records:
        target.ingest_records(records)
    return options


def _as_table(arrow) -> pa.Table:
    return arrow.read_all() if hasattr(arrow, "read_all") else arrow


def _copy_outcomes(src_con, dst_con, src_q, dst_q, omap: OptionMap) -> None:
    for answer, at, *facts in src_con.execute(bind(
            f"SELECT answer, settled_at, {SETTLEMENT_FACTS} FROM settlements WHERE question = ?",
            [src_q["id"]])).fetchall():
        if answer in omap.mapping:
            dst_con.execute(bind(f"INSERT INTO settlements (question, answer, settled_at, {SETTLEMENT_FACTS}) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                                 [dst_q["id"], omap.mapping[answer], at, *facts])).fetchall()
    for answer, at, by in src_con.execute(bind(
            "SELECT answer, rejected_at, rejected_by FROM rejections WHERE question = ?", [src_q["id"]])).fetchall():
        if answer in omap.mapping:
            dst_con.execute(bind("INSERT INTO rejections VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                                 [dst_q["id"], omap.mapping[answer], at, by])).fetchall()


def _copy_instructions(source: "Store", dst_con, options: dict[str, list[str]], origin: dict[str, str]) -> None:
    back = {}
    for new_id, old_id in origin.items():
        back.setdefault(old_id, new_id)
    rows = source.con.execute(
        "SELECT id, subject, text, given_at, given_by, rests_on_question, rests_on_answer FROM instructions").fetchall()
    for iid, subject, text, at, by, rq, ra in rows:
        new_q = back.get(rq) if rq else None
        if new_q is None or ra not in options.get(new_q, []):
            new_q, ra = None, None
        dst_con.execute(bind("INSERT INTO instructions (id, subject, text, given_at, given_by, rests_on_question, "
                             "rests_on_answer) VALUES (?, ?, ?, ?, ?, ?, ?)",
                             [iid, subject, text, at, by, new_q, ra])).fetchall()


__all__ = ["replay"]
