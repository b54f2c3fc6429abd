"""Model choice by held-out settled facts (issue 15): the nightly job fits one number of
trust and confusion matrices, and keeps the form that predicts held-out settlements better."""

from __future__ import annotations

import numpy as np
import pytest

from doxa.inference.learn.choice import summary_line
from doxa.inference.learn.train import train
from training_data import crowd_store

FIT = {"progress": False, "n_draws": 40, "window": 20, "patience": 40, "max_steps": 300}


@pytest.fixture(scope="module")
def biased():
    # half the workers say "yes" 90% of the time whatever the truth: a bias one number cannot carry
    store, _ = crowd_store(n_items=120, n_workers=8, n_biased=4, accuracy=0.75, gold_share=0.5, seed=3)
    return train(store, fit_options=FIT, folds=0, progress=False)


@pytest.fixture(scope="module")
def unbiased():
    store, _ = crowd_store(n_items=120, n_workers=8, n_biased=0, accuracy=0.75, gold_share=0.5, seed=3)
    return train(store, fit_options=FIT, folds=0, progress=False)


def test_biased_workers_get_confusion_matrices(biased):
    choice = biased.summary()["model_choice"]
    assert choice["chosen"] == "confusion" and biased.document["diagnostics"]["confusion"]
    assert choice["se"] > 0 and set(choice["log_loss"]) == {"trust", "confusion"}
    assert choice["delta"] == pytest.approx(choice["log_loss"]["confusion"] - choice["log_loss"]["trust"])
    assert choice["settlements"] == 60 and choice["folds"] == 3
    assert biased.document["confusion"]  # the published document carries the matrices


def test_held_out_log_loss_decides_and_the_fit_breaks_ties(biased, unbiased):
    for result in (biased, unbiased):
        choice = result.summary()["model_choice"]
        better = min(choice["log_loss"], key=choice["log_loss"].get)
        assert choice["decisive"] == (abs(choice["delta"]) > choice["se"])
        assert choice["chosen"] == (better if choice["decisive"] else choice["fit_preferred"])
        assert bool(result.document["confusion"]) == (choice["chosen"] == "confusion")
        assert result.document["diagnostics"]["confusion"] == (choice["chosen"] == "confusion")
    # on a tie the fit's ELBO decides: it prefers the matrices only where the workers lean
    assert biased.summary()["model_choice"]["fit_preferred"] == "confusion"
    assert unbiased.summary()["model_choice"]["fit_preferred"] == "trust"


def test_the_summary_says_what_was_chosen_and_by_how_much(biased):
    choice = biased.summary()["model_choice"]
    line = summary_line(choice)
    assert line.startswith("model: confusion matrices, ")
    assert "on 60 settlements in 3 time-ordered folds" in line
    assert f"{choice['delta']:+.4f} ± {choice['se']:.4f}" in line
    assert ("the fit's ELBO decided" in line) != choice["decisive"]


def test_forms_fixed_by_the_caller_are_not_chosen():
    store, _ = crowd_store(n_items=40, n_workers=4, n_biased=1, gold_share=0.5, seed=5)
    result = train(store, fit_options={**FIT, "confusion": "off"}, folds=0, progress=False)
    assert result.summary()["model_choice"] is None and not result.document["confusion"]
