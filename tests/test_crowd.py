"""Learned doxa is never worse than majority vote on the shipped crowd sets (issue 15).

Each set is run once through the protocol of bench/crowd.py (seed 0: 20% of the gold
revealed as settlements, `train` with its defaults, the other 80% scored), and doxa's
held-out accuracy and log-loss are compared with plain majority vote on the same items.
"Worse by more than noise" is one binomial standard error on accuracy's side, and none
on log-loss (majority vote's probabilities are vote shares, far from calibrated). Adult
(92,721 labels) takes minutes and is left to the benchmark (docs/bench.md).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "crowd.py"


def crowd_bench():
    spec = importlib.util.spec_from_file_location("crowd_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bluebirds", "temp", "rte"])
def test_learned_trust_is_never_worse_than_majority_vote(name):
    result = crowd_bench().run_one(name, seed=0, fit_options={})
    doxa, majority = result["doxa"], result["majority vote"]
    n = result["_info"]["predictions"]
    noise = math.sqrt(majority["accuracy"] * (1 - majority["accuracy"]) / n)
    assert doxa["accuracy"] >= majority["accuracy"] - noise, (name, doxa, majority)
    assert doxa["log_loss"] <= majority["log_loss"], (name, doxa, majority)
    assert math.isfinite(doxa["log_loss"]) and doxa["ece"] < 0.2
