"""The beliefs worth asking about before acting: the read-side ranking of ``doxa beliefs --uncertain``.

:func:`uncertain` lists the beliefs an agent should ask about before acting, most
useful first. Asking settles the question, so under 0/1 loss the value of asking once is
the probability that acting now would be wrong, and the question will be needed about as
often as it was lately::

    usefulness = P(wrong if acting now) × (1 + reads of the question in the RECENT_DAYS before at)

    P(wrong) = 1 − p_top                for a belief below the act threshold (the agent would act on top)
             = 1 − p(rests_on answer)   where an instruction rests on an answer that is no longer the top
                                        (the agent would follow the instruction)

(the larger where both hold). Ties go to the higher normalised entropy ``H(b) / log K``,
then to the question id. The reads counted are the read log's (``reads.asked_at`` in the
window), so a belief an agent keeps consulting rises above one nobody needs; listing the
uncertain beliefs logs no read of its own (it would inflate the very demand it ranks by).

Nothing here writes: the feedback verbs that settle what is asked are
:mod:`doxa.inference.read.feedback`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from doxa.data.store import Store

    from .results import Belief, BeliefList

#: Reads in this many days before ``at`` say how often a question is needed (see :func:`uncertain`).
RECENT_DAYS = 30.0


@dataclass
class Uncertain:
    """A belief to ask about before acting, and why (see :func:`uncertain`)."""

    belief: dict[str, Any]
    why: list[str]
    p_wrong: float
    recent_reads: int
    usefulness: float
    entropy: float  # H(b) / log K: 0 certain, 1 every answer equally likely
    instructions: list[dict[str, Any]] = field(default_factory=list)  # those resting on another answer
    ask_user: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def instruction_contradicted(top: str | None, rests_on_answer: str) -> bool:
    """An instruction is in conflict when the belief it rests on now has another top answer."""
    return top is not None and top != rests_on_answer


def uncertain(store: "Store", found: "BeliefList", at: datetime, *, limit: int | None = None) -> list[Uncertain]:
    """Of the beliefs ``found`` at ``at`` (acting at ``found.act_at``), those to ask about before
    acting, most useful first (see the module docstring)."""
    act_at = found.act_at
    n = len(found)
    if n == 0:
        return []
    ids = found.question_ids.tolist()
    position = {q: i for i, q in enumerate(ids)}
    p_wrong = np.where(found.act, 0.0, 1.0 - found.p_top)
    why: dict[int, list[str]] = {int(i): [f"below the act threshold {act_at:.2f}"]
                                 for i in np.flatnonzero(~found.act)}
    conflicts: dict[int, list[dict[str, Any]]] = {}
    for ins in store.instructions():
        i = position.get(ins["rests_on_question"])
        if i is None:
            continue
        options = found.questions.options[i]
        top = options[int(found.top_index[i])] if found.p_top[i] > 0 else None
        if not instruction_contradicted(top, ins["rests_on_answer"]):
            continue
        p_rests = float(found.probs[i, options.index(ins["rests_on_answer"])])
        p_wrong[i] = max(p_wrong[i], 1.0 - p_rests)
        conflicts.setdefault(i, []).append({"id": ins["id"], "text": ins["text"],
                                            "rests_on_answer": ins["rests_on_answer"], "p_rests_on": p_rests})
        reasons = why.setdefault(i, [])
        if "an instruction rests on another answer" not in reasons:
            reasons.append("an instruction rests on another answer")
    chosen = np.asarray(sorted(why), dtype=np.int64)
    if len(chosen) == 0:
        return []
    reads = _recent_reads(store, at, [ids[i] for i in chosen.tolist()])
    recent = np.asarray([reads.get(ids[i], 0) for i in chosen.tolist()], dtype=np.int64)
    probs = found.probs[chosen]
    k = found.questions.n_options[chosen]
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.sum(np.where(probs > 0, probs * np.log(probs), 0.0), axis=1)
    entropy = np.where(k > 1, h / np.log(np.maximum(k, 2)), 0.0)
    usefulness = np.round(p_wrong[chosen], 6) * (1 + recent)
    order = np.lexsort((np.asarray([ids[i] for i in chosen.tolist()], dtype=object), -np.round(entropy, 9),
                        -np.round(usefulness, 9)))
    if limit:
        order = order[:limit]
    picked = [int(chosen[j]) for j in order.tolist()]
    beliefs = [found[i] for i in picked]  # not logged: listing what to ask is not acting on it, and its own
    # reads would inflate the demand it ranks by
    out = []
    for j, i, b in zip(order.tolist(), picked, beliefs):
        out.append(Uncertain(
            belief=b.to_dict(), why=why[i], p_wrong=round(float(p_wrong[i]), 6), recent_reads=int(recent[j]),
            usefulness=round(float(usefulness[j]), 6), entropy=round(float(entropy[j]), 6),
            instructions=conflicts.get(i, []), ask_user=_ask_user(b, conflicts.get(i, []))))
    return out


def _recent_reads(store: "Store", at: datetime, question_ids: list[str]) -> dict[str, int]:
    rows = store.execute(
        "SELECT question, count(*) FROM reads WHERE asked_at > ? AND asked_at <= ? "
        "AND question IN (SELECT unnest(?::VARCHAR[])) GROUP BY question",
        [at - timedelta(days=RECENT_DAYS), at, sorted(question_ids)]).fetchall()
    return {q: int(c) for q, c in rows}


def _ask_user(b: "Belief", conflicts: list[dict[str, Any]]) -> str:
    if conflicts:
        c = conflicts[0]
        return (f"{b.text} The evidence now says {b.top} ({b.p_top:.2f}), not {c['rests_on_answer']}. "
                f"Keep following “{c['text']}”?")
    if b.top is None:
        return f"{b.text} Every answer has been rejected: what is it?"
    best = sorted(b.answers.items(), key=lambda kv: -kv[1])[:3]
    return f"{b.text} ({', '.join(f'{o} {p:.2f}' for o, p in best)}: not sure enough to act)"


__all__ = ["Uncertain", "uncertain", "instruction_contradicted", "RECENT_DAYS"]
