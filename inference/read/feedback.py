"""Feedback that becomes settled fact: the write verbs correct, approve, outcome, reject and instruct
(and add_option, open_question: the values an open question lists).

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

A settlement naming a value that an open question does not list yet adds it, in the same
transaction (docs/formats.md); :func:`add_option` adds one outright and :func:`open_question`
opens a closed question, each an organizer operation that ``doxa undo`` reverses.

Which beliefs are worth asking about (the read-side ranking that these verbs then settle) is
:mod:`doxa.inference.read.uncertain`.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from doxa.data.errors import IngestError, StoreError
from doxa.data.models import UNLISTED
from doxa.data.times import utc_now

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Protocol

    from doxa.data.store import Store

    from .results import Belief, BeliefList

    class Memory(Protocol):
        """What the verbs use of the :class:`~doxa.inference.read.memory.Memory` that passes itself
        in (named here, not imported: memory.py imports this module)."""

        store: Store

        def ingest(self, records: Iterable[dict], *, also=None) -> dict[str, int]: ...

        def scored(self, question_ids: list[str] | None = None, at: datetime | str | None = None, *,
                   subjects: list[str] | None = None, act_at: float | None = None,
                   with_messages: bool = False) -> tuple[BeliefList, Any]: ...

#: The verbs that settle a question, and the ``how`` each records.
SETTLING = {"correct": "correction", "approve": "approval", "outcome": "outcome"}


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


def settle(memory: "Memory", verb: str, question: str, answer: str | None, *,
           at: datetime | str | None = None, by: str = "user", note: str | None = None) -> Feedback:
    """Record that ``question``'s answer is ``answer`` (``verb``: correct, approve or outcome)."""
    how = SETTLING[verb]
    given_at = moment_of(at)
    moment = given_at or utc_now()
    probe = {"type": "settlement", "question": question, "answer": answer or "?", "at": moment.isoformat(),
             "how": how, "by": by}
    before = _belief_now(memory, question, moment)
    if before is None:
        _require_active(memory, question, probe)
    if answer is None:  # approve what was proposed: the top answer at that moment
        if before.top is None:
            raise FeedbackError(f"nothing to approve for {question!r}: every answer is rejected; name the answer")
        if before.top == UNLISTED:
            raise FeedbackError(f"the top answer of {question!r} is {UNLISTED!r}, a value not named yet: name the "
                                "value to approve (it is added to the question's options)")
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
    moment = given_at or utc_now()
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
    moment = moment_of(at) or utc_now()
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


@dataclass
class OptionChange:
    """What add_option or open_question recorded (or found already so), with the question's options after."""

    verb: str
    recorded: bool  # false: nothing new (the value was listed, the question already open)
    op: str | None  # the organizer operation written (`doxa undo OP` reverses it); None when nothing was
    record: dict[str, Any]
    options: list[str]
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _question_row(memory: "Memory", question: str) -> tuple | None:
    with memory.store.reading():
        return memory.store.execute("SELECT options, is_open, status FROM questions WHERE id = ?",
                                    [question]).fetchone()


def _value_op(memory: "Memory", verb: str, record: dict[str, Any], base_id: str, nothing_new: str | None,
              done: str) -> OptionChange:
    """Write one option_added or question_opened ``record`` under the first free operation id from
    ``base_id`` (``nothing_new``: why nothing is to be written, then nothing is)."""
    from doxa.data.question_ops import free_op_id

    question = record["question"]
    if nothing_new is None:
        with memory.store.reading():
            record["id"] = free_op_id(memory.store.con, base_id)
        _write(memory, record)
    row = _question_row(memory, question)
    options = list(row[0]) if row is not None else []
    if nothing_new is not None:
        return OptionChange(verb, False, None, record, options, nothing_new)
    return OptionChange(verb, True, record["id"], record, options, f"{done} (`doxa undo {record['id']}` reverses it)")


def add_option(memory: "Memory", question: str, value: str, *, at: datetime | str | None = None,
               by: str = "user") -> OptionChange:
    """Add ``value`` to the open question ``question``'s options (an ``option_added`` record)."""
    moment = moment_of(at)
    record: dict[str, Any] = {"type": "option_added", "question": question, "option": value, "by": by}
    if moment is not None:
        record["at"] = moment.isoformat()
    row = _question_row(memory, question)
    listed = row is not None and row[2] == "active" and value in list(row[0])
    return _value_op(memory, "add_option", record, f"option:{question}:{value}",
                     f"already an option of {question}: {value!r}" if listed else None,
                     f"added {value!r} to {question}")


def open_question(memory: "Memory", question: str, *, at: datetime | str | None = None,
                  by: str = "user") -> OptionChange:
    """Open the closed question ``question``: from now on values may be added (a ``question_opened`` record)."""
    moment = moment_of(at)
    record: dict[str, Any] = {"type": "question_opened", "question": question, "by": by}
    if moment is not None:
        record["at"] = moment.isoformat()
    row = _question_row(memory, question)
    already = row is not None and row[2] == "active" and bool(row[1])
    return _value_op(memory, "open", record, f"open:{question}", f"{question} is already open" if already else None,
                     f"opened {question}: values may be added to its options")


__all__ = ["Feedback", "FeedbackError", "OptionChange", "settle", "reject", "instruct", "instruction_id", "add_option",
           "open_question", "SETTLING"]
