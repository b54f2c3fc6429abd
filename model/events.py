"""Readings and settlements of every question as one stream sorted by (question, time)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from doxa.data.evidence import Evidence

from .changes import change_weight
from .named_values import named_so_far, stated_mass
from .independence import independent_share
from .structure import ModelStructure

#: Stand-in for log 0 of a reader probability: finite so gradients stay finite, small
#: enough that r̃ is exactly 0 after tempering for any plausible temperature.
LOG_ZERO = -1.0e4


@dataclass
class EventStream:
    """Readings and settlements of all questions merged, sorted by (question, time).

    Readings come before a settlement at the same instant (as in the scorer), so the
    prediction for a settlement uses every reading up to and including its time.
    """

    q: np.ndarray  # (E,)
    t: np.ndarray  # (E,)
    is_settlement: np.ndarray  # (E,) bool
    answer: np.ndarray  # (E,) settled option (0 for readings)
    leaf: np.ndarray  # (E,) source leaf node (0 for settlements)
    reader: np.ndarray  # (E,)
    logr: np.ndarray  # (E, K_max) log of the reader's probabilities over the options (LOG_ZERO for 0)
    #: (E, K_max) bool: the states a reading's own probabilities cover (its question's options; on an
    #: open question, the values it named and ``unlisted``): its tempered probabilities sum to 1 over
    #: these, and an unnamed value's state copies ``unlisted`` (docs/design.md §2, open questions)
    named: np.ndarray
    mix: np.ndarray  # (E,) 1 - weight: the part of a reading that says nothing about the lasting answer
    weight: np.ndarray  # (E,) c (1-u)(1-o), c the reading's independent share (doxa.model.independence)
    clarity: np.ndarray  # (E,) (1-u)(1-o): how clearly a reading states an answer, before any independence discount
    #: (E,) k of each event's reported change (doxa.model.changes): 0 for settlements, for a question's
    #: first event and where no change is reported
    change: np.ndarray
    #: (E, K_max) how surely the events before each one named each value of an open question, and
    #: (Q, K_max) after each question's last (doxa.model.named_values; 0 on a closed question)
    named_before: np.ndarray
    named_after: np.ndarray
    reading_row: np.ndarray  # (E,) row in the evidence readings, -1 for settlements
    settlement_row: np.ndarray  # (E,) row in the evidence settlements, -1 for readings
    rank: np.ndarray  # (E,) position within the question's events
    n_questions: int

    @classmethod
    def from_evidence(cls, evidence: Evidence, structure: ModelStructure,
                      settlement_mask: np.ndarray | None = None) -> "EventStream":
        k_q = structure.question_k
        n, k_max = evidence.probs.shape if evidence.n_readings else (0, max(int(k_q.max(initial=2)), 2))
        s_ok = (evidence.settle_answer >= 0) & (evidence.settle_answer < k_q[evidence.settle_q])
        if settlement_mask is not None:
            s_ok &= np.asarray(settlement_mask, dtype=bool)
        s_rows = np.flatnonzero(s_ok)
        n_s = len(s_rows)

        probs = np.asarray(evidence.probs, dtype=np.float64).reshape(n, k_max)
        k_read = k_q[evidence.q].astype(np.int64)
        valid = np.arange(k_max)[None, :] < k_read[:, None]
        named = valid if evidence.unnamed is None else valid & ~evidence.unnamed.reshape(n, k_max)
        r = np.where(valid, np.clip(probs, 0.0, None), 0.0)
        total = np.where(named, r, 0.0).sum(axis=1, keepdims=True)
        r = np.where(total > 0, r / np.where(total > 0, total, 1.0), valid / np.maximum(k_read, 1)[:, None])
        named_all = np.vstack([named, np.ones((n_s, k_max), dtype=bool)])
        with np.errstate(divide="ignore"):
            logr = np.where(r > 0, np.log(np.where(r > 0, r, 1.0)), LOG_ZERO)
        u = np.clip(evidence.unclear + evidence.unrelated, 0.0, 1.0)
        o = np.clip(evidence.one_off, 0.0, 1.0)

        q = np.r_[evidence.q, evidence.settle_q[s_rows]].astype(np.int64)
        t = np.r_[evidence.t, evidence.settle_t[s_rows]].astype(np.float64)
        order = np.lexsort((t, q))  # stable: readings before settlements at equal times
        is_settle = np.r_[np.zeros(n, bool), np.ones(n_s, bool)]
        answer = np.r_[np.zeros(n, np.int64), evidence.settle_answer[s_rows]]
        leaf = np.r_[structure.leaf_of_source[evidence.source_index] if n else np.zeros(0, np.int64),
                     np.zeros(n_s, np.int64)]
        reader = np.r_[evidence.reader_index.astype(np.int64), np.zeros(n_s, np.int64)]
        logr_all = np.vstack([logr, np.zeros((n_s, k_max))])
        clear = (1 - u) * (1 - o) if n else np.zeros(0)
        share = independent_share(evidence) if n else np.zeros(0)
        informative = share * clear
        reported = change_weight(evidence.changed, share, evidence.unrelated, evidence.one_off) if n else None
        change = np.r_[np.zeros(n) if reported is None else reported, np.zeros(n_s)]
        mix = np.r_[1 - informative, np.zeros(n_s)]
        weight = np.r_[informative, np.ones(n_s)]
        reading_row = np.r_[np.arange(n), np.full(n_s, -1)]
        settlement_row = np.r_[np.full(n, -1), s_rows]

        q = q[order]
        starts = np.r_[0, np.flatnonzero(np.diff(q)) + 1] if len(q) else np.zeros(0, np.int64)
        lengths = np.diff(np.r_[starts, len(q)])
        rank = np.arange(len(q)) - np.repeat(starts, lengths)
        change = np.where(rank > 0, change[order], 0.0)  # a first event has no earlier answer to differ from
        open_q = structure.question_open if len(structure.question_open) else np.zeros(len(k_q), dtype=bool)
        mass = stated_mass(r, named, clear, k_read, answer[n:],
                           k_q[evidence.settle_q[s_rows]])[order]
        mass[~open_q[q]] = 0.0
        named_before, named_after = named_so_far(q, rank, mass, len(k_q))
        return cls(q=q, t=t[order], is_settlement=is_settle[order], answer=answer[order], leaf=leaf[order],
                   reader=reader[order], logr=logr_all[order], named=named_all[order], mix=mix[order],
                   weight=weight[order],
                   clarity=np.r_[clear, np.ones(n_s)][order], change=change,
                   named_before=named_before, named_after=named_after,
                   reading_row=reading_row[order], settlement_row=settlement_row[order], rank=rank,
                   n_questions=len(k_q))

    def __len__(self) -> int:
        return int(self.q.shape[0])
