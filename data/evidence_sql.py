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
#: reader ranks, the fingerprint hash), sorted by (question, sent_at, fingerprint, then hashes of
#: the message id and reader name); :func:`_first_copies` then keeps, per (question,
#: fingerprint), the first row: the earliest copy — ties at the same instant broken by the hash of
#: the message id, then by reader name, so the choice never depends on ingest order.
#: Readings carry their message's facts (schema.sql), so no join to messages is needed.
READINGS_SQL = """
WITH qs AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS qi FROM questions
            WHERE status = 'active' AND {scope}),
r AS (SELECT question, source, reader, sent_at, fp, message, unclear, unrelated, one_off, {prob_cols}
      FROM readings WHERE counts AND sent_at <= ? AND question IN (SELECT id FROM qs)),
rdr AS (SELECT list(DISTINCT reader ORDER BY reader) AS names FROM r),
src AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS si FROM sources WHERE NOT is_assistant)
SELECT qs.qi, epoch(r.sent_at) / 86400.0 AS t, src.si, list_position((SELECT names FROM rdr), r.reader) - 1 AS ri,
       r.fp, r.unclear, r.unrelated, r.one_off, {prob_names} {message_col}
FROM r JOIN qs ON qs.id = r.question JOIN src ON src.id = r.source
ORDER BY qs.qi, r.sent_at, r.fp, hash(r.message), r.reader
"""


def _first_copies(q: np.ndarray, fingerprint_hash: np.ndarray) -> np.ndarray:
    """Row numbers (ascending) of the first row of each (question, fingerprint) in sorted rows."""
    if len(q) == 0:
        return np.zeros(0, dtype=np.int64)
    key = np.empty(len(q), dtype=[("q", np.int64), ("fp", np.uint64)])
    key["q"], key["fp"] = q, fingerprint_hash
    return np.sort(np.unique(key, return_index=True)[1])


def _scope(question_ids: list[str] | None, active_ids: np.ndarray, column: str) -> tuple[str, list[Any]]:
    """SQL predicate: ``column`` names one of the loaded (active) questions."""
    if question_ids is None:
        return f"{column} IN (SELECT id FROM questions WHERE status = 'active')", []
    if len(active_ids) == 0:
        return "false", []
    return f"list_contains(?, {column})", [active_ids.tolist()]


def load(store: "Store", at: datetime | None, question_ids: list[str] | None, *, with_messages: bool) -> Evidence:
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
            message_col=", r.message" if with_messages else ""),
        sparams + [cutoff],
    ).fetchnumpy()
    keep = _first_copies(np.asarray(cols["qi"], dtype=np.int64), np.asarray(cols["fp"], dtype=np.uint64))
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
                          ORDER BY m.sent_at, hash(m.id), r.reader) AS canonical,
                      row_number() OVER (PARTITION BY m.fingerprint ORDER BY m.sent_at, hash(m.id), r.reader) AS copy_rank
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
