"""Output calibration (docs/design.md §4.3): is a stated 0.8 right 80% of the time, and a map that makes it so.

Inputs are *time-ordered out-of-sample* predictions: for each settlement, the belief the
scorer would have given just before it was settled, from the evidence up to then
(:func:`doxa.inference.learn.train.settlement_predictions` makes them). The maps, all in
the form the scorer applies (:func:`doxa.inference.read.scorer.apply_calibration`):

- ``temperature``: ``p ∝ p^(1/T)``, i.e. all log-odds divided by ``T`` (Guo et al. 2017,
  "On calibration of modern neural networks"); one number, safe on little data;
- ``temperature`` with a ``floor`` ε: ``p ← (1-ε) p^(1/T)/Z + ε/K``: some settled
  answers contradict even a confident consensus (hard items on which most sources
  err together, which no per-source model sees); a floor says so without flattening
  every belief the way a large ``T`` would. ``floor`` is the same map at ``T`` = 1.
- ``isotonic``: a monotone piecewise-linear map of the top probability, fitted by pool
  adjacent violators (Zadrozny & Elkan 2002).

Both parameters of the temperature maps are fitted by maximum a posteriori with weak
priors (``log T ~ N(0, 2)``, ``ε ~ Beta(2, 58)``) so a handful of settlements cannot
push them to extremes. The two trade off on little data (a softer ``T`` and a larger ``ε``
both pay for a confident miss): the floor's prior keeps it a small hedge (mode 1/58),
and the temperature's is wide because evidence from many sources that err together is
often overconfident by a factor of several in log-odds (``T`` of 3-4 on crowd labels).
By default the floor is always part of the map (a few settlements without a confident miss
do not show there are none).

The method is chosen by cross-validated log-loss. Candidates: ``temperature+floor``
and, from ``CHOICE_MIN_POINTS`` predictions on, ``floor`` (``T`` = 1, the floor alone) and
``isotonic``; with ``allow_floor=False``: ``none``, ``temperature`` and, from
``CHOICE_MIN_POINTS`` on, ``isotonic``. Fewer predictions cannot tell a temperature from
none, and the temperature's prior does the regularising: on Bluebirds splits (22
settlements), a free choice picked the floor alone on two of four and lost 0.08 and 0.11
nats a question there against the MAP temperature of 3-4. The parametric maps (one or
two numbers, each under a prior) compete on held-out log-loss alone. The isotonic map
has a knot per block and no prior, so it must earn its place: it is kept only when its
held-out loss beats the better parametric map's by more than one standard error of the
per-prediction difference (the one-standard-error rule of Breiman, Friedman, Olshen &
Stone 1984, *CART*; Hastie, Tibshirani & Friedman, *Elements of Statistical Learning*,
§7.10). A map fitted on settlements is applied to every question, settled or not: a
reshaping that beats the simpler map only by noise on the settled ones is more likely
to hurt the rest than help it. On the campaign world of docs/bench.md an isotonic map
fitted on nine misses sent top probabilities of 0.28 to 0.03.
The "after" figures reported are the cross-validated ones, not the fit's own.
Metrics (inference/learn/metrics.py, the bench's too): ECE with 15 equal-mass bins of the
top probability, Brier score (summed over options), log-loss (nats, floored at 1e-6),
accuracy. numpy and matplotlib only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import isotonic_regression, minimize_scalar

from doxa.inference.learn.metrics import (N_BINS, calibration_metrics, log_loss, log_losses, reliability_table,
                                         top_answer)
from doxa.inference.read.scorer import apply_calibration as _scorer_apply

CHOICE_MIN_POINTS = 300  # from here on, held-out loss may choose the floor alone or isotonic
MIN_POINTS = 20  # below this, no map: too few settlements to say anything


# ---------------------------------------------------------------------------- maps
LOG_T_PRIOR_SD = 2.0  # T within ×7 of 1 at one sd: many sources erring together can need T of 3-4
FLOOR_PRIOR = (2.0, 58.0)  # mean 0.033, mode 0.017: a few settlements cannot rule out confident misses


def apply_calibration(calibration: dict[str, Any], probs: np.ndarray) -> np.ndarray:
    """The scorer's map (temperature, its optional ``floor``, or isotonic): what a read applies."""
    return _scorer_apply(calibration, probs)


def _minimise(loss, lo: float, hi: float) -> float:
    return float(minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-9}).x)


def _temperature_map(log_t: float, floor: float) -> dict[str, Any]:
    out = {"method": "temperature", "temperature": float(np.exp(log_t))}
    if floor > 0:
        out["floor"] = float(floor)
    return out


def fit_temperature(probs: np.ndarray, answer: np.ndarray, *, floor: bool = False,
                    bounds: tuple[float, float] = (0.05, 20.0), fixed: float | None = None) -> dict[str, Any]:
    """MAP temperature (and floor) for ``p^(1/T)`` (coordinate-wise bounded scalar minimisation).

    ``fixed``: hold ``T`` there and fit the floor alone (the ``floor`` map at ``T`` = 1).
    """
    n = max(len(answer), 1)
    a_prior, b_prior = FLOOR_PRIOR

    def objective(log_t: float, eps: float) -> float:
        nll = log_loss(apply_calibration(_temperature_map(log_t, eps), probs), answer) * n
        penalty = 0.5 * (log_t / LOG_T_PRIOR_SD) ** 2
        if floor:
            penalty -= (a_prior - 1) * np.log(eps) + (b_prior - 1) * np.log1p(-eps)
        return nll + penalty

    lo, hi = np.log(bounds[0]), np.log(bounds[1])
    log_t, eps = (0.0 if fixed is None else float(np.log(fixed))), (0.02 if floor else 0.0)
    for _ in range(4 if floor and fixed is None else 1):
        if fixed is None:
            log_t = _minimise(lambda x: objective(x, eps), lo, hi)
        if floor:
            eps = _minimise(lambda e: objective(log_t, e), 1e-4, 0.5)
    return _temperature_map(log_t, eps)


def fit_isotonic(probs: np.ndarray, answer: np.ndarray) -> tuple[list[float], list[float]]:
    """Knots ``(x, y)`` of a non-decreasing map from top probability to accuracy.

    Isotonic regression (pool adjacent violators, scipy's) of hits on the sorted top
    probabilities; each block's accuracy
    is smoothed by one pseudo-count toward its mean confidence, so a small block of
    hits never maps to exactly 1 (which would make one miss cost infinite log-loss).
    """
    conf, correct = top_answer(probs, answer)
    if not conf.size:
        return [], []
    order = np.argsort(conf, kind="stable")
    conf, correct = conf[order], correct[order].astype(np.float64)
    bounds = isotonic_regression(correct).blocks
    starts, counts = bounds[:-1], np.diff(bounds).astype(np.float64)
    sums, conf_sums = np.add.reduceat(correct, starts), np.add.reduceat(conf, starts)
    # adjacent pieces of equal accuracy are one piece of the map (the fitted values are equal)
    means = sums / counts
    piece = np.cumsum(np.r_[True, means[1:] != means[:-1]]) - 1
    s_arr, n_arr = np.bincount(piece, sums), np.bincount(piece, counts)
    x_arr = np.bincount(piece, conf_sums) / n_arr
    y_arr = (s_arr + x_arr) / (n_arr + 1.0)
    y_arr = np.maximum.accumulate(np.clip(y_arr, 0.0, 1.0))
    # knots must strictly increase in x for np.interp; ties (equal confidences) keep the last
    keep = np.r_[np.diff(x_arr) > 0, True]
    return x_arr[keep].tolist(), y_arr[keep].tolist()


def fit_map(method: str, probs: np.ndarray, answer: np.ndarray) -> dict[str, Any]:
    if method == "temperature":
        return fit_temperature(probs, answer)
    if method == "floor":
        return fit_temperature(probs, answer, floor=True, fixed=1.0)
    if method == "temperature+floor":
        return fit_temperature(probs, answer, floor=True)
    if method == "isotonic":
        x, y = fit_isotonic(probs, answer)
        return {"method": "isotonic", "x": x, "y": y}
    return {"method": "none"}


@dataclass
class OutputCalibration:
    """Choose and fit the output calibration map from out-of-sample predictions.

    ``fit(probs, answer, groups)``: ``probs`` (n, K_max) predictions (0 beyond a
    question's options), ``answer`` (n,) settled option, ``groups`` (n,) question of each
    prediction (cross-validation folds keep a question's predictions together).
    Fitted: ``map_`` (the document's ``calibration`` entry), ``method_`` (see the module
    docstring), ``before_`` / ``after_`` (metrics),
    ``table_before_`` / ``table_after_`` (reliability tables), ``cv_log_loss_`` per
    method and ``cv_se_`` (standard error of each method's held-out loss minus the best's).
    """

    n_folds: int = 5
    seed: int = 0
    methods: tuple[str, ...] = ("none", "temperature", "floor", "temperature+floor", "isotonic")
    allow_floor: bool = True  # False: choose among none / temperature / isotonic instead
    map_: dict[str, Any] = field(default_factory=lambda: {"method": "none"})

    def fit(self, probs: np.ndarray, answer: np.ndarray, groups: np.ndarray | None = None) -> "OutputCalibration":
        probs = np.asarray(probs, dtype=np.float64)
        answer = np.asarray(answer, dtype=np.int64)
        n = len(answer)
        self.n_ = n
        self.before_ = calibration_metrics(probs, answer)
        self.table_before_ = reliability_table(probs, answer)
        floor_ok = self.allow_floor
        if n < MIN_POINTS:
            candidates = ["none"]
        elif floor_ok:
            # the floor is a hedge, not a finding: a few settlements without a confident miss
            # do not show there are none, so "none" and a bare temperature are not offered
            candidates = [m for m in self.methods if m == "temperature+floor"
                          or (m in ("floor", "isotonic") and n >= CHOICE_MIN_POINTS)]
        else:
            candidates = [m for m in self.methods if m in ("none", "temperature")
                          or (m == "isotonic" and n >= CHOICE_MIN_POINTS)]
        if candidates == ["none"]:
            self.method_, self.map_, self.cv_log_loss_, self.cv_se_ = "none", {"method": "none"}, {}, {}
            self.after_, self.table_after_ = self.before_, self.table_before_
            self.cv_probs_ = probs
            return self
        folds = self._folds(n, groups)
        cv = {m: np.zeros_like(probs) for m in candidates}
        for f in range(folds.max() + 1):
            test, train = folds == f, folds != f
            for m in candidates:
                cv[m][test] = apply_calibration(fit_map(m, probs[train], answer[train]), probs[test])
        pointwise = {m: log_losses(cv[m], answer) for m in candidates}
        self.cv_log_loss_ = {m: float(loss.mean()) for m, loss in pointwise.items()}
        parametric = min((m for m in candidates if m != "isotonic"), key=lambda m: self.cv_log_loss_[m])
        self.method_, self.cv_se_ = one_standard_error_choice(
            {m: pointwise[m] for m in (parametric, "isotonic") if m in pointwise})
        self.map_ = fit_map(self.method_, probs, answer)
        self.cv_probs_ = cv[self.method_]
        self.after_ = calibration_metrics(self.cv_probs_, answer)
        self.table_after_ = reliability_table(self.cv_probs_, answer)
        return self

    def _folds(self, n: int, groups: np.ndarray | None) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        if groups is None:
            groups = np.arange(n)
        uniq, inverse = np.unique(np.asarray(groups), return_inverse=True)
        fold_of_group = rng.permutation(len(uniq)) % min(self.n_folds, len(uniq))
        return fold_of_group[inverse]

    def report(self) -> dict[str, Any]:
        """JSON-ready: method, map, metrics and reliability tables before/after."""
        return {
            "method": self.method_,
            "map": self.map_,
            "n": self.n_,
            "before": self.before_,
            "after": self.after_,
            "after_is": "cross-validated",
            "cv_log_loss": self.cv_log_loss_,
            "cv_se": self.cv_se_,
            "reliability_before": self.table_before_,
            "reliability_after": self.table_after_,
        }


def one_standard_error_choice(losses: dict[str, np.ndarray]) -> tuple[str, dict[str, float]]:
    """The first method (``losses`` is ordered simplest first) whose mean held-out loss is
    within one standard error of the best's; also each method's standard error of the
    paired per-prediction difference from the best."""
    best = min(losses, key=lambda m: float(losses[m].mean()))
    se: dict[str, float] = {}
    for m, loss in losses.items():
        diff = loss - losses[best]
        se[m] = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
    chosen = next(m for m, loss in losses.items() if float((loss - losses[best]).mean()) <= se[m])
    return chosen, se


# ---------------------------------------------------------------------------- reporting
def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def markdown_table(report: dict[str, Any]) -> str:
    """Before/after metrics as a Markdown table; a store with no settlement yet has nothing to measure."""
    if not report.get("n"):
        return ("No settlement yet, so no calibration to measure: record what the user and the world say with "
                "`doxa correct`, `doxa approve` or `doxa outcome`, then train again.")
    lines = ["| | n | accuracy | ECE | Brier | log-loss |", "|---|---|---|---|---|---|"]
    for label in ("before", "after"):
        m = report[label]
        lines.append(f"| {label} | {m['n']} | {_cell(m['accuracy'])} | {_cell(m['ece'])} | {_cell(m['brier'])} "
                     f"| {_cell(m['log_loss'])} |")
    return "\n".join(lines)


def reliability_markdown(report: dict[str, Any]) -> str:
    lines = ["| bin | n | confidence before | accuracy before | confidence after | accuracy after |",
             "|---|---|---|---|---|---|"]
    for i, (b, a) in enumerate(zip(report["reliability_before"], report["reliability_after"])):
        lines.append(f"| {i + 1} | {b['n']} | {_cell(b['confidence'])} | {_cell(b['accuracy'])} "
                     f"| {_cell(a['confidence'])} | {_cell(a['accuracy'])} |")
    return "\n".join(lines)


def plot_reliability(report: dict[str, Any], path: str, title: str = "Reliability") -> str:
    """Reliability diagram (before and after the map) as a PNG; returns the path."""
    import matplotlib  # lazy: only the reliability diagram needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5), dpi=110)
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="perfect")
    for label, key, colour in (("before", "reliability_before", "tab:red"), ("after", "reliability_after", "tab:blue")):
        rows = report.get(key) or []
        if not rows:
            continue
        x = [r["confidence"] for r in rows]
        y = [r["accuracy"] for r in rows]
        ece = report[label]["ece"]
        ax.plot(x, y, marker="o", color=colour, label=f"{label} (ECE {ece:.3f})")
    ax.set_xlabel("stated confidence (top answer)")
    ax.set_ylabel("observed accuracy")
    ax.set_xlim(0, 1.01)
    ax.set_ylim(0, 1.01)
    ax.set_title(f"{title}: {report.get('method', 'none')} map, n={report.get('n', 0)}")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
