"""Maintenance's queries and its proposals (table ``proposed_ops``): merges and splits found by rule.

``doxa organize --maintain`` looks for questions that are one question asked twice and for a
question whose answers keep being true together (docs/organizer.md, "Maintenance: proposed
merges and splits"). The rules and scores are in :mod:`doxa.inference.agent.maintenance`; this
module holds the SQL they need and the table where a proposal waits for a decision:

- :func:`duplicate_pairs`: pairs of active questions with the same subject (the only pairs a
  merge could join), with what the rules compare: kinds, texts, options, shapes, evidence;
- :func:`shared_readings`: for such pairs, the readings of one message by one reader against both
  questions, as two probability matrices per pair (options in order; NaN: not named);
- :func:`split_evidence`: for active choice questions with enough evidence, one row per message
  — the mean of its readings per option (a reading that does not name an option gives it 0), its
  day — with the answers already settled or rejected. Forwarded copies and the assistant's own
  notes are left out: they are not new evidence.

A proposal's id is made from the questions it is about (``merge:A+B`` for the pair, ids in order;
``split:Q``), so maintenance run again finds the same id: a proposal still waiting is refreshed
(its record, reasons and score follow the evidence), one applied or dismissed is left as decided.
:func:`mark_applied` runs inside the transaction of the ingest that applies the record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from .connection import in_read_session
from .errors import StoreError
from .question_ops import free_op_id
from .session import transaction
from .sql import bind
from .times import utc_now

if TYPE_CHECKING:
    from .session import Session

PROPOSED, APPLIED, DISMISSED = "proposed", "applied", "dismissed"
#: Only readings that are evidence: not a forwarded copy, not the assistant's own note.
_EVIDENCE = "NOT coalesce(r.is_copy, false) AND coalesce(r.counts, true)"


def _padded(width_sql: str) -> str:
    """A reading's probs padded with NaN to its question's current number of options (an option added to an
    open question after the reading was written is past its list's end: not named)."""
    return f"list_concat(r.probs, list_transform(range({width_sql} - len(r.probs)), x -> 'NaN'::DOUBLE))"


# ---------------------------------------------------------------------------- candidates
@in_read_session
def duplicate_pairs(store: "Session", common: list[str] = (), other_kind_overlap: float = 0.0) -> list[dict[str, Any]]:
    """Pairs ``(a, b)``, ``a.id < b.id``, of active questions with the same subject (or both without) that
    share a kind or, for a pair of different kinds, a word of three letters or more outside ``common``
    and the subject's names, and at least ``other_kind_overlap`` of their such words in common (their
    Jaccard index; a rough form of the text rule's, which the caller applies exactly after). A text rule
    needs shared content words anyway; this keeps a subject with thousands of questions from making
    millions of pairs for Python to compare.

    Each: ``a`` and ``b`` as ``{id, kind, text, shape, options, open, created_at, readings}`` (readings: how
    many that count as evidence), ``subject`` and ``subject_names`` (its name and aliases: words every
    question about it shares, which the text rule leaves out)."""
    rows = store.con.execute(bind(f"""
        WITH n AS (SELECT r.question, count(*) AS n FROM readings r WHERE {_EVIDENCE} GROUP BY r.question),
             q AS (SELECT q.*, coalesce(n.n, 0) AS n_readings,
                          -- its words of 3 letters or more, without the common ones and the subject's own
                          -- names, a final s dropped as the text rule drops it
                          list_transform(list_filter(regexp_split_to_array(lower(q.text), '[^[:alnum:]]+'),
                                                     w -> length(w) > 2 AND NOT list_contains(?::VARCHAR[], w)
                                                          AND NOT list_contains(regexp_split_to_array(lower(
                                                              coalesce(sq.name, '') || ' ' || array_to_string(
                                                              coalesce(sq.aliases, []::VARCHAR[]), ' ')),
                                                              '[^[:alnum:]]+'), w)),
                                         w -> CASE WHEN length(w) > 3 AND w LIKE '%s' AND w NOT LIKE '%ss'
                                                   THEN left(w, length(w) - 1) ELSE w END) AS words
                   FROM questions q LEFT JOIN n ON n.question = q.id LEFT JOIN subjects sq ON sq.id = q.subject
                   WHERE q.status = 'active')
        SELECT a.subject, coalesce(s.name, ''), coalesce(s.aliases, []::VARCHAR[]),
               a.id, a.kind, a.text, a.shape, a.options, a.is_open, a.created_at, a.n_readings,
               b.id, b.kind, b.text, b.shape, b.options, b.is_open, b.created_at, b.n_readings
        FROM q a JOIN q b ON a.subject IS NOT DISTINCT FROM b.subject AND a.id < b.id
                         AND (a.kind = b.kind OR (list_has_any(a.words, b.words)
                              AND len(list_intersect(list_distinct(a.words), list_distinct(b.words)))
                                  >= ? * len(list_distinct(list_concat(a.words, b.words)))))
        LEFT JOIN subjects s ON s.id = a.subject
        ORDER BY a.id, b.id""", [sorted(common), float(other_kind_overlap)])).fetchall()
    keys = ("id", "kind", "text", "shape", "options", "open", "created_at", "readings")
    out = []
    for subject, name, aliases, *rest in rows:
        a, b = dict(zip(keys, rest[:8])), dict(zip(keys, rest[8:]))
        for q in (a, b):
            q["options"] = list(q["options"])
        out.append({"subject": subject, "subject_names": [name, *aliases], "a": a, "b": b})
    return out


@in_read_session
def shared_readings(store: "Session",
                    pairs: list[tuple[str, str]]) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """For each pair ``(a, b)``: the readings of a message by one reader against both questions, as
    ``(P_a, P_b)``, shapes (n, K_a) and (n, K_b) in the questions' option order (NaN: not named).
    Pairs no message was read against both are left out. One query for every pair."""
    if not pairs:
        return {}
    rows = store.con.execute(bind(f"""
        WITH p AS (SELECT unnest(?::VARCHAR[]) AS a, unnest(?::VARCHAR[]) AS b),
             r AS (SELECT r.message, r.reader, r.question, {_padded('len(q.options)')} AS probs
                   FROM readings r JOIN questions q ON q.id = r.question
                   WHERE {_EVIDENCE} AND r.question IN (SELECT a FROM p UNION SELECT b FROM p))
        SELECT p.a, p.b, list(ra.probs ORDER BY ra.message, ra.reader), list(rb.probs ORDER BY ra.message, ra.reader)
        FROM p JOIN r ra ON ra.question = p.a JOIN r rb ON rb.question = p.b AND rb.message = ra.message
                                                      AND rb.reader = ra.reader
        GROUP BY p.a, p.b""", [[a for a, _ in pairs], [b for _, b in pairs]])).fetchall()
    return {(a, b): (np.array(left, dtype=np.float64), np.array(right, dtype=np.float64))
            for a, b, left, right in rows}


@in_read_session
def split_evidence(store: "Session", min_messages: int) -> list[dict[str, Any]]:
    """Active ``choice`` questions (closed or open) with at least two options and ``min_messages`` messages
    read against them, each with: ``id, subject, kind, text, options, open``, ``messages`` (ids, oldest
    first), ``probs`` (n, K: per message the mean of its readings' probabilities, an option a reading does not
    name counting 0), ``days`` (n: the message's day, days since 1970-01-01) and ``decided`` (the answers
    settled or rejected). The mean is taken in SQL, so no loop runs over readings."""
    rows = store.con.execute(bind(f"""
        WITH q AS (SELECT q.id, q.subject, q.kind, q.text, q.options, q.is_open FROM questions q
                   WHERE q.status = 'active' AND q.shape = 'choice' AND len(q.options) >= 2),
             r AS (SELECT r.question, r.message, r.sent_at, {_padded('len(q.options)')} AS probs
                   FROM readings r JOIN q ON q.id = r.question WHERE {_EVIDENCE}),
             keep AS (SELECT question FROM r GROUP BY question HAVING count(DISTINCT message) >= ?),
             e AS (SELECT question, message, sent_at, unnest(probs) AS p, generate_subscripts(probs, 1) AS i
                   FROM r WHERE question IN (SELECT question FROM keep)),
             m AS (SELECT question, message, min(sent_at) AS sent_at, i,
                          avg(CASE WHEN isnan(p) THEN 0.0 ELSE p END) AS p
                   FROM e GROUP BY question, message, i),
             per AS (SELECT question, message, min(sent_at) AS sent_at, list(p ORDER BY i) AS probs
                     FROM m GROUP BY question, message)
        SELECT per.question, list(per.message ORDER BY per.sent_at, per.message),
               list(per.probs ORDER BY per.sent_at, per.message),
               list(CAST(floor(epoch(per.sent_at) / 86400) AS BIGINT) ORDER BY per.sent_at, per.message)
        FROM per GROUP BY per.question ORDER BY per.question""", [int(min_messages)])).fetchall()
    if not rows:
        return []
    ids = [r[0] for r in rows]
    facts = {r[0]: r[1:] for r in store.con.execute(bind(
        "SELECT id, subject, kind, text, options, is_open FROM questions WHERE list_contains(?::VARCHAR[], id)",
        [ids])).fetchall()}
    decided: dict[str, set[str]] = {}
    for qid, answer in store.con.execute(bind(
            """SELECT question, answer FROM settlements WHERE list_contains(?::VARCHAR[], question)
               UNION SELECT question, answer FROM rejections WHERE list_contains(?::VARCHAR[], question)""",
            [ids, ids])).fetchall():
        decided.setdefault(qid, set()).add(answer)
    out = []
    for qid, messages, probs, days in rows:
        subject, kind, text, options, is_open = facts[qid]
        out.append({"id": qid, "subject": subject, "kind": kind, "text": text, "options": list(options),
                    "open": bool(is_open), "messages": list(messages),
                    "probs": np.array(probs, dtype=np.float64).reshape(len(messages), len(options)),
                    "days": np.array(days, dtype=np.int64), "decided": decided.get(qid, set())})
    return out


@in_read_session
def question_ids_from(store: "Session", prefix: str) -> set[str]:
    """The question ids that start with ``prefix`` (any status): a split's new ids must be new."""
    return {i for (i,) in store.con.execute(bind("SELECT id FROM questions WHERE starts_with(id, ?)",
                                                 [prefix])).fetchall()}


@in_read_session
def free_operation_id(store: "Session", base: str) -> str:
    """``base``, or the first of ``base-2``, ``base-3``, … no stored organizer operation has."""
    return free_op_id(store.con, base)


# ---------------------------------------------------------------------------- proposals
@dataclass(frozen=True)
class Proposal:
    """One proposed operation: ``record`` is the ingest record applying it writes."""

    id: str
    op: str
    record: dict[str, Any]
    reasons: list[str]
    score: float
    proposed_at: datetime | None = None
    proposed_by: str = ""
    status: str = PROPOSED
    decided_at: datetime | None = None
    #: applied, and its operation undone since (`doxa undo`)
    undone: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "op": self.op, "score": round(self.score, 4), "status": self.status,
                "undone": self.undone, "reasons": list(self.reasons), "record": self.record,
                "proposed_at": self.proposed_at.isoformat() if self.proposed_at else None,
                "proposed_by": self.proposed_by,
                "decided_at": self.decided_at.isoformat() if self.decided_at else None}


_COLUMNS = "p.id, p.op, p.record, p.reasons, p.score, p.proposed_at, p.proposed_by, p.status, p.decided_at"


def _proposal(row: tuple) -> Proposal:
    pid, op, record, reasons, score, at, by, status, decided, undone = row
    return Proposal(pid, op, json.loads(record), json.loads(reasons), float(score), at, by, status, decided,
                    bool(undone))


def _select(where: str = "") -> str:
    return f"""SELECT {_COLUMNS}, coalesce(o.undone, false) FROM proposed_ops p
               LEFT JOIN organizer_ops o ON p.status = '{APPLIED}' AND o.id = json_extract_string(p.record, '$.id')
               {where}"""


def save_proposals(store: "Session", found: list[Proposal], *, by: str) -> dict[str, str]:
    """Store what maintenance found; returns each proposal's status before this call (``new`` where it was
    not stored). A proposal still waiting is refreshed (record, reasons, score); a decided one is not touched:
    a dismissed proposal is not proposed again, an applied one not twice."""
    if not found:
        return {}
    ids = [p.id for p in found]
    with store.writing():
        with transaction(store.con) as con:
            before = {i: s for i, s in con.execute(bind(
                "SELECT id, status FROM proposed_ops WHERE list_contains(?::VARCHAR[], id)", [ids])).fetchall()}
            now = utc_now()
            for p in found:
                con.execute(bind(
                    """INSERT INTO proposed_ops (id, op, record, reasons, score, proposed_at, proposed_by, status)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                       ON CONFLICT (id) DO UPDATE SET record = excluded.record, reasons = excluded.reasons,
                           score = excluded.score, op = excluded.op
                       WHERE proposed_ops.status = 'proposed'""",
                    [p.id, p.op, json.dumps(p.record, sort_keys=True), json.dumps(p.reasons), float(p.score), now,
                     by, PROPOSED])).fetchall()
    return {i: before.get(i, "new") for i in ids}


@in_read_session
def proposals(store: "Session", ids: list[str] | None = None) -> list[Proposal]:
    """Stored proposals (all, or those of ``ids``): waiting ones first, best score first, then decided ones,
    latest first."""
    where = "WHERE list_contains(?::VARCHAR[], p.id)" if ids is not None else ""
    sql = _select(where) + f" ORDER BY p.status <> '{PROPOSED}', p.decided_at DESC NULLS FIRST, p.score DESC, p.id"
    return [_proposal(r) for r in store.con.execute(bind(sql, [list(ids)] if ids is not None else [])).fetchall()]


def proposal(store: "Session", pid: str) -> Proposal:
    """One stored proposal; a :class:`StoreError` naming the fix when there is none."""
    found = proposals(store, [pid])
    if not found:
        raise StoreError(f"no proposal {pid!r}: `doxa ops --proposed` lists them (`doxa organize --maintain` "
                         "makes them)")
    return found[0]


def mark_applied(con, pid: str, record: dict[str, Any]) -> None:
    """Inside the ingest transaction that writes ``record``: the proposal is applied (as ``record``, whose
    operation id may have moved to a free one)."""
    con.execute(bind(f"UPDATE proposed_ops SET status = '{APPLIED}', decided_at = ?, record = ? WHERE id = ?",
                     [utc_now(), json.dumps(record, sort_keys=True), pid])).fetchall()


def dismiss(store: "Session", pid: str) -> Proposal:
    """Dismiss a waiting proposal (maintenance will not propose it again); refused for a decided one."""
    with store.writing():
        found = proposal(store, pid)
        if found.status != PROPOSED:
            raise StoreError(f"proposal {pid!r} is already {found.status}: only a waiting proposal is dismissed"
                             + (" (to reverse an applied one, `doxa undo " + found.record.get("id", "OP") + "`)"
                                if found.status == APPLIED else ""))
        with transaction(store.con) as con:
            con.execute(bind(f"UPDATE proposed_ops SET status = '{DISMISSED}', decided_at = ? WHERE id = ?",
                             [utc_now(), pid])).fetchall()
        return proposal(store, pid)


__all__ = ["PROPOSED", "APPLIED", "DISMISSED", "Proposal", "duplicate_pairs", "shared_readings", "split_evidence",
           "question_ids_from", "free_operation_id", "save_proposals", "proposals", "proposal", "mark_applied",
           "dismiss"]
