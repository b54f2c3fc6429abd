"""Robust trust (issue 15): noise is not contrarian, settled facts come first. One small
hand-built store (tests/training_data.py, ``robust_records``), fitted once with the
defaults and once without the settled-first cut."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from doxa.data.evidence import SourceTable
from doxa.inference.read import scorer
from doxa.inference.learn.fit import BeliefFit
from training_data import robust_records

OPTIONS = {"progress": False, "n_draws": 100, "window": 20, "patience": 40, "confusion": "off"}


@pytest.fixture(scope="module")
def robust():
    from doxa.data.store import Store

    records, info = robust_records()
    store = Store.memory()
    store.ingest_records(records)
    evidence = store.load_evidence()
    capped = BeliefFit(**OPTIONS).fit(evidence)
    plain = BeliefFit(**OPTIONS, unsettled_cap=None).fit(evidence)
    return evidence, info, capped.params_document(), plain.params_document()


def layer_members(doc, layer):
    return [entry["mean"] for path, entry in doc["trust"].items() if path.startswith(f"{layer}/")]


def test_self_agreement_cannot_lift_a_layer_past_its_settled_record(robust):
    # club members are right 70% of the time on settled items and agree with one another on
    # the rest: the plain marginal likelihood pays them for that agreement, the cut does not
    _, _, capped, plain = robust
    assert plain["trust"]["club"]["mean"] > 0.95  # what the cut prevents, on this very store
    assert capped["trust"]["club"]["mean"] < 0.9
    assert max(layer_members(capped, "club")) < 0.9
    # a layer checked against settled facts keeps what they say
    assert capped["trust"]["expert"]["mean"] > 0.7


def test_a_source_below_chance_is_noise_not_contrarian(robust):
    evidence, info, doc, _ = robust
    forum = doc["trust"]["forum/forum-0"]["mean"]
    assert forum < 0.5  # its record is a little worse than chance on yes/no items: noise
    beliefs = scorer.score(evidence, doc)
    rows = _held_unsettled(evidence, beliefs)
    assert len(rows) >= 10
    # one more forum post stating each held belief's top answer
    top = beliefs.probs[rows].argmax(axis=1)
    forum_src = int(np.flatnonzero(evidence.sources.ids == "forum-0")[0])
    probs = np.zeros((len(rows), evidence.probs.shape[1]))
    probs[np.arange(len(rows)), top] = 1.0
    more = _with_readings(evidence, rows, forum_src, probs)
    after = scorer.score(more, doc).probs[rows, top]
    # read at its unfloored trust (B(top) = α < B(other) = 1 - α) the post would lower every one
    np.testing.assert_allclose(after, beliefs.probs[rows, top], atol=1e-12)


def test_a_contrarian_confusion_matrix_still_counts_against_what_a_source_states(robust):
    # the one way a statement may lower what it states: a confusion matrix (fitted where the
    # settled record shows the source systematically states a wrong answer)
    evidence, _, doc, _ = robust
    beliefs = scorer.score(evidence, doc)
    rows = _held_unsettled(evidence, beliefs)
    top = beliefs.probs[rows].argmax(axis=1)
    probs = np.zeros((len(rows), evidence.probs.shape[1]))
    probs[np.arange(len(rows)), top] = 1.0
    # a forum source of its own (forum-0 repeating its own label would count once with it)
    more = _with_readings(evidence, rows, ("forum-late", "forum/forum-late"), probs)
    contrarian = {**doc, "confusion": {"forum/forum-late": {"item": [[0.1, 0.9], [0.9, 0.1]]}}}
    before = scorer.score(evidence, contrarian).probs[rows, top]
    after = scorer.score(more, contrarian).probs[rows, top]
    movable = before < 1 - 1e-9  # a belief at 1 to float precision has nowhere to fall
    assert movable.sum() >= 10 and np.all(after[movable] < before[movable] - 1e-6)


def _held_unsettled(evidence, beliefs):
    """Questions never settled whose belief is held at ≥ 0.9 (a settlement would override any post)."""
    unsettled = np.bincount(evidence.settle_q, minlength=len(beliefs.probs)) == 0
    return np.flatnonzero((beliefs.probs.max(axis=1) >= 0.9) & unsettled)


def _with_readings(evidence, questions, source, probs):
    """``evidence`` plus one certain reading per question from ``source`` at the evidence's last time.

    ``source``: a row of ``evidence.sources``, or ``(id, path)`` of a source new to it.
    """
    from dataclasses import replace

    sources = evidence.sources
    if isinstance(source, tuple):
        sources = SourceTable(ids=np.r_[sources.ids, [source[0]]].astype(object),
                              paths=np.r_[sources.paths, [source[1]]].astype(object),
                              trust=np.r_[sources.trust, [np.nan]], readings=None)
        source = len(sources.ids) - 1
    n = len(questions)
    t = np.full(n, float(evidence.t.max()))
    q = np.r_[evidence.q, questions]
    order = np.lexsort((np.r_[evidence.t, t], q))
    cat = lambda a, b: np.r_[a, b][order]  # noqa: E731
    return replace(
        evidence, q=q[order], t=cat(evidence.t, t), source_index=cat(evidence.source_index, np.full(n, source)),
        reader_index=cat(evidence.reader_index, np.zeros(n, dtype=np.int64)),
        probs=np.vstack([evidence.probs, probs])[order], unclear=cat(evidence.unclear, np.zeros(n)),
        unrelated=cat(evidence.unrelated, np.zeros(n)), one_off=cat(evidence.one_off, np.zeros(n)),
        message=None, sources=sources)


# ------------------------------------------------------------------ the dependence test
def _stream(evidence):
    from doxa.model.events import EventStream
    from doxa.model.structure import ModelStructure

    structure = ModelStructure.from_evidence(evidence)
    return EventStream.from_evidence(evidence, structure), structure


def test_the_dependence_test_flags_the_layer_that_agrees_with_itself_beyond_its_record(robust):
    from doxa.model.settled_first import dependent_layers, layer_agreement, settled_first_weights

    evidence = robust[0]
    stream, structure = _stream(evidence)
    node = {path: i for i, path in enumerate(structure.tree.paths.tolist())}
    counts = layer_agreement(stream, structure)
    club = counts[node["club"]]
    # unsettled: 4 members all state one shared answer, so every pair agrees
    assert club[0, 1] > 0 and club[0, 0] == club[0, 1]
    # settled: independent 70% members agree on 0.7² + 0.3² = 58% of pairs
    assert 0.4 < club[1, 0] / club[1, 1] < 0.75
    flagged = dependent_layers(stream, structure)
    assert flagged[node["club"]]
    assert not flagged[node["expert"]] and not flagged[node["forum"]] and not flagged[node["social"]]
    weight, matrices = settled_first_weights(stream, structure)
    reading = ~stream.is_settlement
    layer = structure.tree.parent[stream.leaf]
    settled_q = np.bincount(stream.q[stream.is_settlement], minlength=stream.n_questions) > 0
    on_unsettled = reading & ~settled_q[stream.q]
    # an honest layer's unsettled readings keep full weight; the club's are capped at its settled record
    assert np.all(weight[on_unsettled & (layer == node["forum"])] == 1.0)
    club_rows = on_unsettled & (layer == node["club"])
    assert np.all(weight[club_rows] < 1.0)
    settled_club = (reading & settled_q[stream.q] & (layer == node["club"])).sum()
    assert weight[club_rows].sum() == pytest.approx(settled_club)
    # confusion matrices: every layer capped at its settled record, the honest forum too
    forum_rows = on_unsettled & (layer == node["forum"])
    settled_forum = (reading & settled_q[stream.q] & (layer == node["forum"])).sum()
    assert np.all(matrices[forum_rows] < 1.0) and matrices[forum_rows].sum() == pytest.approx(settled_forum)
    np.testing.assert_array_equal(matrices[club_rows], weight[club_rows])


def _records(labels, settled):
    """Yes/no items at one time: ``labels`` (source, layer, item, says yes), ``settled`` {item: yes}."""
    from training_data import SENT_AT

    items = sorted({item for _, _, item, _ in labels} | set(settled))
    records = [{"type": "subject", "id": "set", "name": "set"}]
    records += [{"type": "source", "id": sid, "layers": [layer]} for sid, layer in sorted({(s, g) for s, g, _, _ in labels})]
    records += [{"type": "question", "id": f"set.{i}", "subject": "set", "kind": "item", "text": f"item {i}?",
                 "shape": "yes_no", "options": ["yes", "no"]} for i in items]
    for n, (sid, _, item, yes) in enumerate(labels):
        records.append({"type": "message", "id": f"m{n}", "source": sid, "sent_at": SENT_AT,
                        "text": f"{sid} says item {item}: {'yes' if yes else 'no'} ({n})"})
        records.append({"type": "reading", "message": f"m{n}", "question": f"set.{item}", "reader": "label",
                        "probs": {"yes": float(yes), "no": float(not yes)}, "unclear": 0.0, "unrelated": 0.0,
                        "one_off": 0.0})
    records += [{"type": "settlement", "question": f"set.{i}", "answer": "yes" if yes else "no", "at": SENT_AT,
                 "how": "outcome"} for i, yes in settled.items()]
    return records


def _evidence(records):
    from doxa.data.store import Store

    store = Store.memory()
    store.ingest_records(records)
    return store.load_evidence()


def test_one_source_per_question_and_a_source_repeating_itself_make_no_pairs():
    from doxa.model.settled_first import dependent_layers, layer_agreement

    # "self": one account per subject, each repeating its own (always equal) answer three times,
    # "pair": two sources that agree on every unsettled item and on no settled one
    labels = [(f"self-{i}", "self", i, True) for i in range(40) for _ in range(3)]
    labels += [(s, "pair", i, True) for s in ("pair-a", "pair-b") for i in range(40)]
    labels += [("pair-a", "pair", i, True) for i in range(40, 70)] + [("pair-b", "pair", i, False) for i in range(40, 70)]
    evidence = _evidence(_records(labels, {i: True for i in range(40, 70)}))
    stream, structure = _stream(evidence)
    node = {path: i for i, path in enumerate(structure.tree.paths.tolist())}
    counts = layer_agreement(stream, structure)
    assert counts[node["self"]].sum() == 0
    np.testing.assert_array_equal(counts[node["pair"]], [[40, 40], [0, 30]])
    flagged = dependent_layers(stream, structure)
    assert flagged[node["pair"]] and not flagged[node["self"]]


def test_a_layer_with_no_settled_pairs_to_vouch_for_it_counts_as_dependent_only_with_enough_pairs():
    from doxa.model.settled_first import MIN_PAIRS, dependent_layers

    def flagged(n_items):
        labels = [(s, "duo", i, True) for s in ("duo-a", "duo-b") for i in range(n_items)]
        labels += [("anchor", "anchor", 1000, True)]
        evidence = _evidence(_records(labels, {1000: True}))
        stream, structure = _stream(evidence)
        node = {path: i for i, path in enumerate(structure.tree.paths.tolist())}
        return bool(dependent_layers(stream, structure)[node["duo"]])

    assert not flagged(MIN_PAIRS - 1)  # too few pairs to lift anything
    assert flagged(MIN_PAIRS)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.booleans()), min_size=1, max_size=30),
       st.sets(st.integers(0, 5), max_size=3))
def test_layer_agreement_counts_each_pair_of_votes_from_distinct_sources_once(labels, settled):
    from doxa.model.settled_first import layer_agreement

    # sources 0-2 in layer "a", 3-5 in layer "b"
    rows = [(f"s{s}", "a" if s < 3 else "b", item, yes) for s, item, yes in labels]
    evidence = _evidence(_records(rows, {i: True for i in settled}))
    stream, structure = _stream(evidence)
    counts = layer_agreement(stream, structure)
    for layer in ("a", "b"):
        mine = sorted({r for r in rows if r[1] == layer})  # a source repeating a vote votes once
        expected = np.zeros((2, 2))
        for i, (s1, _, q1, y1) in enumerate(mine):
            for s2, _, q2, y2 in mine[i + 1:]:
                if q1 == q2 and s1 != s2:
                    expected[int(q1 in settled)] += [y1 == y2, 1]
        got = counts[structure.tree.paths.tolist().index(layer)] if layer in structure.tree.paths else np.zeros((2, 2))
        np.testing.assert_array_equal(got, expected)
