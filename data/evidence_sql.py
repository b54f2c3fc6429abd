"""SQL that turns the store into :class:`Evidence` arrays (vectorised: fetchnumpy, no row loops)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from .evidence import Evidence, SourceTable

if TYPE_CHECKING:
    from .store import Store

_FAR_FUTURE = datetime(9999, 1, 1)

#: The evidence rules of DESIGN §1 in one place: which readings count.
COUNTED_READINGS_SQL = """
-- only the readings of these questions, and their messages, before any join: a read of a
-- few questions must not hash every message of the store
WITH r AS (SELECT * FROM readings WHERE {scope}),
m AS (SELECT id, sent_at, source, fingerprint FROM messages WHERE id IN (SELECT message FROM r)),
joined AS (
    SELECT r.question, r.message, r.reader, r.probs, r.unclear, r.unrelated, r.one_off,
           m.sent_at, m.source, m.fingerprint
    FROM r
    JOIN m ON m.id = r.message
    JOIN sources s ON s.id = m.source
    WHERE NOT s.is_assistant AND m.sent_at <= ?
),
-- per (fingerprint, question) the first copy counts: earliest sent, then smallest message
-- id, then reader name (a GROUP BY: a PARTITION BY window costs ~10 ms even on 50 rows)
firsts AS (
    SELECT fingerprint, question, min((sent_at, message, reader)) AS first FROM joined
    GROUP BY fingerprint, question
)
SELECT j.* EXCLUDE (fingerprint) FROM joined j JOIN firsts f
    ON f.fingerprint = j.fingerprint AND f.question = j.question AND f.first = (j.sent_at, j.message, j.reader)
"""


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
    scope, sparams = _scope(question_ids, ids, "question")
    counted = COUNTED_READINGS_SQL.format(scope=scope)
    prob_cols = ", ".join(f"coalesce(c.probs[{k + 1}], 0.0) AS p{k}" for k in range(k_max))
    message_col = ", c.message" if with_messages else ""
    # One pass over the counted readings; question, source and reader indices come from it
    # in numpy (searchsorted / np.unique compare str by code point = DuckDB's byte order of UTF-8).
    cols = store.execute(
        f"""WITH c AS ({counted})
            SELECT c.question, epoch(c.sent_at) / 86400.0 AS t, c.source, s.path,
                   coalesce(s.trust, 'NaN'::DOUBLE) AS trust, c.reader,
                   c.unclear, c.unrelated, c.one_off, {prob_cols} {message_col}
            FROM c JOIN sources s ON s.id = c.source
            ORDER BY c.question, c.sent_at, c.message""",
        sparams + [cutoff],
    ).fetchnumpy()
    n = len(cols["question"])
    probs = np.empty((n, k_max), dtype=np.float64)
    for k in range(k_max):
        probs[:, k] = cols[f"p{k}"]
    cols["qi"] = np.searchsorted(ids, np.asarray(cols["question"], dtype=object)) if n else np.zeros(0)
    source_ids, source_first, source_index = np.unique(
        np.asarray(cols["source"], dtype=str), return_index=True, return_inverse=True)
    readers, reader_index = np.unique(np.asarray(cols["reader"], dtype=str), return_inverse=True)
    src = {"id": source_ids, "path": np.asarray(cols["path"], dtype=object)[source_first],
           "trust": np.asarray(cols["trust"], dtype=np.float64)[source_first]}
    cols["si"], cols["ri"] = source_index.reshape(-1), reader_index.reshape(-1)
    rdr = {"reader": readers}

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
                          ORDER BY m.sent_at, m.id, r.reader) AS canonical,
                      row_number() OVER (PARTITION BY m.fingerprint ORDER BY m.sent_at, m.id, r.reader) AS copy_rank
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
