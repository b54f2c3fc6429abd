"""What a read returns: :class:`Belief`, the columnar :class:`BeliefList`, and :class:`Explanation`.

Plain results, built from the scorer's arrays (:class:`doxa.inference.read.scorer.Beliefs`) and
nothing else: no store, no parameters. The act flag is decided here, on the reported (rounded)
probability, so the flag and the number shown never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from . import scorer


@dataclass
class Belief:
    """The probability of every answer to one question at one time."""

    question: str
    at: str
    answers: dict[str, float]
    top: str | None
    p_top: float
    act: bool
    params_version: int | None
    text: str = ""
    subject: str | None = None
    kind: str = ""
    n_evidence: int = 0
    n_settled: int = 0
    rejected: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EvidenceTerm:
    """One evidence unit's contribution to a belief (docs/design.md §3, "Explanations")."""

    message: str
    sent_at: str
    text: str
    source: str
    source_path: str
    trust: float | None
    trust_from: str
    reader: str
    reader_probs: dict[str, float]
    unclear: float
    unrelated: float
    one_off: float
    llr_top: float | None  # log-likelihood ratio for the top answer at its time
    weight_left: float | None  # exp(-λ (T - t)): how much of it remains at the query time
    ignored: str | None = None
    changed: float = 0.0  # how surely the message reports that the answer changed (docs/design.md §2)


@dataclass
class Explanation:
    belief: Belief
    prior: dict[str, float]
    change_rate_per_day: float
    half_life_days: float | None
    terms: list[EvidenceTerm]
    settlements: list[dict[str, Any]]
    rejections: list[dict[str, Any]]
    calibration: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for s in out["settlements"] + out["rejections"]:
            for key, value in list(s.items()):
                if isinstance(value, datetime):
                    s[key] = value.isoformat()
        return out


class BeliefList(Sequence):
    """Many beliefs at one time, held as the scorer's arrays (a columnar result).

    A sequence of :class:`Belief`: ``len``, indexing, slicing and iteration behave like a
    list's, but each :class:`Belief` object is built only when that item is looked at, so
    scoring 100,000 questions does not also cost 100,000 Python objects. ``question_ids``,
    ``probs`` (Q, K_max; 0 beyond a question's options), ``p_top`` and ``act`` are the
    arrays themselves.
    """

    def __init__(self, at: datetime, beliefs: scorer.Beliefs, act_at: float):
        self.at = at
        self.beliefs = beliefs
        self.act_at = act_at
        qt = beliefs.evidence.questions
        self.questions = qt
        self.question_ids = qt.ids
        self.probs = np.round(beliefs.probs, 6)
        self.p_top = self.probs.max(axis=1) if len(self.probs) else np.zeros(0)
        self.top_index = beliefs.top
        # act on the reported (rounded) probability, so the flag and the number never disagree
        self.act = (self.p_top > 0) & (self.p_top >= act_at)
        self.params_version = beliefs.params_version
        self._rejected: dict[int, list[str]] | None = None
        self._stamp = at.isoformat()

    def __len__(self) -> int:
        return len(self.question_ids)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._make(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if not -n <= index < n:
            raise IndexError("belief index out of range")
        return self._make(index % n if n else index)

    def __iter__(self):
        return (self._make(i) for i in range(len(self)))

    def to_dicts(self) -> list[dict[str, Any]]:
        """``[b.to_dict() for b in self]``, built straight from the arrays (several times faster)."""
        qt, beliefs = self.questions, self.beliefs
        rejected = self._rejections()
        probs, p_top, top, act = self.probs.tolist(), self.p_top.tolist(), self.top_index.tolist(), self.act.tolist()
        n_evidence, n_settled = beliefs.n_evidence.tolist(), beliefs.n_settled.tolist()
        ids, texts, subjects, kinds = qt.ids.tolist(), qt.texts.tolist(), qt.subjects.tolist(), qt.kinds.tolist()
        return [{"question": str(ids[i]), "at": self._stamp, "answers": dict(zip(options, probs[i])),
                 "top": options[top[i]] if p_top[i] > 0 else None, "p_top": p_top[i], "act": act[i],
                 "params_version": self.params_version, "text": str(texts[i]), "subject": subjects[i],
                 "kind": str(kinds[i]), "n_evidence": n_evidence[i], "n_settled": n_settled[i],
                 "rejected": list(rejected.get(i, []))}
                for i, options in enumerate(qt.options)]

    def _rejections(self) -> dict[int, list[str]]:
        if self._rejected is None:
            ev = self.beliefs.evidence
            self._rejected = {}
            for qi, a in zip(ev.reject_q.tolist(), ev.reject_answer.tolist()):
                self._rejected.setdefault(qi, []).append(self.questions.options[qi][a])
        return self._rejected

    def _make(self, i: int) -> Belief:
        qt, beliefs = self.questions, self.beliefs
        options = qt.options[i]
        p_top = float(self.p_top[i])
        return Belief(
            question=str(qt.ids[i]), at=self._stamp,
            answers=dict(zip(options, self.probs[i, :len(options)].tolist())),
            top=options[int(self.top_index[i])] if p_top > 0 else None, p_top=p_top,
            act=bool(self.act[i]), params_version=self.params_version,
            text=str(qt.texts[i]), subject=qt.subjects[i], kind=str(qt.kinds[i]),
            n_evidence=int(beliefs.n_evidence[i]), n_settled=int(beliefs.n_settled[i]),
            rejected=list(self._rejections().get(i, [])),
        )


__all__ = ["Belief", "BeliefList", "EvidenceTerm", "Explanation"]
