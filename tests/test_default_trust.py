"""Default trusts keep the documented order of sources on every question shape (issue 10, point 6).

Before any fit, a source's trust is the default of its top layer. A trust of 1/K makes a
source count for nothing on a K-option question: the defaults must lie above chance for
every K a question can have, and rank the layers the same way on every K.
"""

from __future__ import annotations

import pytest

import doxa
import records as R
from doxa.inference.read import params as parameters

T = "2026-05-01"
LAYERS = sorted(parameters.DEFAULT_TRUST_BY_TOP_LAYER)


def pushed(k: int) -> dict[str, float]:
    """Each top layer's belief in option 0 after one confident message from a source of that layer."""
    options = [f"o{i}" for i in range(k)]
    records = []
    for layer in LAYERS:
        records += [R.source(f"{layer}-src", [layer, "email"]),
                    R.question(f"{layer}.q", options, kind=f"k{k}"),
                    R.message(f"{layer}-m", f"{layer}-src", T, f"it is o0, says a {layer}"),
                    R.reading(f"{layer}-m", f"{layer}.q", {o: (0.9 if i == 0 else 0.1 / (k - 1))
                                                            for i, o in enumerate(options)})]
    with doxa.open(":memory:", log_reads=False) as mem:
        mem.ingest(records)
        return {layer: mem.belief(f"{layer}.q", at=T).answers["o0"] for layer in LAYERS}


@pytest.mark.parametrize("k", [2, 3, 5])
def test_every_default_source_moves_the_belief_on_every_shape(k):
    for layer, p in pushed(k).items():
        assert p > 1.0 / k + 0.01, f"a {layer} source counts for (almost) nothing on a {k}-option question: {p}"


@pytest.mark.parametrize("k", [2, 3, 5])
def test_the_order_of_the_default_trusts_is_the_order_of_the_beliefs_on_every_shape(k):
    beliefs = pushed(k)
    trust = parameters.DEFAULT_TRUST_BY_TOP_LAYER
    for a in LAYERS:
        for b in LAYERS:
            if trust[a] > trust[b]:
                assert beliefs[a] > beliefs[b], (k, a, b)
            elif trust[a] == trust[b]:
                assert beliefs[a] == pytest.approx(beliefs[b]), (k, a, b)


def test_a_landlords_email_moves_a_yes_no_question():
    with doxa.open(":memory:", log_reads=False) as mem:
        mem.ingest([R.subject("tom"), R.source("landlord", ["business", "email"]),
                    R.question("tom.moving_out", ["yes", "no"], kind="moving_out", subject="tom",
                               text="Is Tom moving out?", shape="yes_no"),
                    R.message("e1", "landlord", T, "Tom leaves in March; the flat is free from April."),
                    R.reading("e1", "tom.moving_out", {"yes": 0.95, "no": 0.05})])
        assert mem.belief("tom.moving_out", at=T).answers["yes"] > 0.55


def test_the_defaults_lie_above_one_half():
    assert all(0.5 < alpha < 1.0 for alpha in [*parameters.DEFAULT_TRUST_BY_TOP_LAYER.values(), parameters.DEFAULT_TRUST])
