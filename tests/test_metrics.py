"""The scores of predictions (inference/learn/metrics.py) on cases worked by hand: the one
definition that calibration, `doxa bench` and bench/crowd.py report."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from doxa.inference.learn import metrics


def test_ece_of_two_known_bins():
    # 15 answers at 0.6 of which 9 right (calibrated), 15 at 0.9 all right (under-confident by 0.1)
    confidence = np.r_[np.full(15, 0.6), np.full(15, 0.9)]
    correct = np.r_[np.ones(9), np.zeros(6), np.ones(15)].astype(bool)
    assert metrics.expected_calibration_error(confidence, correct, n_bins=2) == pytest.approx(0.5 * 0.0 + 0.5 * 0.1)


def test_ece_uses_fifteen_equal_mass_bins():
    confidence = np.repeat(np.linspace(0.5, 0.95, 15), 10)
    correct = np.zeros(150, dtype=bool)  # every bin entirely wrong: ECE is the mean confidence
    bins = metrics.reliability_bins(confidence, correct.astype(float), 15)
    assert bins["count"].tolist() == [10] * 15
    assert metrics.expected_calibration_error(confidence, correct) == pytest.approx(confidence.mean())


def test_aurc_of_a_perfect_ranking():
    n, errors = 10, 3
    confidence = np.linspace(1.0, 0.1, n)  # strictly decreasing
    correct = np.r_[np.ones(n - errors), np.zeros(errors)].astype(bool)  # the errors are the least confident
    expected = sum((k - (n - errors)) / k for k in range(n - errors + 1, n + 1)) / n
    assert metrics.aurc(confidence, correct) == pytest.approx(expected)
    assert metrics.aurc(confidence, correct[::-1]) > metrics.aurc(confidence, correct)


def test_ties_in_confidence_are_split_evenly():
    confidence = np.full(10, 0.7)
    correct = np.r_[np.ones(6), np.zeros(4)].astype(bool)
    # with every answer equally sure, dropping some cannot help in expectation
    assert metrics.selective_accuracy(confidence, correct, 0.5) == pytest.approx(0.6)
    assert metrics.aurc(confidence, correct) == pytest.approx(0.4)


def test_selective_accuracy_drops_the_least_certain():
    confidence = np.array([0.99, 0.95, 0.9, 0.85, 0.6])
    correct = np.array([1, 1, 1, 1, 0], dtype=bool)
    assert metrics.selective_accuracy(confidence, correct, 0.8) == 1.0
    assert metrics.selective_accuracy(confidence, correct, 1.0) == pytest.approx(0.8)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.booleans()), min_size=1, max_size=40))
def test_metrics_stay_in_range(pairs):
    confidence = np.array([p for p, _ in pairs])
    correct = np.array([c for _, c in pairs])
    assert 0.0 <= metrics.expected_calibration_error(confidence, correct) <= 1.0
    assert -1e-12 <= metrics.aurc(confidence, correct) <= 1.0 + 1e-12
    for coverage in (0.7, 0.8, 0.9, 1.0):
        assert -1e-12 <= metrics.selective_accuracy(confidence, correct, coverage) <= 1.0 + 1e-12
    # at full coverage the answer is the plain accuracy, whatever the ranking
    assert metrics.selective_accuracy(confidence, correct, 1.0) == pytest.approx(correct.mean())


def test_log_loss_clips_a_certain_miss():
    probs = np.array([[1.0, 0.0], [0.5, 0.5]])
    truth = np.array([1, 0])
    assert metrics.log_loss(probs, truth) == pytest.approx((-math.log(metrics.LOG_LOSS_FLOOR) + math.log(2)) / 2)


def test_metrics_follow_their_definitions():
    probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.5, 0.5]])
    answer = np.array([0, 1, 1, 0])
    m = metrics.calibration_metrics(probs, answer)
    assert m["accuracy"] == pytest.approx(np.mean([1, 0, 1, 1]))
    assert m["log_loss"] == pytest.approx(-np.mean(np.log([0.9, 0.4, 0.8, 0.5])))
    assert m["brier"] == pytest.approx(np.mean([2 * 0.1 ** 2, 2 * 0.6 ** 2, 2 * 0.2 ** 2, 2 * 0.5 ** 2]))
    table = metrics.reliability_table(probs, answer, n_bins=2)
    assert [r["n"] for r in table] == [2, 2]
    expected_ece = (2 * abs(np.mean([0.5, 0.6]) - 0.5) + 2 * abs(np.mean([0.8, 0.9]) - 1.0)) / 4
    assert metrics.expected_calibration_error(*metrics.top_answer(probs, answer), n_bins=2) == pytest.approx(expected_ece)
