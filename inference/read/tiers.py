"""The read path: how beliefs are read, trying three tiers in order, cheapest first.

The belief in question ``q`` at time ``T`` is the forward filter over its events, decayed to
``T``, with the rejections made by ``T`` and the calibration map (scorer.py). Everything before
the decay depends only on the evidence and the parameters, so it can be kept; a read takes it
from the first tier that holds it for ``(q, T)``:

1. **The entry kept beside the store** (:mod:`doxa.data.belief_cache`): one question's inputs,
   kept by an earlier read; a fresh `doxa belief` process answers from it without opening the
   store. It counts while the store's file is the one it was kept for and ``T`` is at or after
   the newest evidence it was read with and after the question's last rejection
   (:func:`doxa.inference.read.states.entry_counts_at`). One question, on disk, store not open.
2. **Kept states** (``belief_states``, :mod:`doxa.inference.read.states`): the filter state after
   each question's last event, under the newest parameter version; it counts where no evidence
   of its question came after it and ``T`` is at or after its last event (and the store's
   newest message).
3. **Filtering from evidence** (:func:`doxa.inference.read.scorer.score`): the questions no kept
   state serves, read from their evidence as of ``T``.

Tiers 2 and 3 are mixed per question by :func:`doxa.inference.read.states.read_inputs`. Every
tier ends in the same assembly, :func:`doxa.inference.read.scorer.beliefs_from_states` (decay →
rejections → calibration), so they agree to rounding (tests/test_kept_states.py asks 1e-12).
With ``keep_states`` off (``Memory(keep_states=False)``) every read goes to tier 3.

The functions here take the store and a time already parsed (:func:`doxa.data.times.as_moment`):
the :class:`~doxa.inference.read.memory.Memory` parses ``at`` once, at the entry of a read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from doxa.data.store import Store
from doxa.data.times import to_days

from .params import published, typed
from .results import BeliefList
from . import scorer

if TYPE_CHECKING:
    from doxa.data.evidence import Evidence


@dataclass
class Filtered:
    """Tier 3's result with what it was computed from (an explanation shows those too)."""

    evidence: Evidence
    params: dict[str, Any]
    inputs: scorer.ModelInputs
    beliefs: scorer.Beliefs


def filtered(store: Store, question_ids: list[str] | None, at: datetime, *, subjects: list[str] | None = None,
             with_messages: bool = False) -> Filtered:
    """Tier 3 alone: the beliefs filtered from the evidence as of ``at`` (``with_messages``: the
    evidence carries message ids and texts). Inside the caller's read session, if any."""
    evidence = store.load_evidence(at, question_ids, with_messages=with_messages, subjects=subjects)
    params = published(store)
    document = typed(params)
    inputs = scorer.model_inputs(evidence, document)
    beliefs = scorer.score(evidence, document, to_days(at), inputs=inputs)
    return Filtered(evidence, params, inputs, beliefs)


def scored(store: Store, question_ids: list[str] | None, at: datetime, act_at: float, *,
           subjects: list[str] | None = None, with_messages: bool = False) -> tuple[BeliefList, Evidence]:
    """Tier 3 in a read session of its own, as a :class:`~doxa.inference.read.results.BeliefList`
    (acting at ``act_at``) with the evidence it was computed from; logs nothing."""
    with store.reading():
        found = filtered(store, question_ids, at, subjects=subjects, with_messages=with_messages)
    return BeliefList(at, found.beliefs, act_at), found.evidence


def read_beliefs(store: Store, question_ids: list[str] | None, at: datetime, *,
                 subjects: list[str] | None = None, keep_states: bool = True) -> scorer.Beliefs:
    """Beliefs of ``question_ids`` (and of every question about ``subjects``) at ``at``: tier 2
    where a kept state counts, tier 3 for the rest (every question without ``keep_states``)."""
    if not keep_states:
        return filtered(store, question_ids, at, subjects=subjects).beliefs
    from . import states

    with store.reading():
        return states.beliefs_at(store, published(store), question_ids, at, subjects=subjects)


def read_belief(store: Store, question_id: str, at: datetime, *, keep_states: bool = True) -> scorer.Beliefs:
    """One question's belief at ``at``: tier 1 where it applies, else tiers 2 and 3. An unknown
    id is a :class:`~doxa.data.errors.StoreError` naming the known ones."""
    beliefs = kept_beside(store, question_id, at) if keep_states else None
    if beliefs is None:
        with store.reading():
            store.question(question_id)  # clear error for unknown ids
            beliefs = read_beliefs(store, [question_id], at, keep_states=keep_states)
    return beliefs


def kept_beside(store: Store, question_id: str, at: datetime) -> scorer.Beliefs | None:
    """Tier 1: one question's belief through what reads keep beside the store (data/belief_cache.py):
    from a kept entry that counts, opening nothing; else read from the store (tiers 2 and 3) and
    kept for the next read. None where keeping does not apply: a store in memory, or one this
    process has open already (a write of its own may be half done), or while a writer has it."""
    if store.in_memory or store.is_open:
        return None
    from doxa.data import belief_cache

    from . import states

    # both read before the store is opened: see belief_cache
    current, stamp = belief_cache.generation(store.path), belief_cache.file_stamp(store.path)
    if current is None or stamp is None or stamp != current.stamp:
        return None
    t_query = to_days(at)
    if current.newest_days is None or t_query >= current.newest_days:  # else kept states do not count
        entry = belief_cache.load(store.path, question_id, current)
        if entry is not None and entry.get("format") == 1 and states.entry_counts_at(entry, t_query):
            return states.beliefs_from_inputs(states.inputs_from_entry(entry), t_query)
    with store.reading():
        store.question(question_id)  # clear error for unknown ids
        inputs = states.read_inputs(store, published(store), [question_id], at)
        if len(inputs.questions.ids) == 1:
            kept = states.cache_entries(inputs, at, store.rejections_up_to(inputs.questions, None))
            if question_id in kept:
                belief_cache.save(store.path, question_id, current.token, kept[question_id])
    return states.beliefs_from_inputs(inputs, t_query)


__all__ = ["Filtered", "filtered", "scored", "read_beliefs", "read_belief", "kept_beside"]
