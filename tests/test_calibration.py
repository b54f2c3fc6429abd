"""Output calibration: metrics, maps, time-ordered held-out predictions, and the nightly job
that publishes them (plus the `train` / `calibration` commands)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from doxa.inference.learn import calibrate
from doxa.inference.learn import metrics
from doxa.inference.read import scorer
from doxa.inference.evaluation.simulate import SimulationConfig, simulate_evidence
from training_data import crowd_store

QUICK_FIT = {"progress": False, "n_draws": 40, "window": 20, "patience": 40, "max_steps": 250}


def draws_from(probs: np.ndarray, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random((len(probs), 1)) > probs.cumsum(1)).sum(1).clip(max=probs.shape[1] - 1)


def honest_predictions(n: int, k: int = 3, seed: int = 0):
    """Beliefs and answers drawn from those very beliefs: calibrated by construction."""
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.full(k, 0.6), size=n)
    return probs, draws_from(probs, seed + 1)


def sharpen(probs: np.ndarray, temperature: float) -> np.ndarray:
    out = probs ** (1 / temperature)
    return out / out.sum(1, keepdims=True)


# ---------------------------------------------------------------------------- metrics
def test_ece_is_small_for_honest_beliefs_and_large_for_overconfident_ones():
    probs, answer = honest_predictions(6000)
    assert metrics.expected_calibration_error(*metrics.top_answer(probs, answer)) < 0.03
    assert metrics.expected_calibration_error(*metrics.top_answer(sharpen(probs, 0.4), answer)) > 0.08


# ---------------------------------------------------------------------------- maps
@pytest.mark.parametrize("distortion", [0.5, 2.0])
def test_temperature_undoes_a_known_distortion(distortion):
    probs, answer = honest_predictions(4000, seed=3)
    fitted = calibrate.fit_temperature(sharpen(probs, distortion), answer)
    assert fitted["temperature"] == pytest.approx(1 / distortion, rel=0.15)


def test_floor_catches_confident_misses_without_flattening_everything():
    rng = np.random.default_rng(4)
    probs = np.tile([[0.999, 0.001]], (400, 1))
    answer = (rng.random(400) < 0.1).astype(int)  # right 90% of the time
    fitted = calibrate.fit_temperature(probs, answer, floor=True)
    after = calibrate.apply_calibration(fitted, probs)
    assert after[0, 0] == pytest.approx(0.9, abs=0.04)
    assert metrics.log_loss(after, answer) < 0.5 * metrics.log_loss(probs, answer)


def test_isotonic_map_is_monotone_and_helps_miscalibrated_beliefs():
    probs, answer = honest_predictions(3000, k=2, seed=5)
    skewed = sharpen(probs, 0.5)
    x, y = calibrate.fit_isotonic(skewed, answer)
    assert np.all(np.diff(x) > 0) and np.all(np.diff(y) >= 0) and 0 < min(y) and max(y) < 1
    mapped = calibrate.apply_calibration({"method": "isotonic", "x": x, "y": y}, skewed)
    assert metrics.log_loss(mapped, answer) < metrics.log_loss(skewed, answer)


def test_output_calibration_reports_cross_validated_after_figures():
    probs, answer = honest_predictions(800, seed=6)
    cal = calibrate.OutputCalibration(allow_floor=False).fit(sharpen(probs, 0.5), answer, groups=np.arange(800) // 2)
    report = cal.report()
    assert report["after_is"] == "cross-validated" and report["n"] == 800
    assert report["after"]["log_loss"] < report["before"]["log_loss"]
    assert report["after"]["ece"] < report["before"]["ece"]
    assert cal.map_["method"] in ("temperature", "isotonic")
    assert len(report["reliability_before"]) == calibrate.N_BINS
    tiny = calibrate.OutputCalibration().fit(probs[:5], answer[:5])
    assert tiny.map_ == {"method": "none"}  # five settlements say nothing


def _with_low_confidence_misses(seed: int):
    """Calibrated 4-option predictions plus a dozen near-uniform ones that all missed."""
    probs, answer = honest_predictions(600, k=4, seed=seed)
    low = np.tile([0.28, 0.25, 0.24, 0.23], (12, 1))
    missed = np.random.default_rng(seed).integers(1, 4, 12)
    return np.vstack([probs, low]), np.r_[answer, missed]


def test_isotonic_must_beat_the_best_parametric_map_by_a_standard_error():
    # seed 5: isotonic has the lowest held-out loss, by less than a standard error; it would
    # map every near-uniform belief's top answer to a few percent on the strength of 12 misses
    probs, answer = _with_low_confidence_misses(5)
    cal = calibrate.OutputCalibration().fit(probs, answer)
    cv = cal.cv_log_loss_
    assert cv["isotonic"] < min(cv["floor"], cv["temperature+floor"])
    assert cal.method_ in ("floor", "temperature+floor") and cal.map_["method"] == "temperature"
    chosen = []
    for seed in range(5):
        cal = calibrate.OutputCalibration().fit(*_with_low_confidence_misses(seed))
        cv = cal.cv_log_loss_
        parametric = min(("floor", "temperature+floor"), key=cv.get)
        assert (cal.method_ == "isotonic") == (cv[parametric] - cv["isotonic"] > cal.cv_se_[parametric])
        assert cal.method_ in (parametric, "isotonic")
        chosen.append(cal.method_)
    assert "isotonic" in chosen and set(chosen) - {"isotonic"}  # both sides of the rule seen


def test_the_floor_alone_is_a_candidate():
    probs, answer = honest_predictions(200, seed=8)
    fitted = calibrate.fit_map("floor", probs, answer)
    assert fitted["method"] == "temperature" and fitted["temperature"] == 1.0 and 0 < fitted["floor"] < 0.1
    mapped = calibrate.apply_calibration(fitted, probs)
    np.testing.assert_array_equal(mapped.argmax(1), probs.argmax(1))
    # on fewer than CHOICE_MIN_POINTS predictions held-out loss cannot tell T from 1: the MAP
    # temperature (under its prior) with the floor is the only map
    assert set(calibrate.OutputCalibration().fit(probs, answer).cv_log_loss_) == {"temperature+floor"}
    more, answers = honest_predictions(calibrate.CHOICE_MIN_POINTS, seed=8)
    assert set(calibrate.OutputCalibration().fit(more, answers).cv_log_loss_) == {
        "floor", "temperature+floor", "isotonic"}


def test_a_real_distortion_is_still_undone():
    probs, answer = honest_predictions(1500, seed=9)
    cal = calibrate.OutputCalibration().fit(sharpen(probs, 0.5), answer)
    assert cal.method_ in ("temperature+floor", "isotonic")
    assert cal.cv_log_loss_["floor"] > cal.cv_log_loss_[cal.method_] + 0.01


def test_one_standard_error_rule_prefers_the_simplest_within_noise():
    rng = np.random.default_rng(0)
    base = rng.exponential(size=400)
    close = {"simple": base + 0.001 + rng.normal(0, 0.05, 400), "complex": base}
    assert calibrate.one_standard_error_choice(close)[0] == "simple"
    far = {"simple": base + 0.2 + rng.normal(0, 0.05, 400), "complex": base}
    chosen, se = calibrate.one_standard_error_choice(far)
    assert chosen == "complex" and se["complex"] == 0.0 and 0 < se["simple"] < 0.01


def test_reliability_diagram_is_written(tmp_path):
    probs, answer = honest_predictions(300, seed=7)
    report = calibrate.OutputCalibration(allow_floor=False).fit(sharpen(probs, 0.6), answer).report()
    path = calibrate.plot_reliability(report, str(tmp_path / "reliability.png"))
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert "| before |" in calibrate.markdown_table(report) and "| 1 |" in calibrate.reliability_markdown(report)


# ---------------------------------------------------------------------------- time order
def test_prediction_for_a_settlement_ignores_later_evidence():
    from doxa.inference.read.params import default_params
    from doxa.inference.learn.train import predict_settlements
    from doxa.model.structure import ModelStructure

    evidence, _ = simulate_evidence(SimulationConfig(n_questions=60, seed=8))
    structure = ModelStructure.from_evidence(evidence)
    document = default_params()
    before = predict_settlements(evidence, structure, document)
    # drop every reading after the last settlement of its question: predictions must not move
    last = np.full(len(structure.question_k), -np.inf)
    np.maximum.at(last, evidence.settle_q, evidence.settle_t)
    keep = evidence.t <= last[evidence.q]
    for name in ("q", "t", "source_index", "reader_index", "probs", "unclear", "unrelated", "one_off"):
        setattr(evidence, name, getattr(evidence, name)[keep])
    after = predict_settlements(evidence, structure, document)
    np.testing.assert_allclose(after.probs, before.probs)
    # and it is the scorer's belief at that moment, from the evidence up to then
    q, t = int(before.question[0]), float(before.t[0])
    upto = evidence.t <= t
    for name in ("q", "t", "source_index", "reader_index", "probs", "unclear", "unrelated", "one_off"):
        setattr(evidence, name, getattr(evidence, name)[upto])
    earlier = evidence.settle_t < t
    for name in ("settle_q", "settle_t", "settle_answer", "settle_how"):
        setattr(evidence, name, getattr(evidence, name)[earlier])
    expected = scorer.score(evidence, document, at=t, calibrate=False).raw[q]
    np.testing.assert_allclose(before.probs[0], expected, atol=1e-9)


# ---------------------------------------------------------------------------- the nightly job
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from doxa.inference.learn.train import train

    folder = tmp_path_factory.mktemp("train")
    db = str(folder / "crowd.duckdb")
    store, info = crowd_store(db, n_items=40, n_workers=6, gold_share=0.5, seed=9)
    first = train(store, fit_options={**QUICK_FIT, "confusion": "off"}, folds=2, progress=False)
    second = train(store, fit_options={**QUICK_FIT, "confusion": "off", "seed": 1}, folds=0, progress=False)
    return store, db, first, second


def test_train_publishes_a_version_the_scorer_reads(trained):
    store, db, first, second = trained
    assert (first.version, second.version) == (1, 2)
    version, body = store.latest_params()
    assert version == 2 and body["calibration"] == second.document["calibration"]
    report = body["diagnostics"]["calibration"]
    assert first.document["diagnostics"]["calibration"]["out_of_sample"] is True
    assert report["out_of_sample"] is False and report["n"] == 20
    beliefs = scorer.score(store.load_evidence(), body)
    assert np.allclose(beliefs.probs.sum(1), 1.0)
    assert second.moved and {m["what"] for m in second.moved} <= {"trust", "half_life_days", "reader_temperature"}
    assert second.moved[0]["size"] >= second.moved[-1]["size"]


def test_posterior_draws_are_exported_per_version(trained):
    import arviz as az

    _, db, first, second = trained
    assert first.posterior_path.endswith("crowd.duckdb.posterior/v1.nc")
    idata = az.from_netcdf(second.posterior_path)
    trust = idata.posterior["trust"]
    assert trust.sizes["chain"] == 1 and trust.sizes["draw"] == QUICK_FIT["n_draws"]
    assert "crowd/birds/w0" in trust.coords["node"].values.tolist()
    assert "elbo" in idata.fit


def test_diverged_fit_publishes_nothing(monkeypatch):
    import torch

    from doxa.inference.learn.fit import FitDiverged
    from doxa.inference.learn.train import train
    from doxa.model import belief_model as story

    store, _ = crowd_store(n_items=20, n_workers=4, seed=10)
    monkeypatch.setattr(story, "chain_log_marginal", lambda chains, derived, readings_only=False: torch.full((chains.n_questions,), torch.nan))
    with pytest.raises(FitDiverged):
        train(store, fit_options=QUICK_FIT, progress=False)
    assert store.latest_params() == (None, None)


def test_commands_train_and_calibration(tmp_path):
    from typer.testing import CliRunner

    from doxa.cli.main import app

    db = str(tmp_path / "cli.duckdb")
    store, _ = crowd_store(db, n_items=30, n_workers=5, gold_share=0.7, seed=11)
    store.close()
    runner = CliRunner()
    out = runner.invoke(app, ["train", "--db", db, "--json", "--folds", "0", "--confusion", "off",
                              "--max-steps", "150"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.stdout)
    assert summary["version"] == 1 and summary["n_settlements"] == 21
    assert summary["kept_states"] == {"written": 30, "refreshed": 0}  # nothing came in during the fit
    png = str(tmp_path / "rel.png")
    out = runner.invoke(app, ["calibration", "--db", db, "--json", "--plot", png])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["version"] == 1 and report["n"] == 21 and open(png, "rb").read(4) == b"\x89PNG"
    out = runner.invoke(app, ["calibration", "--db", db])
    assert "| before |" in out.stdout
    from doxa.data.store import Store

    empty = str(tmp_path / "empty.duckdb")
    Store.open(empty).close()
    out = runner.invoke(app, ["calibration", "--db", empty])
    assert out.exit_code == 1 and "doxa train" in out.output


def test_a_store_with_no_settlement_reports_that_it_has_nothing_to_measure():
    report = calibrate.OutputCalibration().fit(np.zeros((0, 2)), np.zeros(0, dtype=int)).report()
    published = dict(report, before={k: None for k in report["before"]}, after={k: None for k in report["after"]})
    for shown in (calibrate.markdown_table(report), calibrate.markdown_table(published)):  # as fitted, and as read back from JSON
        assert "No settlement yet" in shown and "doxa correct" in shown and "| before |" not in shown


def test_train_with_readings_but_no_settlement_publishes_nothing(tmp_path):
    from typer.testing import CliRunner

    from doxa.cli.main import app

    db = str(tmp_path / "unsettled.duckdb")
    store, _ = crowd_store(db, n_items=20, n_workers=4, gold_share=0.0, seed=12)
    assert store.load_evidence().n_readings > 0
    store.close()
    out = CliRunner().invoke(app, ["train", "--db", db, "--max-steps", "50"])
    assert out.exit_code == 1 and "no settlement to learn from" in out.output and "doxa correct" in out.output
    from doxa.data.store import Store

    with Store.open(db) as reopened:
        assert reopened.latest_params() == (None, None)


def test_a_diverged_fit_is_run_again_at_a_smaller_learning_rate(monkeypatch):
    import torch

    from doxa.inference.learn import train as T
    from doxa.model import belief_model as story

    store, _ = crowd_store(n_items=20, n_workers=4, seed=10)
    real = story.chain_log_marginal
    rates = []
    original_init = T.BeliefFit.__init__

    def remember_rate(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        rates.append(self.learning_rate)

    def nan_at_the_first_rate(chains, derived, readings_only=False):
        value = real(chains, derived, readings_only=readings_only)
        return torch.full_like(value, torch.nan) if rates[-1] == 0.05 else value

    monkeypatch.setattr(T.BeliefFit, "__init__", remember_rate)
    monkeypatch.setattr(story, "chain_log_marginal", nan_at_the_first_rate)
    result = T.train(store, fit_options=dict(QUICK_FIT, learning_rate=0.05), progress=False)
    refit = result.summary()["refit"]
    assert refit["learning_rate"] == pytest.approx(0.05 * T.REFIT_LEARNING_RATE_FACTOR)
    assert refit["diverged_at_step"] == 0 and result.version == 1
    assert store.latest_params()[1]["diagnostics"]["refit"] == refit
