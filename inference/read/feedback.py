"""Feedback that becomes settled fact, and the beliefs worth asking about.

An agent learns what is true from three kinds of settlement (docs/design.md §4): the user
*corrected* it, the user *approved* what it proposed, or the world showed it (an
*outcome*: the parcel arrived, the email bounced). The user may also *reject* an answer
(it reads 0 from then on) or give an *instruction* (a directive: never a belief, never
evidence). Each verb here builds the record of docs/formats.md and writes it through the one
ingest path (:meth:`doxa.data.store.Store.ingest_records`): the same validation, the same
messages, all or nothing.

Every verb is idempotent. With an explicit ``at`` the record is keyed by its time, so a
repeat is the same record and changes nothing. Without one the time is now, so a repeat
is recognised by its content instead: the question's latest settlement already says this
answer by the same verb and person (a rejection: the answer is already rejected; an
instruction: the same text for the same subject was given before). A repeat returns
``recorded: false`` with the stored record.

An approval is recorded as it was: the answer approved (by default the belief's top
answer at that moment) with the probability doxa gave it then and the parameter version
it was computed with (``p_before``, ``params_version``; corrections and outcomes record
them too). That number is a record of what was shown, never read back as a belief:
beliefs are computed on read.

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
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import numpy as np

from doxa.data.errors import IngestError, StoreError

if TYPE_CHECKING:  # the Memory passes itself in: no import of memory.py from here
    from .memory import Belief, Memory

#: The verbs that settle a question, and the ``how`` each records.
SETTLING = {"correct": "correction", "approve": "approval", "outcome": "outcome"}
#: Reads in this many days before ``at`` say how often a question is needed (see :func:`uncertain`).
RECENT_DAYS = 30.0


class FeedbackError(StoreError):
    """Feedback was refused; nothing was recorded."""


@dataclass
class Feedback:
    """What a feedback verb recorded (or found already recorded), with the belief before and after."""

    verb: str
    recorded: bool  # false: the same fact was already stored, nothing was written
    record: dict[str, Any]  # the docs/formats.md record as stored
    before: dict[str, Any] | None = None  # the belief at ``at`` without this feedback
    after: dict[str, Any] | None = None  # ... and with it
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def moment_of(at: datetime | str | None, error: type[StoreError] = FeedbackError) -> datetime | None:
    """An ``at`` argument as a datetime (None stays None: now); a string that is no time is
    refused with ``error``, naming the field. The verbs here and the agent's tools share it."""
    if at is None or isinstance(at, datetime):
        return at
    from doxa.data.times import parse_time

    try:
        return parse_time(at)
    except ValueError as err:
        raise error(f"at: {err}") from None


def _write(memory: "Memory", record: dict[str, Any]) -> dict[str, int]:
    """The one ingest path; its problems become one message without ingest's line numbers."""
    try:
        return memory.ingest([record])
    except IngestError as err:
        reasons = "; ".join(p.message for p in err.problems)
        raise FeedbackError(f"refused, nothing recorded: {reasons}") from None


def _belief_now(memory: "Memory", question: str, at: datetime) -> "Belief | None":
    found, _ = memory.scored([question], at)
    return found[0] if len(found) else None


def _require_active(memory: "Memory", question: str, record: dict[str, Any]) -> None:
    """An unknown question is refused by ingest (its message lists the known ones); an inactive one here."""
    row = memory.store.execute("SELECT status FROM questions WHERE id = ?", [question]).fetchone()
    if row is None:
        _write(memory, record)  # raises: ingest names the closest known questions
        raise AssertionError("ingest accepted a record for an unknown question")
    raise FeedbackError(f"question {question!r} is {row[0]}, not active: give feedback on the question it became "
                        "(`doxa ops` lists merges and splits)")


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def settle(memory: "Memory", verb: str, question: str, answer: str | None, *, at: datetime | str | None = None,
           by: str = "user", note: str | None = None) -> Feedback:
    """Record that ``question``'s answer is ``answer`` (``verb``: correct, approve or outcome)."""
    how = SETTLING[verb]
    given_at = moment_of(at)
    moment = given_at or _now()
    probe = {"type": "settlement", "question": question, "answer": answer or "?", "at": moment.isoformat(),
             "how": how, "by": by}
    before = _belief_now(memory, question, moment)
    if before is None:
        _require_active(memory, question, probe)
    if answer is None:  # approve what was proposed: the top answer at that moment
        if before.top is None:
            raise FeedbackError(f"nothing to approve for {question!r}: every answer is rejected; name the answer")
        answer = before.top
    stored = memory.store.settlements([question])
    if given_at is not None:  # the same time and answer: the same record (or an edit, which ingest refuses)
        stored = [s for s in stored if s["settled_at"] == given_at and s["answer"] == answer]
    if stored and (stored[-1]["answer"], stored[-1]["how"], stored[-1]["by"], stored[-1]["note"]) == (
            answer, how, by, note):
        old = {k: _iso(v) for k, v in stored[-1].items()}
        record = {"type": "settlement", "question": question, "answer": answer, "at": old["settled_at"],
                  "how": how, "by": by, "note": note, "p_before": old["p_before"],
                  "params_version": old["params_version"]}
        return Feedback(verb, False, record, before.to_dict(), before.to_dict(),
                        f"already recorded: {question} = {answer} ({how}) at {old['settled_at']}")
    p_before = before.answers.get(answer)
    record = {"type": "settlement", "question": question, "answer": answer, "at": moment.isoformat(), "how": how,
              "by": by, "note": note, "p_before": p_before, "params_version": before.params_version}
    added = _write(memory, record)
    after = _belief_now(memory, question, moment)
    recorded = bool(added.get("settlements"))
    said = f"doxa said {p_before:.2f}" if p_before is not None else ""
    message = (f"{'recorded' if recorded else 'already recorded'}: {question} = {answer} ({how}"
               f"{', ' + said if said else ''}) at {moment.isoformat()}")
    return Feedback(verb, recorded, record, before.to_dict(), after.to_dict() if after else None, message)


def reject(memory: "Memory", question: str, answer: str, *, at: datetime | str | None = None,
           by: str = "user") -> Feedback:
    """The user says ``answer`` is not it: the answer reads 0 from ``at`` on."""
    given_at = moment_of(at)
    moment = given_at or _now()
    record = {"type": "rejection", "question": question, "answer": answer, "at": moment.isoformat(), "by": by}
    before = _belief_now(memory, question, moment)
    if before is None:
        _require_active(memory, question, record)
    if given_at is None:
        earlier = [r for r in memory.store.rejections(question) if r["answer"] == answer]
        if earlier:
            record["at"], record["by"] = _iso(earlier[0]["at"]), earlier[0]["by"]
            return Feedback("reject", False, record, before.to_dict(), before.to_dict(),
                            f"already recorded: {answer!r} was rejected for {question} at {record['at']}")
    added = _write(memory, record)
    after = _belief_now(memory, question, moment)
    recorded = bool(added.get("rejections"))
    return Feedback("reject", recorded, record, before.to_dict(), after.to_dict() if after else None,
                    f"{'recorded' if recorded else 'already recorded'}: {answer!r} rejected for {question}")


def instruction_id(subject: str | None, text: str) -> str:
    """Instructions are keyed by what they say, so giving one twice is one instruction."""
    digest = hashlib.sha1(f"{subject or ''}\x1f{' '.join(text.split())}".encode("utf-8")).hexdigest()[:12]
    return f"instruction-{digest}"


def instruct(memory: "Memory", subject: str | None, text: str, *, at: datetime | str | None = None,
             by: str = "user", rests_on: dict[str, str] | None = None) -> Feedback:
    """A directive from the user about ``subject``; ``rests_on`` names the belief it presumes."""
    moment = moment_of(at) or _now()
    record: dict[str, Any] = {"type": "instruction", "id": instruction_id(subject, text), "subject": subject,
                              "text": text, "at": moment.isoformat(), "by": by}
    if rests_on is not None:
        record["rests_on"] = rests_on
    stored = [i for i in memory.store.instructions() if i["id"] == record["id"]]
    if stored:
        old = stored[0]
        record.update(at=_iso(old["given_at"]), by=old["by"])
        record.pop("rests_on", None)
        if old["rests_on_question"]:
            record["rests_on"] = {"question": old["rests_on_question"], "answer": old["rests_on_answer"]}
        return Feedback("instruct", False, record, message=f"already recorded: {record['id']} (given {record['at']})")
    added = _write(memory, record)
    return Feedback("instruct", bool(added.get("instructions")), record,
                    message=f"recorded: {record['id']}" + (f" about {subject}" if subject else ""))


def instruction_contradicted(top: str | None, rests_on_answer: str) -> bool:
    """An instruction is in conflict when the belief it rests on now has another top answer."""
    return top is not None and top != rests_on_answer


def uncertain(memory: "Memory", question_ids: list[str] | None = None, at: datetime | None = None, *,
              act_at: float | None = None, limit: int | None = None) -> list[Uncertain]:
    """The beliefs to ask about before acting, most useful first (see the module docstring)."""
    at = at or _now()
    act_at = memory.act_at if act_at is None else act_at
    found, _ = memory.scored(question_ids, at, act_at=act_at)
    n = len(found)
    if n == 0:
        return []
    ids = found.question_ids.tolist()
    position = {q: i for i, q in enumerate(ids)}
    p_wrong = np.where(found.act, 0.0, 1.0 - found.p_top)
    why: dict[int, list[str]] = {int(i): [f"below the act threshold {act_at:.2f}"]
                                 for i in np.flatnonzero(~found.act)}
    conflicts: dict[int, list[dict[str, Any]]] = {}
    for ins in memory.store.instructions():
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
    reads = _recent_reads(memory, at, [ids[i] for i in chosen.tolist()])
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


def _recent_reads(memory: "Memory", at: datetime, question_ids: list[str]) -> dict[str, int]:
    rows = memory.store.execute(
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


__all__ = ["Feedback", "FeedbackError", "Uncertain", "settle", "reject", "instruct", "uncertain",
           "instruction_id", "instruction_contradicted", "SETTLING", "RECENT_DAYS"]
