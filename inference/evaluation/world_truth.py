"""What a generated world knows and doxa has to infer: every latent, kept for scoring.

:class:`WorldTruth` holds each question's answer process (initial option, Poisson change
times and the option drawn at each), the source tree's true reliabilities ``α``, the
readers' ``τ`` and ``β``, the planted campaigns and which questions were settled;
:meth:`WorldTruth.answer_at` is the true current answer a benchmark scores against (a
change at exactly ``day`` is already in effect). :class:`ReadingTruth` is the latent story
of each reading record (``u``, ``o``, what was stated, the stating source's ``α``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from typing import Any

import numpy as np

from .story import SECONDS_PER_DAY


@dataclass
class ReadingTruth:
    """The latent story of each reading record, aligned with the reading records in stream order.

    ``role``: ``main`` (the message's own question), ``cross`` (a reading of the message
    against another question of the same subject, mostly unrelated), ``copy`` (a copy's
    reading, identical to its original's), ``planted`` (a planted false claim). On an open
    question ``answer`` and ``stated`` index its values (``questions[q]["options"]``, its slots) and
    ``n_options`` counts them; its reading record names the values listed then (world.py).
    """

    message: np.ndarray  # (R,) object message id
    question: np.ndarray  # (R,) object question id
    source: np.ndarray  # (R,) object source id
    path: np.ndarray  # (R,) object source path (layers/…/id)
    day: np.ndarray  # (R,) float64 world day of the message
    role: np.ndarray  # (R,) object
    assistant: np.ndarray  # (R,) bool
    n_options: np.ndarray  # (R,) int64
    reader: np.ndarray  # (R,) object reader name
    answer: np.ndarray  # (R,) int64 true option index at this message's time (a copy: when forwarded)
    stated: np.ndarray  # (R,) int64 option the message states
    noise: np.ndarray  # (R,) bool: stated uniformly at random (the u / one-off branch)
    u: np.ndarray  # (R,) float64 unclear + unrelated
    o: np.ndarray  # (R,) float64 one-off
    alpha: np.ndarray  # (R,) float64 true reliability of the source that stated it (a copy: the
    #                    original's source; NaN for planted claims, which are false by construction)

    def __len__(self) -> int:
        return int(self.message.shape[0])


@dataclass
class PlantedCampaign:
    question: str
    day: float
    option: str
    true_option: str
    messages: list[str]
    sources: list[str]


@dataclass
class WorldTruth:
    """Everything the world knows and doxa has to infer. Days are world days (0 = ``start``)."""

    start: datetime
    days: float
    questions: dict[str, dict[str, Any]]  # id → {subject, kind, options}
    change_times: dict[str, np.ndarray]  # id → days of the Poisson change events (redraws)
    change_values: dict[str, np.ndarray]  # id → option index drawn at each event
    initial: dict[str, int]  # id → option index at day 0
    prior: dict[str, list[float]]  # kind → π_k over the kind's options
    change_rate: dict[str, float]  # kind → λ_k per day
    kind_options: dict[str, list[str]]
    node_trust: dict[str, float]  # node path → α (internal nodes and leaves)
    node_logit: dict[str, float]
    node_depth: dict[str, int]
    node_messages: dict[str, int]  # node path → messages sent from under it (copies included)
    sigma_by_depth: list[float]
    root_trust: float
    reader_temperature: dict[str, float]
    reader_beta: dict[str, float]
    planted_sources: set[str]
    campaigns: list[PlantedCampaign]
    settled_questions: set[str]
    readings: ReadingTruth
    #: source id → {kind: option}: the option a biased source favours when wrong (biased groups only)
    favourite: dict[str, dict[str, str]] = field(default_factory=dict)
    #: source id → (world day, α from then on), for compromised sources
    compromised: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: open questions (an open kind's): question → ``[(world day, value), …]`` in the order listed; the
    #: first value comes with the question (day ``-inf``), the others with the message or settlement
    #: that first named them. ``questions[q]["options"]`` holds all of the question's values (its slots)
    open_values: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    #: open kind → θ: a change with ``n`` values taken lands on a new one with ``θ/(n+θ)``
    new_value_weight: dict[str, float] = field(default_factory=dict)

    # ------------------------------------------------------------------ time
    def day_of(self, moment: float | str | datetime | date) -> float:
        """World day of a time: a number is taken as a world day already."""
        if isinstance(moment, (int, float, np.floating, np.integer)):
            return float(moment)
        if isinstance(moment, str):
            text = moment.strip().replace("Z", "+00:00")
            moment = datetime.fromisoformat(text)
        if isinstance(moment, datetime):
            if moment.tzinfo is not None:
                moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
        elif isinstance(moment, date):
            moment = datetime(moment.year, moment.month, moment.day)
        return (moment - self.start).total_seconds() / SECONDS_PER_DAY

    # ------------------------------------------------------------------ answers
    def answer_index_at(self, question_id: str, day: float | str | datetime) -> int:
        seconds = round(self.day_of(day) * SECONDS_PER_DAY)
        times = np.rint(self.change_times[question_id] * SECONDS_PER_DAY)
        n = int(np.searchsorted(times, seconds, side="right"))
        return self.initial[question_id] if n == 0 else int(self.change_values[question_id][n - 1])

    def answer_at(self, question_id: str, day: float | str | datetime) -> str:
        """The true lasting answer at a time (a change at exactly ``day`` is already in effect)."""
        if question_id not in self.questions:
            raise KeyError(f"no question {question_id!r} in this world")
        return self.questions[question_id]["options"][self.answer_index_at(question_id, day)]

    def answers_at(self, day: float | str | datetime, question_ids: list[str] | None = None) -> dict[str, str]:
        ids = list(self.questions) if question_ids is None else question_ids
        return {q: self.answer_at(q, day) for q in ids}

    def listed_at(self, question_id: str, day: float | str | datetime) -> list[str]:
        """The values an open question lists at a time (after the records of that instant); a closed
        question's options."""
        if question_id not in self.open_values:
            return list(self.questions[question_id]["options"])
        at = self.day_of(day)
        return [value for listed, value in self.open_values[question_id] if listed <= at]

    def timeline(self, question_id: str) -> list[tuple[float, str]]:
        """``[(day, option), …]``: the answer from day 0 and at every change event that changed it."""
        options = self.questions[question_id]["options"]
        out = [(0.0, options[self.initial[question_id]])]
        for day, value in zip(self.change_times[question_id].tolist(), self.change_values[question_id].tolist()):
            if options[value] != out[-1][1]:
                out.append((day, options[value]))
        return out
