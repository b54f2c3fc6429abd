"""The belief the scorer would have shown just before each settlement: what calibration and
model choice are scored on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from doxa.data.evidence import Evidence
from doxa.inference.learn.document import derived_from_document
from doxa.model.filter import filter_evidence
from doxa.model.structure import ModelStructure


@dataclass
class SettlementPredictions:
    """For each settlement: the belief just before it, and what it turned out to be."""

    probs: np.ndarray  # (n, K_max)
    answer: np.ndarray  # (n,)
    question: np.ndarray  # (n,) question index
    t: np.ndarray  # (n,) days
    out_of_sample: bool


def predict_settlements(evidence: Evidence, structure: ModelStructure, document: dict[str, Any],
                        rows: np.ndarray | None = None) -> SettlementPredictions:
    """The belief the scorer would have shown just before each settlement (``rows``: which ones)."""
    derived = derived_from_document(structure, document)
    result, stream = filter_evidence(evidence, structure, derived)
    at_settlement = np.flatnonzero(stream.is_settlement)
    s_rows = stream.settlement_row[at_settlement]
    if rows is not None:
        keep = np.isin(s_rows, rows)
        at_settlement, s_rows = at_settlement[keep], s_rows[keep]
    probs = result.predictive[at_settlement]
    q = evidence.settle_q[s_rows]
    t = evidence.settle_t[s_rows]
    probs = _zero_rejected(evidence, probs, q, t)
    return SettlementPredictions(probs=probs, answer=evidence.settle_answer[s_rows], question=q, t=t,
                                 out_of_sample=False)


def _zero_rejected(evidence: Evidence, probs: np.ndarray, q: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Options the user had rejected by then read 0, as in the scorer."""
    if len(evidence.reject_q) == 0 or len(q) == 0:
        return probs
    probs = probs.copy()
    for rq, rt, ra in zip(evidence.reject_q.tolist(), evidence.reject_t.tolist(),
                          evidence.reject_answer.tolist()):  # rejections are few; settlements vectorised
        probs[(q == rq) & (t >= rt), ra] = 0.0
    total = probs.sum(axis=1, keepdims=True)
    return np.where(total > 0, probs / np.where(total > 0, total, 1.0), probs)
