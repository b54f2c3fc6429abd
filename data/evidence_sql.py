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
WITH qs AS (
    SELECT id, row_number() OVER (ORDER BY id) - 1 AS qi FROM questions
    WHERE status = 'active' {question_filter}
),
ranked AS (
    SELECT qs.qi, r.question, r.message, r.reader, r.probs, r.unclear, r.unrelated, r.one_off,
           m.sent_at, m.source,
           row_number() OVER (PARTITION BY m.fingerprint, r.question
                              ORDER BY m.sent_at, m.id, r.reader) AS copy_rank
    FROM readings r
    JOIN qs ON qs.id = r.question
    JOIN messages m ON m.id = r.message
    JOIN sources s ON s.id = m.source
    WHERE NOT s.is_assistant AND m.sent_at <= ?
)
SELECT * FROM ranked WHERE copy_rank = 1
"""


def _question_filter(question_ids: list[str] | None) -> tuple[str, list[Any]]:
    if question_ids is None:
        return "", []
    return "AND list_contains(?, id)", [list(question_ids)]


def load(store: "Store", at: datetime | None, question_ids: list[str] | None, *, with_messages: bool) -> Evidence:
    con = store.con
    questions = store.question_table(question_ids)
    k_max = questions.k_max
    cutoff = at or _FAR_FUTURE
    qfilter, qparams = _question_filter(question_ids)
    counted = COUNTED_READINGS_SQL.format(question_filter=qfilter)
    prob_cols = ", ".join(f"coalesce(c.probs[{k + 1}], 0.0) AS p{k}" for k in range(k_max))
    message_col = ", c.message" if with_messages else ""
    cols = store.execute(
        f"""WITH c AS ({counted}),
                 src AS (SELECT DISTINCT source FROM c),
                 src_i AS (SELECT source, row_number() OVER (ORDER BY source) - 1 AS si FROM src),
                 rdr AS (SELECT DISTINCT reader FROM c),
                 rdr_i AS (SELECT reader, row_number() OVER (ORDER BY reader) - 1 AS ri FROM rdr)
            SELECT c.qi, epoch(c.sent_at) / 86400.0 AS t, src_i.si, rdr_i.ri,
                   c.unclear, c.unrelated, c.one_off, {prob_cols} {message_col}
            FROM c JOIN src_i USING (source) JOIN rdr_i USING (reader)
            ORDER BY c.qi, c.sent_at, c.message""",
        qparams + [cutoff],
    ).fetchnumpy()
    n = len(cols["qi"])
    probs = np.empty((n, k_max), dtype=np.float64)
    for k in range(k_max):
        probs[:, k] = cols[f"p{k}"]

    src = store.execute(
        f"""WITH c AS ({counted})
            SELECT s.id, s.path, coalesce(s.trust, 'NaN'::DOUBLE) AS trust
            FROM sources s WHERE s.id IN (SELECT DISTINCT source FROM c) ORDER BY s.id""",
        qparams + [cutoff],
    ).fetchnumpy()
    rdr = store.execute(
        f"WITH c AS ({counted}) SELECT DISTINCT reader FROM c ORDER BY reader", qparams + [cutoff]
    ).fetchnumpy()

    qs_cte = f"""WITH qs AS (SELECT id, options, row_number() OVER (ORDER BY id) - 1 AS qi
                             FROM questions WHERE status = 'active' {qfilter})"""
    settle = store.execute(
        f"""{qs_cte}
            SELECT qs.qi, epoch(s.settled_at) / 86400.0 AS t, list_position(qs.options, s.answer) - 1 AS a, s.how
            FROM settlements s JOIN qs ON qs.id = s.question
            WHERE s.settled_at <= ? ORDER BY qs.qi, s.settled_at""",
        qparams + [cutoff],
    ).fetchnumpy()
    reject = store.execute(
        f"""{qs_cte}
            SELECT qs.qi, epoch(r.rejected_at) / 86400.0 AS t, list_position(qs.options, r.answer) - 1 AS a
            FROM rejections r JOIN qs ON qs.id = r.question
            WHERE r.rejected_at <= ? ORDER BY qs.qi""",
        qparams + [cutoff],
    ).fetchnumpy()

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
