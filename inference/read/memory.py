"""The Python API programs use: open a store, ingest, read beliefs and explanations.

>>> import doxa
>>> mem = doxa.open(":memory:")
>>> mem.ingest_file("maya.jsonl")                         # doctest: +SKIP
>>> mem.belief("maya.diet").answers                       # doctest: +SKIP
{'vegetarian': 0.12, 'eats fish': 0.81, 'eats meat': 0.07}

Reads never change beliefs; each read is logged in ``reads`` so calibration can be
checked against outcomes later. Nothing here imports torch, pyro or pandas.

:class:`Memory` is a facade: it parses a read's ``at`` once, at the read's entry, and hands the
work to the modules that own it — which tier a belief is read from (:mod:`.tiers`), what a read
returns (:mod:`.results`), explanations (:mod:`.explain`), the beliefs worth asking about
(:mod:`.uncertain`) and the feedback verbs (:mod:`.feedback`). What it keeps itself is the store,
the act threshold, the read log and an ingest's follow-up (the kept states and belief-cache
entries of what it touched). Raw messages (``remember``, ``organize``) are the agent
layer's: :class:`doxa.inference.agent.memory.AgentMemory`, which :func:`doxa.open` returns.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import date, datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from doxa.data import ingest_files
from doxa.data.errors import StoreError
from doxa.data.read_log import SMALL_LOG
from doxa.data.store import Store
from doxa.data.times import as_moment, utc_now

from .params import DEFAULT_ACT_AT, published
from .results import Belief, BeliefList, Explanation
from . import tiers

if TYPE_CHECKING:
    from .forget import Forgotten
    from . import feedback, uncertain
    from .history import History


class Memory:
    """A doxa store plus the scorer: ingest, beliefs, explanations, feedback. Create with :func:`doxa.open`,
    which adds ``remember``/``organize`` for raw messages (:class:`doxa.inference.agent.memory.AgentMemory`)."""

    def __init__(self, store: Store, *, act_at: float = DEFAULT_ACT_AT, log_reads: bool = True,
                 keep_states: bool = True):
        self.store = store
        self.act_at = act_at
        self.log_reads = log_reads
        #: read beliefs from the kept filter states (inference/read/states.py); off: filter every read from scratch
        self.keep_states = keep_states

    def _after_ingest(self, changes: dict[str, Any]) -> None:
        """An ingest's follow-up, inside its write session (no other writer came in between):
        refresh the kept states of the questions it touched, and hand the store the belief-cache
        entries of what the session changed (best effort: a cache not filled is a slower first read)."""
        self._refresh_states(changes)
        try:
            keep = self.store.questions_to_keep()
            if keep:
                self.store.keep_at_close(self._entries_at_close(keep))
        except Exception:  # noqa: BLE001
            pass

    def _refresh_states(self, changes: dict[str, Any]) -> None:
        from . import states

        touched = changes.get("questions") or set()
        if self.keep_states and touched and not changes.get("structure") and len(touched) <= states.REFRESH_AT_INGEST:
            states.refresh(self.store, self.params(), sorted(touched))

    def _entries_at_close(self, question_ids: list[str]) -> dict[str, dict[str, Any]]:
        """What reads of ``question_ids`` would keep beside the store (data/belief_cache.py), read
        by a writer just before it closes the store, so that their first read opens nothing."""
        if not self.keep_states:
            return {}
        from . import states

        at = utc_now()
        with self.store.reading():
            inputs = states.read_inputs(self.store, self.params(), question_ids, at)
            return states.cache_entries(inputs, at, self.store.rejections_up_to(inputs.questions, None))

    @classmethod
    def open(cls, path=None, *, lock_timeout: float | None = None, **kwargs) -> "Memory":
        """A Memory over the store at ``path``; the file is held only while an operation runs
        (see :class:`~doxa.data.store.Store`), so other processes read and write it meanwhile."""
        return cls(Store.open(path, lock_timeout=lock_timeout), **kwargs)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- ingest
    def ingest_file(self, path) -> dict[str, int]:
        with ingest_files.file(self.store, path) as done:
            self._after_ingest(done.changes)
        return done.added

    def ingest_lines(self, lines: Iterable[str]) -> dict[str, int]:
        with ingest_files.lines(self.store, lines) as done:
            self._after_ingest(done.changes)
        return done.added

    def ingest(self, records: Iterable[dict], *, also=None) -> dict[str, int]:
        """Ingest records, all or nothing. ``also(con)`` runs inside the same transaction (see
        :func:`doxa.data.ingest_files.batch`)."""
        with ingest_files.records(self.store, records, also=also) as done:
            self._after_ingest(done.changes)
        return done.added

    # ---------------------------------------------------------------- export and import
    def export(self, out, *, subject: str | None = None, since: "datetime | str | None" = None) -> dict[str, int]:
        """Write the store's records (every one, or those about ``subject``, or dated from ``since``) as the
        JSON Lines `doxa ingest` takes (docs/formats.md, `doxa export`) to ``out``: a text stream, or a file
        path (written whole under a temporary name, then renamed into place). Returns records per type."""
        from doxa.data import export as exporting

        selection = exporting.Selection(subject, as_moment(since))
        if hasattr(out, "write"):
            return exporting.export(self.store, out, selection)
        return exporting.export_to_file(self.store, out, selection)

    def import_file(self, format: str, path, *, at: "datetime | str | None" = None) -> dict[str, Any]:
        """Import another memory's file (``format``: ``mem0`` or ``mcp-memory``, docs/formats.md "Import
        formats") as messages pending organization (`doxa organize`), all or nothing; importing it again
        adds nothing. ``at`` dates what the file does not (mcp-memory; default its modification time)."""
        from doxa.data import importers
        from doxa.data.errors import IngestError

        foreign = importers.read(format, path, at=as_moment(at))
        try:
            added = self.ingest(foreign.records_for(self.store), also=foreign.also)
        except IngestError as err:
            raise foreign.refused(err) from None
        return {"format": format, "file": str(path), "items": foreign.items,
                "messages": len(set(foreign.messages)), "added": added, "pending_added": foreign.pending_added}

    # ---------------------------------------------------------------- params
    def params(self) -> dict[str, Any]:
        """The parameter document reads use now (:func:`doxa.inference.read.params.published`)."""
        return published(self.store)

    # ---------------------------------------------------------------- beliefs
    # Each read parses its ``at`` once, here at its entry (:func:`_read_time`); which tier a belief
    # comes from is :mod:`doxa.inference.read.tiers`'s choice, what it looks like :mod:`.results`'.
    def belief(self, question_id: str, at: "datetime | str | None" = None, *, act_at: float | None = None) -> Belief:
        at = _read_time(at)
        found = BeliefList(at, tiers.read_belief(self.store, question_id, at, keep_states=self.keep_states),
                           self._act_at(act_at))
        if not found:
            raise StoreError(f"question {question_id!r} is not active (merged or split): `doxa beliefs` lists active ones")
        self._log(at, found)
        return found[0]

    def beliefs(self, subject: str | None = None, at: "datetime | str | None" = None, *,
                question_ids: list[str] | None = None, act_at: float | None = None) -> BeliefList:
        """Every active belief (or a subject's, or the named questions'), in question-id order.

        The result is a :class:`BeliefList`: a sequence computed as arrays in one pass,
        whose :class:`Belief` objects are made only when an item is looked at.
        """
        at = _read_time(at)
        with self.store.reading():
            if subject is not None:
                question_ids = self._subject_question_ids(subject)
            beliefs = tiers.read_beliefs(self.store, question_ids, at, keep_states=self.keep_states)
        found = BeliefList(at, beliefs, self._act_at(act_at))
        self._log(at, found)
        return found

    def scored(self, question_ids: list[str] | None = None, at: "datetime | str | None" = None, *,
               subjects: list[str] | None = None, act_at: float | None = None,
               with_messages: bool = False) -> tuple[BeliefList, Any]:
        """Beliefs of ``question_ids`` and of every question about ``subjects``, filtered from the
        evidence (tier 3), with that evidence (``with_messages``: message ids and texts too). Nothing
        is logged: log what is answered with :meth:`log`."""
        return tiers.scored(self.store, question_ids, _read_time(at), self._act_at(act_at), subjects=subjects,
                            with_messages=with_messages)

    def _act_at(self, act_at: float | None) -> float:
        return act_at if act_at is not None else self.act_at

    def log(self, at: datetime, found: "Sequence[Belief]") -> None:
        """Record these beliefs in the read log (when logging is on), as every read does."""
        self._log(at, found)

    def _log(self, at: datetime, found: "Sequence[Belief]") -> None:
        if not self.log_reads or not len(found):
            return
        if isinstance(found, BeliefList) and len(found) > SMALL_LOG:
            beliefs, qt = found.beliefs, found.questions
            self.store.log_belief_matrix(qt.ids, at, beliefs.probs, qt.n_options, beliefs.params_version)
            return
        self.store.log_reads([(b.question, at, list(b.answers.values()), b.top or "", b.p_top, b.params_version)
                              for b in found])

    def _subject_question_ids(self, subject: str) -> list[str]:
        question_ids = self.store.question_ids_for_subject(subject)
        if not question_ids and subject not in {s["id"] for s in self.store.subjects()}:
            raise StoreError(f"no subject {subject!r}: known subjects are listed by `doxa beliefs`")
        return question_ids

    def refresh_states(self, question_ids: list[str] | None = None) -> int:
        """Recompute the kept filter states (of ``question_ids``, or all) in one write; returns how many.

        `doxa train` keeps every state and an ingest those it touches, so this is needed only
        after bulk imports or merges, when reads would otherwise filter many questions anew.
        """
        from . import states

        return states.refresh(self.store, self.params(), question_ids)

    # ---------------------------------------------------------------- explanations
    def explain(self, question_id: str, at: "datetime | str | None" = None) -> Explanation:
        """The belief term by term: each message, its source and trust, its weight left after decay
        (:mod:`doxa.inference.read.explain`)."""
        from .explain import explanation  # as _feedback: imported by the one verb that needs it

        at = _read_time(at)
        with self.store.reading():
            return explanation(self.store, question_id, at, self.act_at)

    # ---------------------------------------------------------------- history
    def history(self, question_id: str, start: "datetime | str | None" = None, end: "datetime | str | None" = None,
                *, act_at: float | None = None) -> "History":
        """The top answer and its probability after each change of the question's evidence from ``start``
        to ``end`` (default: from the first event to now), and where the top answer changed
        (:mod:`doxa.inference.read.history`). Nothing is logged: it is no read to act on."""
        from .history import history  # as _feedback: imported by the one verb that needs it

        start_at = as_moment(start)
        end_at = _read_time(end)
        if start_at is not None and start_at > end_at:
            raise StoreError(f"the window starts ({start_at:%Y-%m-%d %H:%M}) after it ends ({end_at:%Y-%m-%d %H:%M}): "
                             "give --from before --to")
        return history(self.store, question_id, start=start_at, end=end_at, act_at=self._act_at(act_at))

    # ---------------------------------------------------------------- feedback (settled facts)
    # Each verb writes one docs/formats.md record through :meth:`ingest` and is idempotent; see
    # doxa.inference.read.feedback for what is recorded and how a repeat is recognised.
    def correct(self, question: str, answer: str, *, at: datetime | str | None = None,
                by: str = "user") -> feedback.Feedback:
        """The user corrected the assistant: ``question``'s answer is ``answer`` (a settlement)."""
        return _feedback().settle(self, "correct", question, answer, at=at, by=by)

    def approve(self, question: str, answer: str | None = None, *, at: datetime | str | None = None,
                by: str = "user") -> feedback.Feedback:
        """The user approved what was proposed: ``answer``, by default the top answer at ``at``,
        recorded with the probability doxa gave it then."""
        return _feedback().settle(self, "approve", question, answer, at=at, by=by)

    def outcome(self, question: str, answer: str, *, how: str, at: datetime | str | None = None,
                by: str = "world") -> feedback.Feedback:
        """The world showed the answer (``how``: "the parcel arrived")."""
        verbs = _feedback()
        if not how or not how.strip():
            raise verbs.FeedbackError("an outcome needs how the world showed it, e.g. how=\"the parcel arrived\"")
        return verbs.settle(self, "outcome", question, answer, at=at, by=by, note=how)

    def reject(self, question: str, answer: str, *, at: datetime | str | None = None,
               by: str = "user") -> feedback.Feedback:
        """The user says ``answer`` is not it: it reads 0 from ``at`` on."""
        return _feedback().reject(self, question, answer, at=at, by=by)

    def instruct(self, subject: str | None, text: str, *, at: datetime | str | None = None, by: str = "user",
                 rests_on: dict[str, str] | None = None) -> feedback.Feedback:
        """A directive from the user (never a belief, never evidence); ``rests_on``:
        ``{"question": ..., "answer": ...}``, the belief it presumes."""
        return _feedback().instruct(self, subject, text, at=at, by=by, rests_on=rests_on)

    def add_option(self, question: str, value: str, *, by: str = "user",
                   at: datetime | str | None = None) -> feedback.OptionChange:
        """Add ``value`` to the open question ``question``'s options (an ``option_added``; `doxa undo`
        reverses it while nothing stored names the value). A value already listed is nothing new."""
        return _feedback().add_option(self, question, value, at=at, by=by)

    def open_question(self, question: str, *, by: str = "user",
                      at: datetime | str | None = None) -> feedback.OptionChange:
        """Open the closed choice question ``question``: values may be added to its options from now on
        (a ``question_opened``; `doxa undo` reverses it)."""
        return _feedback().open_question(self, question, at=at, by=by)

    # ---------------------------------------------------------------- erasure
    def forget(self, kind: str, target: str, *, reason: str | None = None, by: str = "user",
               dry_run: bool = False) -> "Forgotten":
        """Erase a ``kind`` ("message", "source" or "subject") and everything derived from it, rewriting the
        store file so that its bytes leave the disk; ``dry_run``: only say what would go
        (:mod:`doxa.inference.read.forget`). Run it outside any open session."""
        from .forget import forget  # as _feedback: imported by the one verb that needs it

        return forget(self, kind, target, reason=reason, by=by, dry_run=dry_run)

    def uncertain(self, subject: str | None = None, at: datetime | None = None, *, act_at: float | None = None,
                  limit: int | None = None) -> list[uncertain.Uncertain]:
        """The beliefs to ask about before acting — below the act threshold, or with an instruction
        resting on another answer — most useful first (doxa.inference.read.uncertain defines "useful")."""
        from .uncertain import uncertain  # as _feedback: imported by the one verb that needs it

        at = _read_time(at)
        question_ids = self._subject_question_ids(subject) if subject is not None else None
        found, _ = self.scored(question_ids, at, act_at=act_at)
        return uncertain(self.store, found, at, limit=limit)


def _read_time(at: "datetime | date | str | None") -> datetime:
    """A read's ``at`` parsed once, at the read's entry: None is now (see :func:`doxa.data.times.as_moment`)."""
    return as_moment(at) or utc_now()


def _feedback():
    """doxa.inference.read.feedback, imported at the first feedback verb: a read does not need it,
    and a fresh `doxa belief` process pays for every module it imports."""
    from . import feedback

    return feedback


@contextmanager
def open_store(path=None, **kwargs) -> Iterator[Memory]:
    """The store for one operation: opened here, closed (the file released) when the block ends.

    Long-lived owners (the MCP server) open the store through this for every request rather
    than hold the file, so other processes (`doxa train`, the CLI) can use it between requests.
    """
    memory = Memory.open(path, **kwargs)
    try:
        yield memory
    finally:
        memory.close()


__all__ = ["Memory", "open_store"]
