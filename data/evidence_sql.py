"""SQL that turns the store into :class:`Evidence` arrays (vectorised: fetchnumpy, no row loops)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from .evidence import HISTORY_SQL, Evidence, SourceTable, open_readings, reported_changes
from .times import FAR_FUTURE, to_days

if TYPE_CHECKING:
    from .session import Session


#: The evidence rules of docs/design.md §1 in one place: which readings count. This query returns every
#: reading of a non-assistant message up to the cut, with integer keys only (question, source and
#: reader ranks, a hash of the evidence unit = (question, fingerprint), the message id's hash),
#: unordered; :func:`_load` orders the rows by (question, sent_at, the message id's hash (top 48
#: bits), reader name) in numpy, a fraction of what a SQL sort of the wide rows costs, and
#: :func:`_first_copies` keeps the first row of each unit: the earliest copy, ties at the same
#: instant broken by the message id's hash, then the reader's name, so the choice never depends
#: on ingest order. ``explain_rows`` orders copies by the same key.
#: Readings carry their message's facts (schema.sql), so no join to messages is needed.
READINGS_SQL = """
WITH qs AS (SELECT id, (row_number() OVER (ORDER BY id) - 1)::INTEGER AS qi FROM questions WHERE status = 'active')
SELECT qs.qi, epoch_us(r.sent_at) AS t_us, hash(r.source) AS sh, hash(r.reader) AS rh,
       hash(r.question, r.fp) AS unit, hash(r.message) & ~65535::UBIGINT AS mh,
       r.unclear, r.unrelated, r.one_off, r.unlisted, r.changed, len(r.probs) AS n_listed, {prob_cols} {message_col}
FROM readings r JOIN qs ON qs.id = r.question
WHERE r.counts AND r.sent_at <= ?
"""

#: The same rows for a few questions (``doxa belief``, ``context``): keyed by the ids themselves and
#: with each source's facts joined in, so one query answers what the bulk path asks in three.
FEW_READINGS_SQL = """
SELECT r.question, epoch_us(r.sent_at) AS t_us, r.source, s.path, coalesce(s.trust, 'NaN'::DOUBLE) AS trust,
       r.reader, hash(r.question, r.fp) AS unit, hash(r.message) & ~65535::UBIGINT AS mh,
       r.unclear, r.unrelated, r.one_off, r.unlisted, r.changed, len(r.probs) AS n_listed, {prob_cols} {message_col}
FROM readings r JOIN sources s ON s.id = r.source {message_join}
WHERE r.counts AND r.sent_at <= ? AND {scope}
"""


def _index_of(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Position of each ``wanted`` hash in the small array ``keys`` (-1 where absent)."""
    if len(keys) == 0:
        return np.full(len(wanted), -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    at = np.minimum(np.searchsorted(ordered, wanted), len(keys) - 1)
    return np.where(ordered[at] == wanted, order[at], -1)


def _compact(index: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values used, ascending; each row's position among them): an O(N) np.unique."""
    used = np.flatnonzero(np.bincount(index, minlength=size))
    rank = np.zeros(max(size, 1), dtype=np.int64)
    rank[used] = np.arange(len(used))
    return used, rank[index]


def _event_order(qt_key: np.ndarray, t_us: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """Permutation sorting rows by (question, time, tie key).

    ``qt_key`` = question index · 2³² + whole seconds: one int64 argsort orders almost every
    row; rows sharing a key (same question, same second) are then put in (time, tie) order.
    """
    if len(qt_key) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(qt_key, kind="stable")
    ordered = qt_key[order]
    same = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(same):
        rows = np.unique(np.r_[same, same + 1])
        block = order[rows]
        order[rows] = block[np.lexsort((tie[block], t_us[block], qt_key[block]))]
    return order


def _first_copies(unit: np.ndarray) -> np.ndarray:
    """Row numbers (ascending) of the first row of each evidence unit (question, fingerprint hash)."""
    if len(unit) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.sort(np.unique(unit, return_index=True)[1])


def _scope(active_ids: np.ndarray, column: str) -> tuple[str, list[Any]]:
    """SQL predicate: ``column`` names one of the loaded (active) questions ``active_ids``."""
    if len(active_ids) == 0:
        return "false", []
    # a semi-join against the unnested list: list_contains, or an IN list of literals, plans and
    # runs several times slower for a hundred ids (docs/measurements/2026-12-code-choices.md)
    return f"{column} IN (SELECT unnest(?))", [active_ids.tolist()]


def load(store: "Session", at: datetime | None, question_ids: list[str] | None, *, with_messages: bool,
         subjects: list[str] | None = None) -> Evidence:
    scoped = question_ids is not None or subjects is not None
    # a subject has a few dozen questions at most in practice: count it as 20
    small = scoped and len(question_ids or []) + 20 * len(subjects or []) <= SMALL_SCOPE
    store.use_one_thread(small)  # a few questions: threads' start-up costs more than the work
    return _load(store, at, question_ids, with_messages=with_messages, subjects=subjects)


#: Up to this many questions are loaded on one DuckDB thread.
SMALL_SCOPE = 2000


def _take(values, rows: np.ndarray, dtype=None) -> np.ndarray:
    # np.take gathers several times faster than fancy indexing on these sizes
    return np.take(np.asarray(values, dtype=dtype), rows, axis=0)


def _bulk_rows(store: "Session", cutoff: datetime, prob_cols: str, message_col: str):
    """Every question's readings: integer keys, sources and readers matched by their ids' hashes."""
    cols = store.execute(READINGS_SQL.format(prob_cols=prob_cols, message_col=message_col), [cutoff]).fetchnumpy()
    # sources and readers are few: their ids' hashes are matched in numpy, cheaper than two
    # more joins over a million rows
    sources = store.execute(
        "SELECT id, hash(id) AS h, path, coalesce(trust, 'NaN'::DOUBLE) AS trust FROM sources "
        "WHERE NOT is_assistant ORDER BY id").fetchnumpy()
    readers = store.execute("SELECT DISTINCT reader, hash(reader) AS h FROM readings ORDER BY reader").fetchnumpy()
    qi = np.asarray(cols["qi"], dtype=np.int64)
    si = _index_of(np.asarray(sources["h"], dtype=np.uint64), np.asarray(cols["sh"], dtype=np.uint64))
    ri = _index_of(np.asarray(readers["h"], dtype=np.uint64), np.asarray(cols["rh"], dtype=np.uint64))
    return cols, qi, si, ri, sources, readers["reader"]


def _few_rows(store: "Session", cutoff: datetime, ids: np.ndarray, prob_cols: str, message_col: str):
    """The readings of the questions ``ids`` (sorted), with their sources' facts, in one query."""
    scope, sparams = _scope(ids, "r.question")
    # with the messages, their texts too (the context ranks by them): cheaper here than in a query of its own
    message_join = "JOIN messages m ON m.id = r.message" if message_col else ""
    cols = store.execute(FEW_READINGS_SQL.format(prob_cols=prob_cols, scope=scope, message_join=message_join,
                                                 message_col=message_col + (", m.text" if message_col else "")),
                         [cutoff] + sparams).fetchnumpy()
    qi = np.searchsorted(ids, np.asarray(cols["question"], dtype=object)).astype(np.int64) if len(ids) else \
        np.zeros(0, dtype=np.int64)
    source_ids, first, si = np.unique(np.asarray(cols["source"], dtype=object), return_index=True,
                                      return_inverse=True)
    reader_names, ri = np.unique(np.asarray(cols["reader"], dtype=object), return_inverse=True)
    sources = {"id": source_ids, "path": np.asarray(cols["path"], dtype=object)[first],
               "trust": np.asarray(cols["trust"], dtype=np.float64)[first]}
    return cols, qi, si.reshape(-1).astype(np.int64), ri.reshape(-1).astype(np.int64), sources, reader_names


def _source_readings(store: "Session", cutoff: datetime, source_ids: np.ndarray) -> np.ndarray:
    """Each of ``source_ids``'s history up to the cut (:data:`~doxa.data.evidence.HISTORY_SQL`).

    The same query whichever questions were loaded, so a source's history (what
    :mod:`doxa.model.independence` reads) is the same for ``doxa belief Q`` as for a full read.
    """
    if len(source_ids) == 0:
        return np.zeros(0, dtype=np.int64)
    rows = store.execute(HISTORY_SQL.format(sources="SELECT unnest(?)"), [cutoff, source_ids.tolist()]).fetchnumpy()
    found = np.asarray(rows["source"], dtype=object)
    order = np.argsort(found, kind="stable")
    found, n = found[order], np.asarray(rows["n"], dtype=np.int64)[order]
    at = np.minimum(np.searchsorted(found, source_ids), max(len(found) - 1, 0))
    hit = (found[at] == source_ids) if len(found) else np.zeros(len(source_ids), dtype=bool)
    return np.where(hit, n[at] if len(found) else 0, 0).astype(np.int64)


def _outcomes(store: "Session", cutoff: datetime, question_ids: list[str] | None, questions) -> dict[str, np.ndarray]:
    """Settlements (``what`` 0) and rejections (1) up to the cut, each answer as its option's index."""
    if question_ids is None:
        return store.execute(
            """SELECT 0 AS what, s.question, epoch(s.settled_at) / 86400.0 AS t,
                      list_position(q.options, s.answer) - 1 AS a, s.how
               FROM settlements s JOIN questions q ON q.id = s.question
               WHERE q.status = 'active' AND s.settled_at <= ?
               UNION ALL
               SELECT 1, r.question, epoch(r.rejected_at) / 86400.0, list_position(q.options, r.answer) - 1, NULL
               FROM rejections r JOIN questions q ON q.id = r.question
               WHERE q.status = 'active' AND r.rejected_at <= ?
               ORDER BY what, question, t, a""", [cutoff, cutoff]).fetchnumpy()
    # a few questions: their options are at hand, so no join to the questions table
    scope, params = _scope(questions.ids, "question")
    rows = store.execute(
        f"""SELECT 0 AS what, question, epoch(settled_at) / 86400.0 AS t, answer, how FROM settlements
            WHERE {scope} AND settled_at <= ?
            UNION ALL
            SELECT 1, question, epoch(rejected_at) / 86400.0, answer, NULL FROM rejections
            WHERE {scope} AND rejected_at <= ?""", params + [cutoff] + params + [cutoff]).fetchall()
    position = {qid: i for i, qid in enumerate(questions.ids.tolist())}
    rows = sorted((what, q, t, questions.options[position[q]].index(answer), how) for what, q, t, answer, how in rows)
    columns = list(zip(*rows)) if rows else [[], [], [], [], []]
    return {"what": np.asarray(columns[0], dtype=np.int64), "question": np.asarray(columns[1], dtype=object),
            "t": np.asarray(columns[2], dtype=np.float64), "a": np.asarray(columns[3], dtype=np.int64),
            "how": np.asarray(columns[4], dtype=object)}


def _load(store: "Session", at: datetime | None, question_ids: list[str] | None, *, with_messages: bool,
          subjects: list[str] | None = None) -> Evidence:
    if subjects is not None and question_ids is None:
        question_ids = []
    questions = store.question_table(question_ids, subjects=subjects)
    ids = questions.ids  # sorted as DuckDB sorts them: question index = position here
    k_max = questions.k_max
    cutoff = at or FAR_FUTURE
    prob_cols = ", ".join(f"coalesce(r.probs[{k + 1}], 0.0) AS p{k}" for k in range(k_max))
    message_col = ", r.message" if with_messages else ""
    if question_ids is None:
        cols, qi, si, ri, sources, reader_names = _bulk_rows(store, cutoff, prob_cols, message_col)
    else:
        cols, qi, si, ri, sources, reader_names = _few_rows(store, cutoff, ids, prob_cols, message_col)
    t_us = np.asarray(cols["t_us"], dtype=np.int64)
    tie = np.asarray(cols["mh"], dtype=np.uint64) | ri.astype(np.uint64)
    order = _event_order(qi * 4294967296 + t_us // 1_000_000, t_us, tie)
    keep = order[_first_copies(np.take(np.asarray(cols["unit"], dtype=np.uint64), order))]
    si, ri = np.take(si, keep), np.take(ri, keep)
    probs = np.empty((len(keep), k_max), dtype=np.float64)
    for k in range(k_max):
        probs[:, k] = _take(cols[f"p{k}"], keep, np.float64)
    unnamed = None
    if questions.is_open.any():
        unnamed = open_readings(probs, np.take(qi, keep), questions,
                                _take(cols["unlisted"], keep, np.float64), _take(cols["n_listed"], keep, np.int64))
    # compact source and reader indices over the counted rows, in id / name order
    source_rank, source_index = _compact(si, len(sources["id"]))
    reader_rank, reader_index = _compact(ri, len(reader_names))

    source_readings = _source_readings(store, cutoff, np.asarray(sources["id"], dtype=object)[source_rank])
    outcomes = _outcomes(store, cutoff, question_ids, questions)
    what = np.asarray(outcomes["what"])
    outcome_q = np.searchsorted(ids, np.asarray(outcomes["question"], dtype=object)) if len(what) else np.zeros(0)
    settled, rejected = what == 0, what == 1

    def ints(x):
        return np.asarray(x, dtype=np.int64)

    def floats(x):
        return np.asarray(x, dtype=np.float64)

    return Evidence(
        questions=questions,
        q=np.take(qi, keep),
        t=np.take(t_us, keep) / 86400e6,
        probs=probs,
        unclear=_take(cols["unclear"], keep, np.float64),
        unrelated=_take(cols["unrelated"], keep, np.float64),
        one_off=_take(cols["one_off"], keep, np.float64),
        changed=reported_changes(_take(cols["changed"], keep, np.float64)),
        unnamed=unnamed,
        source_index=source_index,
        reader_index=reader_index,
        settle_q=ints(outcome_q[settled]),
        settle_t=floats(outcomes["t"])[settled],
        settle_answer=ints(outcomes["a"])[settled],
        settle_how=np.asarray(outcomes["how"], dtype=object)[settled],
        reject_q=ints(outcome_q[rejected]),
        reject_t=floats(outcomes["t"])[rejected],
        reject_answer=ints(outcomes["a"])[rejected],
        sources=SourceTable(
            ids=np.asarray(sources["id"], dtype=object)[source_rank],
            paths=np.asarray(sources["path"], dtype=object)[source_rank],
            trust=floats(sources["trust"])[source_rank],
            readings=source_readings,
        ),
        readers=np.asarray(reader_names, dtype=object)[reader_rank],
        message=_take(cols["message"], keep, object) if with_messages else None,
        message_text=_take(cols["text"], keep, object) if "text" in cols else None,
        at=to_days(at) if at is not None else float("inf"),
    )


def explain_rows(store: "Session", question_id: str, at: datetime | None) -> list[dict[str, Any]]:
    """Every reading of one question, counted or not, with the reason it is ignored."""
    cutoff = at or FAR_FUTURE
    rows = store.execute(
        """WITH all_r AS (
               SELECT r.message, r.reader, r.probs, r.unclear, r.unrelated, r.one_off, r.unlisted, r.changed,
                      m.sent_at, m.text, m.source, m.fingerprint, s.path, s.trust, s.is_assistant,
                      first_value(m.id) OVER (PARTITION BY m.fingerprint
                          ORDER BY m.sent_at, hash(m.id) & ~65535::UBIGINT, r.reader) AS canonical,
                      row_number() OVER (PARTITION BY m.fingerprint ORDER BY m.sent_at, hash(m.id) & ~65535::UBIGINT, r.reader) AS copy_rank
               FROM readings r JOIN messages m ON m.id = r.message JOIN sources s ON s.id = m.source
               WHERE r.question = ? AND NOT s.is_assistant AND m.sent_at <= ?
           ),
           assistant AS (
               SELECT r.message, r.reader, r.probs, r.unclear, r.unrelated, r.one_off, r.unlisted, r.changed,
                      m.sent_at, m.text, m.source, m.fingerprint, s.path, s.trust, s.is_assistant,
                      NULL AS canonical, 1 AS copy_rank
               FROM readings r JOIN messages m ON m.id = r.message JOIN sources s ON s.id = m.source
               WHERE r.question = ? AND s.is_assistant
           ),
           later AS (
               SELECT r.message, r.reader, r.probs, r.unclear, r.unrelated, r.one_off, r.unlisted, r.changed,
                      m.sent_at, m.text, m.source, m.fingerprint, s.path, s.trust, s.is_assistant,
                      NULL AS canonical, 0 AS copy_rank
               FROM readings r JOIN messages m ON m.id = r.message JOIN sources s ON s.id = m.source
               WHERE r.question = ? AND NOT s.is_assistant AND m.sent_at > ?
           )
           SELECT * FROM all_r UNION ALL SELECT * FROM assistant UNION ALL SELECT * FROM later
           ORDER BY sent_at, message""",
        [question_id, cutoff, question_id, question_id, cutoff],
    ).fetchall()
    keys = ("message", "reader", "probs", "unclear", "unrelated", "one_off", "unlisted", "changed", "sent_at", "text",
            "source",
            "fingerprint", "path", "stated_trust", "is_assistant", "canonical", "copy_rank")
    out = []
    for row in rows:
        item = dict(zip(keys, row))
        if item["is_assistant"]:
            item["ignored"] = "assistant note: the assistant's own notes are never evidence"
        elif item["copy_rank"] == 0:
            item["ignored"] = "after the --at time"
        elif item["copy_rank"] > 1 and item["canonical"] == item["message"]:
            item["ignored"] = "another reader's reading of this message counts instead (one message, one vote)"
        elif item["copy_rank"] > 1:
            item["ignored"] = f"copy of {item['canonical']}: one evidence unit counts once"
        else:
            item["ignored"] = None
        out.append(item)
    return out
