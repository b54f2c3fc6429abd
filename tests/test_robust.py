"""Robust trust (issue 15): noise is not contrarian, settled facts come first. One small
hand-built store (tests/training_data.py, ``robust_records``), fitted once with the
defaults and once without the settled-first cut."""

from __future__ import annotations

import numpy as np
import pytest

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
