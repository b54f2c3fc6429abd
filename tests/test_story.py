"""The story's one generator (inference/evaluation/story.py), checked against its definition."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from doxa.inference.evaluation.simulate import SimulationConfig, simulate_evidence
from doxa.inference.evaluation.story import AnswerTimelines, report, soft_reading, state

PRIOR = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n_q=st.integers(1, 12))
def test_the_answer_at_a_time_is_the_last_change_before_it(seed, n_q):
    rng = np.random.default_rng(seed)
    kinds = rng.integers(0, 2, n_q)
    timelines = AnswerTimelines.draw(rng, PRIOR, np.array([0.05, 0.3]), kinds, days=40.0, horizon=40 * 86_400)
    bounds = timelines.bounds()
    q = rng.integers(0, n_q, 200)
    t = rng.integers(0, 40 * 86_400 + 1, 200)
    expected = []
    for qi, ti in zip(q.tolist(), t.tolist()):
        times = timelines.change_t[bounds[qi]:bounds[qi + 1]]
        values = timelines.change_value[bounds[qi]:bounds[qi + 1]]
        before = np.flatnonzero(times <= ti)
        expected.append(values[before[-1]] if before.size else timelines.initial[qi])
    assert timelines.answer(q, t).tolist() == [int(x) for x in expected]
    # an answer never takes an option its kind does not have
    assert (timelines.change_value < np.where(kinds[timelines.change_q] == 0, 2, 3)).all()


def test_real_changes_are_the_events_that_move_the_answer():
    timelines = AnswerTimelines(initial=np.array([1, 0]), change_q=np.array([0, 0, 0, 1]),
                                change_t=np.array([5, 9, 12, 3]), change_value=np.array([1, 0, 0, 1]),
                                start=np.array([0, 3]), horizon=20)
    assert timelines.real_changes().tolist() == [False, True, False, True]
    assert timelines.answer(np.array([0, 0, 0, 1, 1]), np.array([4, 9, 19, 2, 3])).tolist() == [1, 0, 0, 0, 1]


def test_a_clear_fully_trusted_message_states_the_truth_and_a_biased_one_leans():
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 4, 1000)
    k = np.full(1000, 4)
    zeros = np.zeros(1000)
    stated, noise = state(rng, truth, k, np.ones(1000), zeros, zeros)
    assert (stated == truth).all() and not noise.any()
    wrong, _ = state(rng, truth, k, zeros, zeros, zeros, lean_to=np.where(truth == 3, -1, 3))
    assert (wrong[truth != 3] == 3).all() and (wrong[truth == 3] != 3).all()


def test_soft_readings_are_calibrated_for_the_stated_option():
    # p(r̃ | c) ∝ r̃_c with c uniform: among readings whose top entry is near x, the stated
    # option is the top one a fraction x of the time
    rng = np.random.default_rng(1)
    n, k = 200_000, 3
    stated = rng.integers(0, k, n)
    calibrated = soft_reading(rng, stated, np.full(n, k), np.full(n, 0.4), width=4)
    assert np.allclose(calibrated.sum(axis=1), 1.0) and (calibrated[:, 3] == 0).all()
    top = calibrated.argmax(axis=1)
    top_value = calibrated.max(axis=1)
    for low, high in [(0.4, 0.5), (0.6, 0.7), (0.8, 0.9), (0.95, 1.0)]:
        rows = (top_value >= low) & (top_value < high)
        assert abs((stated[rows] == top[rows]).mean() - top_value[rows].mean()) < 0.01


def test_report_tempers_and_keeps_the_unclear_mass_out():
    calibrated = np.array([[0.8, 0.2, 0.0]])
    probs, unclear, unrelated = report(calibrated, np.array([2.0]), np.array([0.1]), np.array([0.25]), np.array([2]))
    np.testing.assert_allclose(probs, [[0.9 * 0.64 / 0.68, 0.9 * 0.04 / 0.68, 0.0]])
    np.testing.assert_allclose([unclear[0], unrelated[0]], [0.075, 0.025])


def test_simulated_evidence_settles_on_the_true_answers_and_sums_to_one():
    evidence, truth = simulate_evidence(SimulationConfig(n_questions=50, seed=3))
    total = evidence.probs.sum(axis=1) + evidence.unclear + evidence.unrelated
    np.testing.assert_allclose(total, 1.0)
    assert (np.diff(evidence.t)[np.diff(evidence.q) == 0] >= 0).all()  # readings in time order per question
    assert set(truth.n_changes) == set(truth.half_life_days) and sum(truth.n_changes.values()) > 0
