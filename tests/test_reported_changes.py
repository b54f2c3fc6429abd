"""A reading that reports a change (docs/design.md §2, "Reported changes"; doxa.model.changes): the
posterior against a hand computation, silence against no report, the first event, the store and the
record format, the fit's likelihood against the filter's."""

from __future__ import annotations

import io
import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

import doxa
from doxa.data.errors import IngestError
from doxa.data.export import export
from doxa.data.store import Store
from doxa.inference.evaluation.simulate import SimulationConfig, simulate_evidence
from doxa.inference.read import scorer
from doxa.model import chains as tree_product
from doxa.model.chains import chain_log_marginal, make_chains
from doxa.model.events import EventStream
from doxa.model.filter import filter_evidence
from doxa.model.structure import ModelStructure
from test_model import document_of, random_point

TRUST, HALF_LIFE = 0.9, 730.0
PARAMS = {"trust": {"person": {"mean": TRUST, "lo": TRUST, "hi": TRUST, "n": 100}},
          "kinds": {"count": {"options": ["17", "25"], "prior": [0.5, 0.5],
                              "change_rate": math.log(2) / HALF_LIFE, "half_life_days": HALF_LIFE}}}


def records(changed: float | None = None, first_changed: float | None = None) -> list[dict]:
    """The user says 17 on 1 January and 25 on 2 March (60 days on), each outright."""
    second = {"changed": changed} if changed is not None else {}
    first = {"changed": first_changed} if first_changed is not None else {}
    return [{"type": "subject", "id": "me", "name": "Me"},
            {"type": "source", "id": "chat", "layers": ["person", "self", "chat"]},
            {"type": "question", "id": "me.postcards", "subject": "me", "kind": "count",
             "text": "How many postcards do I have?", "options": ["17", "25"]},
            {"type": "message", "id": "m1", "source": "chat", "sent_at": "2024-01-01T12:00:00Z",
             "text": "I have 17 postcards."},
            {"type": "message", "id": "m2", "source": "chat", "sent_at": "2024-03-01T12:00:00Z",
             "text": "I now have 25 postcards."},
            {"type": "reading", "message": "m1", "question": "me.postcards", "reader": "r",
             "probs": {"17": 1.0, "25": 0.0}, **first},
            {"type": "reading", "message": "m2", "question": "me.postcards", "reader": "r",
             "probs": {"17": 0.0, "25": 1.0}, **second}]


def belief_in_25(recs: list[dict]) -> float:
    store = Store.memory()
    store.ingest_records(recs)
    evidence = store.load_evidence(None, ["me.postcards"])
    return float(scorer.score(evidence, PARAMS, at=float(evidence.t.max()), calibrate=False).raw[0, 1])


def by_hand(kappa: float) -> float:
    """The filter of doxa.model.changes, two states, written out."""
    rho = math.exp(-math.log(2) / HALF_LIFE * 60.0)
    after_first = {"17": TRUST, "25": 1 - TRUST}  # prior 1/2 each, L = (α, 1-α)
    same, differ = 1 - kappa + 2 * kappa * (1 - TRUST), 1 - kappa + 2 * kappa * TRUST
    before = {j: same * b * (rho + (1 - rho) * 0.5) + differ * (1 - rho) * 0.5 * (1 - b)
              for j, b in after_first.items()}
    after = {"17": before["17"] * (1 - TRUST), "25": before["25"] * TRUST}
    return after["25"] / (after["17"] + after["25"])


@pytest.mark.parametrize("kappa", [0.0, 0.5, 1.0])
def test_the_posterior_is_the_hand_computation(kappa):
    assert belief_in_25(records(changed=kappa)) == pytest.approx(by_hand(kappa), abs=1e-12)


def test_a_reported_change_is_followed_where_a_contradiction_is_a_coin_flip():
    silent, reported = belief_in_25(records()), belief_in_25(records(changed=1.0))
    assert 0.45 < silent < 0.6  # a slow-changing answer contradicted: error or change, about even
    assert reported > silent + 0.15 and reported == pytest.approx(by_hand(1.0), abs=1e-12)


def test_silence_is_no_report_and_a_first_event_has_nothing_to_differ_from():
    assert belief_in_25(records(changed=0.0)) == belief_in_25(records())
    assert belief_in_25(records(first_changed=1.0)) == belief_in_25(records())


def test_the_store_keeps_it_exports_it_and_refuses_a_number_outside_0_1():
    with doxa.open(":memory:", log_reads=False) as memory:
        memory.ingest(records(changed=0.75))
        evidence = memory.store.load_evidence(None, ["me.postcards"])
        assert evidence.changed.tolist() == [0.0, 0.75]
        out = io.StringIO()
        export(memory.store, out)
    readings = [r for r in map(json.loads, out.getvalue().splitlines()) if r["type"] == "reading"]
    assert [r.get("changed") for r in readings] == [None, 0.75]  # a reading without one exports as before
    with doxa.open(":memory:", log_reads=False) as memory:  # and the export reads back the same
        memory.ingest([json.loads(line) for line in out.getvalue().splitlines()])
        assert memory.store.load_evidence(None, ["me.postcards"]).changed.tolist() == [0.0, 0.75]
    with pytest.raises(IngestError, match="changed"):
        Store.memory().ingest_records(records(changed=1.5))


def test_the_fits_likelihood_is_the_filters_with_reported_changes(monkeypatch):
    monkeypatch.setattr(tree_product, "SETTLEMENT_LEAK", 0.0)  # the filter observes settlements exactly
    base, _ = simulate_evidence(SimulationConfig(n_questions=120, length_skew=1.0, seed=7))
    rng = np.random.default_rng(4)
    n = base.n_readings
    evidence = replace(base, changed=rng.uniform(size=n) * (rng.uniform(size=n) < 0.4))
    structure = ModelStructure.from_evidence(evidence)
    derived = random_point(structure, False, seed=3)
    document = document_of(structure, derived)
    result, _ = filter_evidence(evidence, structure, derived)
    ours = scorer.score(evidence, document, at=evidence.at, calibrate=False)
    np.testing.assert_allclose(scorer.apply_rejections(evidence, result.belief), ours.raw, atol=1e-6)
    stream = EventStream.from_evidence(evidence, structure)
    assert (stream.change > 0).any() and (stream.change[stream.rank == 0] == 0).all()
    total = np.full(len(structure.question_k), np.nan)
    for group in make_chains(stream, structure, dtype=torch.float64):
        total[group.question.numpy()] = chain_log_marginal(group, derived).detach().numpy()
    has = ~np.isnan(total)
    np.testing.assert_allclose(total[has], result.log_marginal[has], rtol=1e-9, atol=1e-9)
    # and it is not the likelihood without the reports
    plain, _ = filter_evidence(replace(evidence, changed=None), structure, derived)
    assert np.abs(plain.log_marginal[has] - result.log_marginal[has]).max() > 0.1


def test_an_explanation_shows_the_reported_change_of_each_reading():
    with doxa.open(":memory:", log_reads=False) as memory:
        memory.ingest(records(changed=0.75))
        terms = memory.explain("me.postcards", "2024-03-02").to_dict()["terms"]
    assert [(t["message"], t["changed"]) for t in terms] == [("m1", 0.0), ("m2", 0.75)]
