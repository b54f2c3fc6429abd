"""Agreement is not independence (issue 15): a campaign of fresh sources, or one source
repeating itself, counts about once; corroboration by sources with a history counts in
full; the scorer and the model's filter agree on all of it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from doxa.data.store import Store
from doxa.inference.read import params, scorer
from doxa.model import independence
from doxa.model.independence import BURST_DAYS, FRESH_READINGS, independent_share

PARAMS = {"trust": {"friend": {"mean": 0.8, "lo": 0.8, "hi": 0.8, "n": 100}}}


def store_with(messages):
    """One yes/no question about ``sam``; ``messages``: (source, day, answer) triples.

    Every source also has ``history[source]`` older readings on questions of its own, so
    its history is what the test says, whatever question is loaded.
    """
    records = [{"type": "subject", "id": "sam", "name": "Sam"},
               {"type": "question", "id": "sam.q", "subject": "sam", "kind": "k", "text": "q?",
                "shape": "yes_no", "options": ["yes", "no"]}]
    sources = sorted({s for s, _, _ in messages})
    records += [{"type": "source", "id": s, "layers": ["friend"]} for s in sources]
    n = 0

    def say(source, day, question, answer):
        nonlocal n
        n += 1
        records.append({"type": "message", "id": f"m{n}", "source": source,
                        "sent_at": f"2024-02-{day:02d}T12:00:00Z", "text": f"{source} {n}"})
        records.append({"type": "reading", "message": f"m{n}", "question": question, "reader": "r",
                        "probs": {"yes": float(answer == "yes"), "no": float(answer == "no")},
                        "unclear": 0.0, "unrelated": 0.0, "one_off": 0.0})

    for source, day, answer in messages:
        say(source, day, "sam.q", answer)
    return records, say


def belief(records, question="sam.q"):
    store = Store.memory()
    store.ingest_records(records)
    evidence = store.load_evidence(None, [question])
    return evidence, scorer.score(evidence, {**PARAMS}).probs[0, 0]


def test_a_burst_of_fresh_sources_counts_about_once():
    one, _ = store_with([("fresh-0", 1, "yes")])
    six, _ = store_with([(f"fresh-{i}", 1, "yes") for i in range(6)])
    _, p_one = belief(one)
    evidence, p_six = belief(six)
    np.testing.assert_allclose(independent_share(evidence), 1 / 6)
    assert p_one > 0.75  # one claim at trust 0.8 is evidence
    assert p_six < p_one + 0.08  # six fresh accounts in one burst: about as much as one


def test_fresh_sources_days_apart_each_count():
    records, _ = store_with([(f"fresh-{i}", 1 + 3 * i, "yes") for i in range(4)])
    evidence, p = belief(records)
    assert BURST_DAYS < 3
    np.testing.assert_allclose(independent_share(evidence), 1.0)
    assert p > 0.98


def test_sources_with_a_history_corroborate_in_full():
    records, say = store_with([(f"friend-{i}", 1, "yes") for i in range(4)])
    for i in range(4):  # each has spoken before, about other questions
        for j in range(FRESH_READINGS):
            records.append({"type": "question", "id": f"sam.other{i}{j}", "subject": "sam", "kind": "k",
                            "text": f"other {i}{j}?", "shape": "yes_no", "options": ["yes", "no"]})
            say(f"friend-{i}", 20, f"sam.other{i}{j}", "no")
    evidence, p = belief(records)  # only sam.q is loaded: history counts every question
    np.testing.assert_allclose(independent_share(evidence), 1.0)
    assert p > 0.98


def test_one_source_repeating_itself_counts_once():
    once, _ = store_with([("friend-0", 1, "yes")])
    again, _ = store_with([("friend-0", 1, "yes"), ("friend-0", 1, "yes"), ("friend-0", 2, "yes")])
    _, p_once = belief(once)
    evidence, p_again = belief(again)
    np.testing.assert_allclose(independent_share(evidence), 1 / 3)
    assert p_again == pytest.approx(p_once, abs=0.06)


def test_the_models_filter_reads_the_campaign_as_the_scorer_does():
    import torch

    from doxa.inference.learn.document import derived_from_document
    from doxa.model.filter import filter_evidence
    from doxa.model.structure import ModelStructure

    records, _ = store_with([(f"fresh-{i}", 1, "yes") for i in range(5)] + [("friend-x", 1, "no"),
                                                                             ("friend-x", 2, "no")])
    store = Store.memory()
    store.ingest_records(records)
    evidence = store.load_evidence(None)
    doc = params.with_defaults(PARAMS)
    structure = ModelStructure.from_evidence(evidence)
    result, _ = filter_evidence(evidence, structure, derived_from_document(structure, doc, torch.float64))
    ours = scorer.apply_rejections(evidence, result.belief)
    np.testing.assert_allclose(ours, scorer.score(evidence, doc, calibrate=False).raw, atol=1e-10)
    assert 0.2 < ours[0, 0] < 0.8  # five fresh accounts against one friend twice: neither wins outright


@pytest.mark.parametrize("forwarder", ["fresh-0", "fresh-1", "newcomer"])
def test_a_copy_adds_nothing_to_a_sources_history(forwarder):
    """A source's history counts the messages it sent first, never a copy of one already sent:
    otherwise a forwarded copy (which is no evidence) could lift a fresh source out of a campaign."""
    text = "fresh-0 says sam goes to the gym on mondays"

    def records_with(copy: bool):
        records, say = store_with([("fresh-1", 1, "yes")])
        records.append({"type": "source", "id": "fresh-0", "layers": ["friend"]})
        records.append({"type": "source", "id": "newcomer", "layers": ["friend"]})
        say("fresh-0", 1, "sam.q", "yes")
        records[-2]["text"] = text
        for j in range(FRESH_READINGS - 1):  # one more message and either would have a history
            records.append({"type": "question", "id": f"sam.other{j}", "subject": "sam", "kind": "k",
                            "text": f"other {j}?", "shape": "yes_no", "options": ["yes", "no"]})
            say("fresh-0", 20, f"sam.other{j}", "no")
            say("fresh-1", 21, f"sam.other{j}", "no")
        if copy:
            say(forwarder, 1, "sam.q", "yes")
            records[-2].update(text=f"Fwd: {text.upper()}", sent_at="2024-02-01T13:00:00Z")
        return records

    evidence, p_without = belief(records_with(copy=False))
    np.testing.assert_allclose(independent_share(evidence), 0.5)  # two fresh sources, one burst
    evidence, p_with = belief(records_with(copy=True))
    assert evidence.n_readings == 2  # the copy is one evidence unit with its original
    np.testing.assert_allclose(independent_share(evidence), 0.5)
    assert p_with == p_without


def test_a_layer_is_a_venue_of_its_own():
    """Fresh accounts agreeing in a burst are one author only within one layer (the campaign's key
    holds the source's layer: model/independence.py); one source repeating itself is one anyway."""
    records, _ = store_with([(f"fresh-{i}", 1, "yes") for i in range(3)] + [("fresh-0", 1, "yes")])
    venues = {"fresh-0": ["family", "sibling"], "fresh-1": ["work", "colleague"], "fresh-2": ["friend", "close"]}
    for record in records:
        if record["type"] == "source":
            record["layers"] = venues[record["id"]]
    evidence, p = belief(records)
    by_source = dict(zip(evidence.sources.ids[evidence.source_index].tolist(), independent_share(evidence).tolist()))
    assert by_source == {"fresh-0": 0.5, "fresh-1": 1.0, "fresh-2": 1.0}  # fresh-0 twice: a repetition of 2
    _, p_one_layer = belief(store_with([(f"fresh-{i}", 1, "yes") for i in range(3)] + [("fresh-0", 1, "yes")])[0])
    assert p > p_one_layer


@pytest.mark.parametrize("paths, same", [
    (["friend/close/a", "friend/close/b", "friend/c"], [True, False]),
    (["a", "b", "web/c"], [True, False]),  # no layers: the root is their layer
    (["work/x/a", "family/x/b", "work/x/c"], [False, True]),
])
def test_source_layers_number_the_parent_node(paths, same):
    layer = independence.source_layers(np.array(paths, dtype=object))
    assert [bool(layer[0] == layer[i]) for i in (1, 2)] == same
    assert layer.dtype == np.int64


def soft_reading(records, message_day_probs, source="friend-0"):
    """Append ``source``'s readings of ``sam.q``, given as (day, yes-probability, unrelated), to ``records``."""
    n = sum(r["type"] == "message" for r in records)
    if not any(r["type"] == "source" and r["id"] == source for r in records):
        # an established source (a history on questions of its own), so no campaign rule applies
        records.append({"type": "source", "id": source, "layers": ["friend"]})
        for j in range(FRESH_READINGS):
            n += 1
            records.append({"type": "question", "id": f"sam.history{j}", "subject": "sam", "kind": "k",
                            "text": f"history {j}?", "shape": "yes_no", "options": ["yes", "no"]})
            records.append({"type": "message", "id": f"m{n}", "source": source,
                            "sent_at": "2024-01-01T12:00:00Z", "text": f"{source} history {n}"})
            records.append({"type": "reading", "message": f"m{n}", "question": f"sam.history{j}", "reader": "r",
                            "probs": {"yes": 1.0, "no": 0.0}, "unclear": 0.0, "unrelated": 0.0, "one_off": 0.0})
    for day, yes, unrelated in message_day_probs:
        n += 1
        records.append({"type": "message", "id": f"m{n}", "source": source,
                        "sent_at": f"2024-02-{day:02d}T12:00:00Z", "text": f"{source} {n}"})
        records.append({"type": "reading", "message": f"m{n}", "question": "sam.q", "reader": "r",
                        "probs": {"yes": yes * (1 - unrelated), "no": (1.0 - yes) * (1 - unrelated)},
                        "unclear": 0.0, "unrelated": unrelated,
                        "one_off": 0.0})
    return records


def test_near_even_readings_do_not_dilute_their_sources_clear_statement():
    """One clear "yes" beside three near-even guesses about other messages the same day: the
    guesses' top value is an accident, and the clear statement keeps nearly its full weight."""
    base, _ = store_with([("friend-1", 1, "no")])  # an older, clear "no" from someone else
    alone = soft_reading([dict(r) for r in base], [(5, 0.95, 0.0)])
    crowded = soft_reading([dict(r) for r in base], [(5, 0.95, 0.0), (5, 0.52, 0.3), (5, 0.51, 0.2), (6, 0.53, 0.25)])
    _, p_alone = belief(alone)
    evidence, p_crowded = belief(crowded)
    share = independent_share(evidence)
    clear = np.abs(evidence.probs[:, 0] - 0.95) < 1e-9
    assert share[clear][0] > 0.85  # under 1/n it was 1/4
    assert p_crowded == pytest.approx(p_alone, abs=0.03)


def test_readings_of_like_strength_share_as_before():
    evidence, _ = belief(soft_reading(store_with([])[0], [(1, 0.9, 0.0), (1, 0.8, 0.1), (2, 0.85, 0.0)]))
    np.testing.assert_allclose(independent_share(evidence), 1 / 3)  # all within a factor 2 of one another


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 9), st.floats(0.0, 1.0), st.floats(0.0, 0.9)), min_size=1, max_size=8))
def test_one_sources_vague_repeats_add_at_most_one_clear_message(readings):
    """Each reading shares with its group's members at least half as clear as it, so a group's
    statements add up to at most twice its clearest (model/independence.py)."""
    evidence, _ = belief(soft_reading(store_with([])[0], readings))
    share = independent_share(evidence)
    yes = evidence.probs[:, 0] / evidence.probs[:, :2].sum(axis=1)
    strength = (1 - evidence.unrelated) * np.abs(2 * yes - 1)
    assert np.all((share > 0) & (share <= 1))
    for side in (yes > 0.5 + 1e-9, yes < 0.5 - 1e-9):  # groups are per stated answer and burst
        rows = np.flatnonzero(side)
        order = rows[np.argsort(evidence.t[rows], kind="stable")]
        for burst in np.split(order, np.flatnonzero(np.diff(evidence.t[order]) > BURST_DAYS) + 1):
            if not len(burst):
                continue
            s = strength[burst]
            as_clear = (s[None, :] >= s[:, None] / 2 - 1e-12).sum(axis=1)
            np.testing.assert_allclose(share[burst], 1 / as_clear, rtol=1e-9)
            assert float((share[burst] * s).sum()) <= 2 * s.max() + 1e-9
