"""Scores of probabilistic predictions against settled answers: the one definition that the
nightly calibration (``calibrate.py``), ``doxa bench`` and ``bench/crowd.py`` all report.

``probs`` is (n, K) with one row per prediction (0 beyond a question's options) and
``truth`` (n,) the index of the settled answer.

- accuracy of the top answer;
- log-loss ``mean −log max(p(truth), LOG_LOSS_FLOOR)`` in nats. The floor, 1e-6, bounds
  what one certain miss costs (13.8 nats) so a single baseline that gives the truth
  probability 0 reads as "very wrong" rather than as infinity. Calibration fits its map
  by this log-loss too, so a single confident miss cannot decide the map alone. (It was
  the bench's floor from the start; calibration used 1e-12 before the two were one
  module: the calibrated answers doxa publishes keep a floor ``ε/K`` far above both);
- Brier score, summed over options;
- ECE over ``N_BINS`` = 15 equal-mass bins of the top probability (Naeini et al. 2015,
  with equal-mass rather than equal-width bins): ``Σ_b (n_b / N) |conf_b − acc_b|``;
- selective accuracy and the area under the risk–coverage curve (AURC; Geifman &
  El-Yaniv 2017), with ties in confidence broken at random in expectation.

numpy only.
"""

from __future__ import annotations

import numpy as np

LOG_LOSS_FLOOR = 1e-6
N_BINS = 15


def top_answer(probs: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(confidence, correct): the top probability of each row and whether its option is the truth."""
    top = probs.argmax(axis=1)
    return probs[np.arange(len(probs)), top], (top == truth).astype(np.float64)


def accuracy(probs: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean(np.argmax(probs, axis=1) == truth)) if len(truth) else float("nan")


def log_losses(probs: np.ndarray, truth: np.ndarray, floor: float = LOG_LOSS_FLOOR) -> np.ndarray:
    """``-log p(truth)`` of each prediction, ``p`` floored at ``floor``."""
    return -np.log(np.clip(probs[np.arange(len(truth)), truth], floor, 1.0))


def log_loss(probs: np.ndarray, truth: np.ndarray, floor: float = LOG_LOSS_FLOOR) -> float:
    if not len(truth):
        return float("nan")
    return float(np.mean(log_losses(probs, truth, floor)))


def brier_score(probs: np.ndarray, truth: np.ndarray) -> float:
    onehot = np.zeros_like(probs)
    onehot[np.arange(len(probs)), truth] = 1.0
    return float(((probs - onehot) ** 2).sum(axis=1).mean()) if len(probs) else float("nan")


def reliability_bins(confidence: np.ndarray, correct: np.ndarray, n_bins: int = N_BINS) -> dict[str, np.ndarray]:
    """Equal-mass bins of the top probability: mean confidence, accuracy, size and range per bin."""
    order = np.argsort(confidence, kind="stable")
    chunks = [c for c in np.array_split(order, min(n_bins, len(order))) if len(c)]
    return {
        "confidence": np.array([confidence[c].mean() for c in chunks]),
        "accuracy": np.array([correct[c].mean() for c in chunks]),
        "count": np.array([len(c) for c in chunks]),
        "lo": np.array([confidence[c].min() for c in chunks]),
        "hi": np.array([confidence[c].max() for c in chunks]),
    }


def reliability_table(probs: np.ndarray, truth: np.ndarray, n_bins: int = N_BINS) -> list[dict[str, float]]:
    """:func:`reliability_bins` of ``probs`` as JSON-ready rows: n, lo, hi, confidence, accuracy."""
    if len(probs) == 0:
        return []
    bins = reliability_bins(*top_answer(probs, truth), n_bins)
    return [{"n": int(n), "lo": float(lo), "hi": float(hi), "confidence": float(c), "accuracy": float(a)}
            for n, lo, hi, c, a in zip(bins["count"], bins["lo"], bins["hi"], bins["confidence"], bins["accuracy"])]


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, n_bins: int = N_BINS) -> float:
    """``Σ_b (n_b / N) |conf_b − acc_b|`` over equal-mass bins."""
    if not len(confidence):
        return float("nan")
    bins = reliability_bins(confidence, correct.astype(np.float64), n_bins)
    return float(np.sum(bins["count"] / bins["count"].sum() * np.abs(bins["confidence"] - bins["accuracy"])))


def _tie_groups(confidence: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Most confident first: (size, correct count) of each group of equal confidence."""
    values, inverse = np.unique(-confidence, return_inverse=True)
    size = np.bincount(inverse, minlength=len(values)).astype(np.float64)
    hits = np.bincount(inverse, weights=correct.astype(np.float64), minlength=len(values))
    return size, hits


def expected_correct_in_top(confidence: np.ndarray, correct: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Expected number correct among the ``k`` most confident (ties broken at random), for each k."""
    size, hits = _tie_groups(confidence, correct)
    ends = np.cumsum(size)
    starts = ends - size
    cum_hits = np.r_[0.0, np.cumsum(hits)]
    k = np.asarray(k, dtype=np.float64)
    g = np.minimum(np.searchsorted(ends, k, side="left"), len(size) - 1)
    return cum_hits[g] + (k - starts[g]) * hits[g] / size[g]


def selective_accuracy(confidence: np.ndarray, correct: np.ndarray, coverage: float) -> float:
    """Accuracy on the most confident ``coverage`` share; the rest is handed to a person."""
    n = len(confidence)
    if not n:
        return float("nan")
    keep = max(1, int(round(coverage * n)))
    return float(expected_correct_in_top(confidence, correct, np.array([keep]))[0] / keep)


def aurc(confidence: np.ndarray, correct: np.ndarray) -> float:
    """Area under the risk–coverage curve: mean over k = 1…N of the error rate of the k most confident."""
    n = len(confidence)
    if not n:
        return float("nan")
    k = np.arange(1, n + 1, dtype=np.float64)
    return float(np.mean(1.0 - expected_correct_in_top(confidence, correct, k) / k))


def risk_coverage_curve(confidence: np.ndarray, correct: np.ndarray, points: int = 101) -> tuple[np.ndarray, np.ndarray]:
    n = len(confidence)
    coverage = np.linspace(1.0 / max(n, 1), 1.0, points)
    k = np.maximum(np.round(coverage * n), 1.0)
    return coverage, 1.0 - expected_correct_in_top(confidence, correct, k) / k


def prediction_metrics(probs: np.ndarray, truth: np.ndarray, *, n_bins: int = N_BINS,
                       coverages: tuple[float, ...] = (0.9, 0.8, 0.7)) -> dict[str, float]:
    """The bench's row: accuracy, log-loss, ECE, AURC, mean confidence and accuracy at each coverage."""
    confidence = probs.max(axis=1)
    correct = np.argmax(probs, axis=1) == truth
    out = {
        "accuracy": accuracy(probs, truth),
        "log_loss": log_loss(probs, truth),
        "ece": expected_calibration_error(confidence, correct, n_bins),
        "aurc": aurc(confidence, correct),
        "mean_confidence": float(confidence.mean()) if len(confidence) else float("nan"),
    }
    for c in coverages:
        out[f"acc_at_{int(round(c * 100))}_coverage"] = selective_accuracy(confidence, correct, c)
    return out


def calibration_metrics(probs: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """The calibration report's figures: n, accuracy, mean confidence, ECE, Brier, log-loss."""
    confidence, correct = top_answer(probs, truth)
    return {
        "n": int(len(probs)),
        "accuracy": float(correct.mean()) if len(probs) else float("nan"),
        "mean_confidence": float(confidence.mean()) if len(probs) else float("nan"),
        "ece": expected_calibration_error(confidence, correct),
        "brier": brier_score(probs, truth),
        "log_loss": log_loss(probs, truth),
    }
