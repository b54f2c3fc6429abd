"""The SVI fit: parameter recovery on a generated world, shrinkage, confusion matrices for
biased sources, subsampling, and a diverged fit that publishes nothing."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from doxa.inference import scorer
from doxa.inference.fit import BeliefFit, FitDiverged, NothingToFit
from doxa.model import belief_model as bm
from doxa.model.simulate import SimulationConfig, simulate_evidence
from training_data import crowd_store

FAST = {"progress": False, "n_draws": 100}
SMALL = {**FAST, "window": 20, "patience": 40}  # small problems: a shorter plateau test


def logit(p):
    p = np.clip(np.asarray(p, dtype=float), 1e-9, 1 - 1e-9)
    return np.log(p / (1 - p))


# ---------------------------------------------------------------------------- generated world
@pytest.fixture(scope="module")
def world_fit():
    """The `quick` generated world (80 people, a year, ~8k readings), fitted once (~40-90 s)."""
    from doxa.data.store import Store
    from doxa.data.world import WorldConfig, generate_world

    world = generate_world(WorldConfig.preset("quick"))
    store = Store.memory()
    store.ingest_records(world.records)
    evidence = store.load_evidence()
    fit = BeliefFit(**FAST).fit(evidence)
    return world, evidence, fit, fit.params_document()


@pytest.mark.slow
def test_trust_of_well_observed_nodes_is_recovered(world_fit):
    world, _, _, doc = world_fit
    truth = world.truth
    nodes = [p for p in doc["trust"] if p in truth.node_trust and truth.node_messages.get(p, 0) >= 30]
    assert len(nodes) >= 40
    fitted = np.array([doc["trust"][p]["mean"] for p in nodes])
    true = np.array([truth.node_trust[p] for p in nodes])
    lo = np.array([doc["trust"][p]["lo"] for p in nodes])
    hi = np.array([doc["trust"][p]["hi"] for p in nodes])
    assert np.corrcoef(fitted, true)[0, 1] >= 0.9
    assert np.mean((true >= lo) & (true <= hi)) >= 0.8


def rate_information(evidence, questions, lam, prior, min_weight=0.5):
    """Fisher information about ``log λ`` if every informative observation were exact.

    Observations: the settlements and the readings whose lasting part ``(1-u)(1-o)`` is at
    least ``min_weight``. Consecutive observations of a question ``Δ`` apart differ with
    ``p = (1-ρ)(1-Σπ²)``, ``ρ = exp(-λΔ)``; each pair adds ``(∂p/∂log λ)² / (p(1-p))``. Real
    readings are noisy, so this is an upper bound on what the evidence can say about the rate.
    """
    lasting = (1 - np.clip(evidence.unclear + evidence.unrelated, 0, 1)) * (1 - np.clip(evidence.one_off, 0, 1))
    keep = np.isin(evidence.q, questions) & (lasting >= min_weight)
    settled = np.isin(evidence.settle_q, questions)
    q = np.r_[evidence.q[keep], evidence.settle_q[settled]]
    t = np.r_[evidence.t[keep], evidence.settle_t[settled]]
    order = np.lexsort((t, q))
    q, t = q[order], t[order]
    gap = np.diff(t)[np.diff(q) == 0]
    same = float(np.sum(np.square(prior)))
    rho = np.exp(-lam * gap)
    p = (1 - rho) * (1 - same)
    slope = lam * gap * rho * (1 - same)
    return float(np.sum(slope ** 2 / np.clip(p * (1 - p), 1e-12, None)))


@pytest.mark.slow
def test_change_rates_and_reader_temperature_are_recovered(world_fit):
    world, evidence, fit, doc = world_fit
    truth = world.truth
    kinds = evidence.questions.kinds
    pinned = []
    for kind, lam in truth.change_rate.items():
        changes = sum(len(truth.timeline(q)) - 1 for q, info in truth.questions.items() if info["kind"] == kind)
        if changes < 50:
            continue
        ratio = doc["kinds"][kind]["half_life_days"] / (math.log(2) / lam)
        lo, hi = doc["kinds"][kind]["change_rate_interval"]
        assert lo <= lam <= hi, (kind, changes, ratio, lo, lam, hi)
        # Changes in the truth are not changes the evidence sees: gift_budget changes 178
        # times in the quick world but is observed ~7 times per question, and its exact
        # profile likelihood (all other parameters at the truth) peaks at ×0.7 of its true
        # half-life. ×1.5 is asked where even exact observations at the evidence's times
        # would pin log λ to 2.5 standard deviations of log 1.5.
        sd = 1 / math.sqrt(rate_information(evidence, np.flatnonzero(kinds == kind), lam, truth.prior[kind]))
        if sd <= math.log(1.5) / 2.5:
            assert 1 / 1.5 <= ratio <= 1.5, (kind, changes, sd, ratio)
            pinned.append(kind)
    assert len(pinned) >= 2
    for reader, tau in truth.reader_temperature.items():
        assert doc["readers"][reader]["temperature"] == pytest.approx(tau, rel=0.2)
        assert doc["readers"][reader]["lo"] <= tau <= doc["readers"][reader]["hi"]
    assert not fit.confusion_  # an unbiased world does not need confusion matrices
    assert fit.bias_["z"] < 2


@pytest.mark.slow
def test_a_leaf_with_two_messages_stays_near_its_parent(world_fit):
    _, _, _, doc = world_fit
    trust = doc["trust"]
    sparse = [p for p, e in trust.items() if e["n"] == 2 and "/" in p]
    rich = [p for p, e in trust.items() if e["n"] >= 50 and p.count("/") >= 2]
    assert len(sparse) >= 10 and len(rich) >= 10

    def gap(path):
        return logit(trust[path]["mean"]) - logit(trust[path.rsplit("/", 1)[0]]["mean"])

    assert np.median(np.abs([gap(p) for p in sparse])) < 0.25
    assert np.median(np.abs([gap(p) for p in sparse])) < 0.5 * np.std([gap(p) for p in rich])
    # and it is less sure than its parent
    widths = [(trust[p]["hi"] - trust[p]["lo"]) > (trust[p.rsplit("/", 1)[0]]["hi"] - trust[p.rsplit("/", 1)[0]]["lo"])
              for p in sparse]
    assert np.mean(widths) > 0.9


@pytest.mark.slow
def test_published_document_is_what_the_scorer_reads(world_fit):
    _, evidence, fit, doc = world_fit
    for node, entry in doc["trust"].items():
        assert entry["lo"] <= entry["mean"] <= entry["hi"] and entry["n"] >= 0
    for kind, entry in doc["kinds"].items():
        assert len(entry["prior"]) == len(entry["options"]) and sum(entry["prior"]) == pytest.approx(1)
        assert entry["half_life_days"] == pytest.approx(math.log(2) / entry["change_rate"])
    beliefs = scorer.score(evidence, doc)
    assert np.allclose(beliefs.probs.sum(axis=1), 1.0)
    diag = doc["diagnostics"]
    assert diag["converged"] and diag["steps"] == len(fit.losses_) and len(diag["elbo"]) <= 200


# ---------------------------------------------------------------------------- biased sources
def test_biased_workers_get_confusion_matrices():
    store, info = crowd_store(n_items=60, n_workers=10, n_biased=3, seed=2)
    evidence = store.load_evidence()
    fit = BeliefFit(confusion="auto", **SMALL).fit(evidence)
    assert fit.bias_["z"] > 2
    assert fit.confusion_ and fit.elbo_by_form_["confusion"] > fit.elbo_by_form_["trust"]
    doc = fit.params_document()
    yes = 0  # options are ["yes", "no"]: C[truth][stated]
    for w in range(3):
        matrix = np.asarray(doc["confusion"][f"crowd/birds/w{w}"]["birds"])
        assert matrix[1, yes] > 0.7  # says "yes" when the truth is "no"
    honest = np.asarray(doc["confusion"]["crowd/birds/w9"]["birds"])
    assert honest[1, yes] < 0.4 and honest[0, yes] > 0.6


def test_confusion_off_keeps_one_number_of_trust():
    store, _ = crowd_store(n_items=40, n_workers=6, n_biased=2, seed=3)
    fit = BeliefFit(confusion="off", **SMALL).fit(store.load_evidence())
    assert not fit.confusion_ and fit.params_document()["confusion"] == {}


# ---------------------------------------------------------------------------- mechanics
def test_subsampled_fit_still_learns_who_to_trust():
    evidence, truth = simulate_evidence(SimulationConfig(n_questions=600, seed=4, settled_fraction=0.8))
    fit = BeliefFit(confusion="off", events_per_step=2000, max_steps=600, **SMALL).fit(evidence)
    assert fit.diagnostics()["subsampled"]
    doc = fit.params_document()
    leaves = [p for p in truth.trust if p.count("/") == 2]
    fitted = [doc["trust"][p]["mean"] for p in leaves]
    assert np.corrcoef(fitted, [truth.trust[p] for p in leaves])[0, 1] > 0.6


def test_nan_likelihood_raises_fit_diverged(monkeypatch):
    evidence, _ = simulate_evidence(SimulationConfig(n_questions=30, seed=1))
    calls = {"n": 0}
    original = bm.chain_log_marginal

    def poisoned(chains, derived, readings_only=False):
        calls["n"] += 1
        out = original(chains, derived, readings_only)
        return out * torch.nan if calls["n"] > 20 else out

    monkeypatch.setattr(bm, "chain_log_marginal", poisoned)
    with pytest.raises(FitDiverged, match="NaN|nan"):
        BeliefFit(confusion="off", **FAST).fit(evidence)


def test_empty_store_says_what_to_do():
    from doxa.data.store import Store

    with pytest.raises(NothingToFit, match="ingest"):
        BeliefFit(**FAST).fit(Store.memory().load_evidence())


def test_losses_and_convergence_are_recorded():
    evidence, _ = simulate_evidence(SimulationConfig(n_questions=40, seed=6))
    fit = BeliefFit(confusion="off", max_steps=60, min_steps=10, **FAST).fit(evidence)
    assert len(fit.losses_) == fit.steps_ == 60 and not fit.converged_  # hit the cap
    assert np.mean(fit.losses_[-10:]) < np.mean(fit.losses_[:10])
