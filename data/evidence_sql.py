"""SQL that turns the store into :class:`Evidence` arrays (vectorised: fetchnumpy, no row loops)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from .evidence import Evidence, SourceTable

if TYPE_CHECKING:
    from .store import Store

_FAR_FUTURE = datetime(9999, 1, 1)

#: The evidence rules of DESIGN §1 in one place: which readings count. This query returns every
#: reading of a non-assistant message up to the cut, with integer keys only (question, source and
#: reader ranks, a hash of the evidence unit = (question, fingerprint)), sorted by (question,
#: sent_at, the message id's hash (top 48 bits), reader name); :func:`_first_copies` then keeps
#: the first row of each unit: the earliest copy — ties at the same instant broken by the
#: message id's hash, then the reader's name, so the choice never depends on ingest order.
#: ``explain_rows`` orders copies by the same key.
#: Readings carry their message's facts (schema.sql), so no join to messages is needed.
READINGS_SQL = """
WITH qs AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS qi FROM questions
            WHERE status = 'active' AND {scope}),
r AS (SELECT question, source, reader, sent_at, fp, message, unclear, unrelated, one_off, {prob_cols}
      FROM readings WHERE counts AND sent_at <= ? AND question IN (SELECT id FROM qs)),
rdr AS (SELECT list(DISTINCT reader ORDER BY reader) AS names FROM r),
src AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS si FROM sources WHERE NOT is_assistant),
x AS (SELECT qs.qi, epoch_us(r.sent_at) AS t_us, src.si,
             list_position((SELECT names FROM rdr), r.reader) - 1 AS ri,
             hash(r.question, r.fp) AS unit, r.message, r.unclear, r.unrelated, r.one_off, {prob_names}
      FROM r JOIN qs ON qs.id = r.question JOIN src ON src.id = r.source)
-- the tie key: high bits of the message id's hash, low 16 bits the reader's rank. Rows come back
-- unsorted: numpy orders them (:func:`_event_order`) in a fraction of what a SQL sort of the
-- wide rows costs.
SELECT qi, t_us, qi::BIGINT * 4294967296 + (t_us // 1000000) AS qt_key, si, ri, unit,
       (hash(message) & ~65535::UBIGINT) | ri::UBIGINT AS tie,
       unclear, unrelated, one_off, {x_prob_names} {message_col}
FROM x
"""


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


def _scope(question_ids: list[str] | None, active_ids: np.ndarray, column: str) -> tuple[str, list[Any]]:
    """SQL predicate: ``column`` names one of the loaded (active) questions."""
    if question_ids is None:
        return f"{column} IN (SELECT id FROM questions WHERE status = 'active')", []
    if len(active_ids) == 0:
        return "false", []
    return f"list_contains(?, {column})", [active_ids.tolist()]


def load(store: "Store", at: datetime | None, question_ids: list[str] | None, *, with_messages: bool) -> Evidence:
    # A few questions: DuckDB's thread start-up costs more than the work (−40% wall measured).
    small = question_ids is not None and len(question_ids) <= SMALL_SCOPE
    if small:
        store.con.execute("SET threads = 1")
    try:
        return _load(store, at, question_ids, with_messages=with_messages)
    finally:
        if small:
            store.con.execute("RESET threads")


#: Up to this many questions are loaded on one DuckDB thread.
SMALL_SCOPE = 2000


def _load(store: "Store", at: datetime | None, question_ids: list[str] | None, *, with_messages: bool) -> Evidence:
    questions = store.question_table(question_ids)
    ids = questions.ids  # sorted as DuckDB sorts them: question index = position here
    k_max = questions.k_max
    cutoff = at or _FAR_FUTURE
    scope, sparams = _scope(question_ids, ids, "id")
    cols = store.execute(
        READINGS_SQL.format(
            scope=scope,
            prob_cols=", ".join(f"coalesce(probs[{k + 1}], 0.0) AS p{k}" for k in range(k_max)),
            prob_names=", ".join(f"r.p{k}" for k in range(k_max)),
            x_prob_names=", ".join(f"p{k}" for k in range(k_max)),
            message_col=", message" if with_messages else ""),
        sparams + [cutoff],
    ).fetchnumpy()
    order = _event_order(np.asarray(cols["qt_key"], dtype=np.int64), np.asarray(cols["t_us"], dtype=np.int64),
                         np.asarray(cols["tie"], dtype=np.uint64))
    keep = order[_first_copies(np.asarray(cols["unit"], dtype=np.uint64)[order])]
    cols["t"] = np.asarray(cols.pop("t_us"), dtype=np.float64) / 86400e6
    cols = {name: np.asarray(values)[keep] for name, values in cols.items()}
    probs = np.empty((len(keep), k_max), dtype=np.float64)
    for k in range(k_max):
        probs[:, k] = cols[f"p{k}"]
    # compact source and reader indices over the counted rows, in id / name order as before
    source_rank, source_index = np.unique(np.asarray(cols["si"], dtype=np.int64), return_inverse=True)
    reader_rank, reader_index = np.unique(np.asarray(cols["ri"], dtype=np.int64), return_inverse=True)
    all_sources = store.execute(
        "SELECT id, path, coalesce(trust, 'NaN'::DOUBLE) AS trust FROM sources WHERE NOT is_assistant ORDER BY id"
    ).fetchnumpy()
    src = {name: np.asarray(values, dtype=object if name != "trust" else np.float64)[source_rank]
           for name, values in all_sources.items()}
    reader_names = store.execute(
        f"""SELECT DISTINCT reader FROM readings WHERE counts AND sent_at <= ? AND question IN (
                SELECT id FROM questions WHERE status = 'active' AND {scope}) ORDER BY reader""", [cutoff] + sparams
    ).fetchnumpy()["reader"]
    cols["si"], cols["ri"] = source_index.reshape(-1), reader_index.reshape(-1)
    rdr = {"reader": np.asarray(reader_names, dtype=object)[reader_rank]}

    s_scope, s_params = _scope(question_ids, ids, "s.question")
    r_scope, r_params = _scope(question_ids, ids, "r.question")
    outcomes = store.execute(
        f"""SELECT 0 AS what, s.question, epoch(s.settled_at) / 86400.0 AS t,
                   list_position(q.options, s.answer) - 1 AS a, s.how
            FROM settlements s JOIN questions q ON q.id = s.question
            WHERE {s_scope} AND s.settled_at <= ?
            UNION ALL
            SELECT 1, r.question, epoch(r.rejected_at) / 86400.0, list_position(q.options, r.answer) - 1, NULL
            FROM rejections r JOIN questions q ON q.id = r.question
            WHERE {r_scope} AND r.rejected_at <= ?
            ORDER BY what, question, t, a""",
        s_params + [cutoff] + r_params + [cutoff],
    ).fetchnumpy()
    what = np.asarray(outcomes["what"])
    outcome_q = np.searchsorted(ids, np.asarray(outcomes["question"], dtype=object)) if len(what) else np.zeros(0)
    settle = {"qi": outcome_q[what == 0], "t": np.asarray(outcomes["t"])[what == 0],
              "a": np.asarray(outcomes["a"])[what == 0], "how": np.asarray(outcomes["how"], dtype=object)[what == 0]}
    reject = {"qi": outcome_q[what == 1], "t": np.asarray(outcomes["t"])[what == 1],
              "a": np.asarray(outcomes["a"])[what == 1]}

    def ints(x):
        return np.asarray(x, dtype=np.int64)

    def floats(x):
        return np.asarray(x, dtype=np.float64)

    from .store import to_days

    return Evidence(
        questions=questions,
        q=ints(cols["qi"]),
        t=floats(cols["t"]),
        probs=probs,
        unclear=floats(cols["unclear"]),
        unrelated=floats(cols["unrelated"]),
        one_off=floats(cols["one_off"]),
        source_index=ints(cols["si"]),
        reader_index=ints(cols["ri"]),
        settle_q=ints(settle["qi"]),
        settle_t=floats(settle["t"]),
        settle_answer=ints(settle["a"]),
        settle_how=np.asarray(settle["how"], dtype=object),
        reject_q=ints(reject["qi"]),
        reject_t=floats(reject["t"]),
        reject_answer=ints(reject["a"]),
        sources=SourceTable(
            ids=np.asarray(src["id"], dtype=object),
            paths=np.asarray(src["path"], dtype=object),
            trust=floats(src["trust"]),
        ),
        readers=np.asarray(rdr["reader"], dtype=object),
        message=np.asarray(cols["message"], dtype=object) if with_messages else None,
        at=to_days(at) if at is not None else float("inf"),
    )


def explain_rows(store: "Store", question_id: str, at: datetime | None) -> list[dict[str, Any]]:
    """Every reading of one question, counted or not, with the reason it is ignored."""
    cutoff = at or _FAR_FUTURE
    rows = store.execute(
        """WITH all_r AS (
               SELECT r.message, r.reader, r.probs, r.unclear, r.unrelated, r.one_off,
                      m.sent_at, m.text, m.source, m.fingerprint, s.path, s.trust, s.is_assistant,
                      first_value(m.id) OVER (PARTITION BY m.fingerprint
                          ORDER BY m.sent_at, hash(m.id) & ~65535::UBIGINT, r.reader) AS canonical,
                      row_number() OVER (PARTITION BY m.fingerprint ORDER BY m.sent_at, hash(m.id) & ~65535::UBIGINT, r.reader) AS copy_rank
               FROM readings r JOIN messages m ON m.id = r.message JOIN sources s ON s.id = m.source
               WHERE r.question = ? AND NOT s.is_assistant AND m.sent_at <= ?
           ),
           assistant AS (
               SELECT r.message, r.reader, r.probs, r.unclear, r.unrelated, r.one_off,
                      m.sent_at, m.text, m.source, m.fingerprint, s.path, s.trust, s.is_assistant,
                      NULL AS canonical, 1 AS copy_rank
               FROM readings r JOIN messages m ON m.id = r.message JOIN sources s ON s.id = m.source
               WHERE r.question = ? AND s.is_assistant
           ),
           later AS (
               SELECT r.message, r.reader, r.probs, r.unclear, r.unrelated, r.one_off,
                      m.sent_at, m.text, m.source, m.fingerprint, s.path, s.trust, s.is_assistant,
                      NULL AS canonical, 0 AS copy_rank
               FROM readings r JOIN messages m ON m.id = r.message JOIN sources s ON s.id = m.source
               WHERE r.question = ? AND NOT s.is_assistant AND m.sent_at > ?
           )
           SELECT * FROM all_r UNION ALL SELECT * FROM assistant UNION ALL SELECT * FROM later
           ORDER BY sent_at, message""",
        [question_id, cutoff, question_id, question_id, cutoff],
    ).fetchall()
    keys = ("message", "reader", "probs", "unclear", "unrelated", "one_off", "sent_at", "text", "source",
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
