"""Stochastic variational inference for the belief model (DESIGN §4.2).

:class:`BeliefFit` fits :func:`doxa.model.belief_model.belief_model` to an
:class:`~doxa.data.evidence.Evidence` and turns the posterior into the parameter
document the scorer reads (:mod:`doxa.inference.read.params`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer import TraceMeanField_ELBO
from pyro.infer.autoguide import AutoLowRankMultivariateNormal, AutoNormal, init_to_mean

from doxa.data.evidence import Evidence
from doxa.model.belief_model import belief_model, derive
from doxa.model.chains import make_chains
from doxa.model.events import EventStream
from doxa.model.filter import filter_evidence, tempered_readings
from doxa.model.likelihood import Derived
from doxa.model.structure import ModelStructure

from doxa.inference.read import params as P

CONFUSION_CHOICES = ("auto", "on", "off")


class FitDiverged(RuntimeError):
    """The fit went numerically wrong; nothing may be published from it."""

    def __init__(self, reason: str, step: int):
        super().__init__(f"fit diverged at step {step}: {reason}. Nothing was published; "
                         "try a smaller --learning-rate or check the evidence for impossible settlements")
        self.reason = reason
        self.step = step


class NothingToFit(ValueError):
    """The store holds no evidence the model could learn from."""


@dataclass
class _Run:
    losses: list[float]
    converged: bool
    seconds: float


class Adam:
    """Adam (Kingma & Ba 2015, "Adam: a method for stochastic optimization") over a list of tensors.

    ``m ← β₁m + (1-β₁)g``, ``v ← β₂v + (1-β₂)g²``, ``θ ← θ - lr·(m/(1-β₁ᵗ)) / (√(v/(1-β₂ᵗ)) + ε)``:
    the same update as ``torch.optim.Adam`` with its defaults. Written out because the
    first ``torch.optim`` step imports ``torch._dynamo``, 1.5–6 s of every ``doxa train``
    process, for features (compilation, fused kernels) a few small tensors do not need.
    """

    def __init__(self, params: list[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        self.params = list(params)
        self.lr = lr
        self.betas = betas
        self.eps = eps
        self.steps = 0
        self._m = [torch.zeros_like(p) for p in self.params]
        self._v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        beta1, beta2 = self.betas
        step_size = self.lr / (1 - beta1 ** self.steps)
        root_correction = math.sqrt(1 - beta2 ** self.steps)
        for p, m, v in zip(self.params, self._m, self._v):
            if p.grad is None:
                continue
            m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            p.addcdiv_(m, (v.sqrt() / root_correction).add_(self.eps), value=-step_size)


class _Plateau:
    """Convergence on a smoothed ELBO: the mean loss over the last ``window`` steps.

    The smoothed loss has reached a plateau when it has not improved on its best by
    more than ``rel_tol`` (relative) or two standard errors of the window mean, whichever
    is larger, for ``patience`` steps. A blow-up is a smoothed loss that has climbed back
    above where it started and above its best by ``blowup_factor`` times the larger of
    the descent so far, twenty step-to-step deviations and 5% of the loss.
    """

    def __init__(self, window: int, patience: int, rel_tol: float, blowup_factor: float):
        self.window, self.patience, self.rel_tol, self.blowup_factor = window, patience, rel_tol, blowup_factor
        self.best = math.inf
        self.best_step = 0
        self.start = None
        self.plateaus = 0
        self.since = 0
        self.reason = ""

    def restart(self, step: int) -> None:
        self.best, self.best_step, self.since = math.inf, step, step

    def update(self, losses: list[float]) -> str:
        w, n = self.window, len(losses)
        if n - self.since < w or n % max(w // 5, 1):
            return "running"
        tail = np.asarray(losses[-w:])
        cur = float(tail.mean())
        if self.start is None:
            self.start = cur
        noise = 2.0 * float(tail.std()) / math.sqrt(w)
        if cur < self.best - max(self.rel_tol * abs(cur), noise):
            self.best, self.best_step = cur, n
        elif self.best < math.inf and cur > self.start and cur - self.best > self.blowup_factor * max(
                self.start - self.best, 20.0 * float(tail.std()), 0.05 * abs(self.best), 1.0):
            self.reason = f"the ELBO fell from {-self.best:.5g} to {-cur:.5g} (blow-up)"
            return "blow-up"
        if n - self.best_step >= self.patience:
            self.plateaus += 1
            return "plateau"
        return "running"


class BeliefFit:
    """Hierarchical source trust, base rates, change rates and reader temperature by SVI.

    The model is the hidden-Markov story of DESIGN §2 (see :mod:`doxa.model.belief_model`):
    the answer of each question is marginalised exactly by the forward algorithm, so
    every latent is global and an unbiased ELBO can subsample questions (Hoffman et al.
    2013, "Stochastic variational inference"); a step sees about ``events_per_step``
    events. The guide is a mean-field normal in the unconstrained space (Kucukelbir et
    al. 2017, ADVI), or a low-rank multivariate normal (``guide="lowrank"``).

    Convergence: Adam at ``learning_rate`` until the mean loss over ``window`` steps has
    not improved by more than ``rel_tol`` (relative) or two standard errors for
    ``patience`` steps; then the rate drops by ``lr_drop`` and the same test runs again;
    the second plateau ends the fit (``converged_``), ``max_steps`` caps it. A NaN or
    infinite loss, gradient or parameter, or a loss climbing back far above its best,
    raises :class:`FitDiverged`.

    Biased sources (Dawid & Skene 1979): with ``confusion="auto"`` the one-number fit is
    checked against what sources actually state (:func:`bias_statistic`); only when
    that shows an excess (``z > bias_z``) is the confusion-matrix form fitted, warm-started,
    and kept if its ELBO is higher by more than ``confusion_margin`` nats plus three
    standard errors. ``"on"`` always fits and keeps it; ``"off"`` never fits it.

    Fitted state: ``structure_``, ``guide_``, ``losses_`` (loss = −ELBO per step, both
    forms concatenated when two were fitted), ``converged_``, ``steps_``, ``seconds_``,
    ``confusion_`` (the form kept), ``elbo_by_form_``, ``bias_``, ``draws_`` (posterior
    draws of the derived parameters, numpy).
    """

    def __init__(
        self,
        *,
        confusion: str = "auto",
        max_steps: int = 3000,
        min_steps: int = 100,
        learning_rate: float = 0.05,
        window: int = 40,
        patience: int = 100,
        rel_tol: float = 1e-4,
        lr_drop: float = 0.2,
        events_per_step: int | None = 50_000,
        guide: str = "normal",
        n_draws: int = 300,
        confusion_margin: float = 5.0,
        bias_z: float = 2.0,
        blowup_factor: float = 3.0,
        seed: int = 0,
        progress: bool = True,
        num_threads: int | None = 1,
    ):
        if confusion not in CONFUSION_CHOICES:
            raise ValueError(f"confusion must be one of {CONFUSION_CHOICES}, not {confusion!r}")
        if guide not in ("normal", "lowrank"):
            raise ValueError(f"guide must be 'normal' or 'lowrank', not {guide!r}")
        self.confusion = confusion
        self.max_steps = max_steps
        self.min_steps = min_steps
        self.learning_rate = learning_rate
        self.window = window
        self.patience = patience
        self.rel_tol = rel_tol
        self.lr_drop = lr_drop
        self.events_per_step = events_per_step
        self.guide = guide
        self.n_draws = n_draws
        self.confusion_margin = confusion_margin
        self.bias_z = bias_z
        self.blowup_factor = blowup_factor
        self.seed = seed
        self.progress = progress
        self.num_threads = num_threads

    _OPTIONS = ("confusion", "max_steps", "min_steps", "learning_rate", "window", "patience", "rel_tol", "lr_drop",
                "events_per_step", "guide", "n_draws", "confusion_margin", "bias_z", "blowup_factor", "seed", "progress",
                "num_threads")

    def get_params(self) -> dict[str, Any]:
        """The constructor options (as in scikit-learn), e.g. to refit with the same settings."""
        return {name: getattr(self, name) for name in self._OPTIONS}

    # ------------------------------------------------------------------ fitting
    def fit(self, evidence: Evidence, *, settlement_mask: np.ndarray | None = None,
            init_from: "BeliefFit | None" = None) -> "BeliefFit":
        """Fit to ``evidence``; ``settlement_mask`` hides settlements (held-out folds).

        ``init_from`` warm-starts from another fit of the same evidence's readings
        (the form, one-number or confusion, is taken from it).
        """
        started = time.perf_counter()
        if self.num_threads:
            # tiny tensors on a shared 2-core machine: a second thread mostly waits on the first
            torch.set_num_threads(self.num_threads)
        if evidence.n_readings == 0 and len(evidence.settle_q) == 0:
            raise NothingToFit("no readings or settlements to learn from: ingest evidence first "
                               "(`doxa ingest FILE`)")
        pyro.set_rng_seed(self.seed)
        structure = init_from.structure_ if init_from is not None else ModelStructure.from_evidence(evidence)
        stream = EventStream.from_evidence(evidence, structure, settlement_mask)
        chains = make_chains(stream, structure, events_per_step=self.events_per_step)
        if not chains:
            raise NothingToFit("no question has two or more options and any evidence: nothing to fit")
        self.structure_ = structure
        self.n_events_ = len(stream)
        self.n_readings_ = int((~stream.is_settlement).sum())
        self.n_settlements_ = int(stream.is_settlement.sum())

        losses: list[float] = []
        self.elbo_by_form_: dict[str, float] = {}
        self.bias_: dict[str, float] | None = None
        self.draws_ = None
        if init_from is not None:
            use_confusion = init_from.confusion_
            guide = self._make_guide(structure, chains, use_confusion, init_from.guide_)
            run = self._run(structure, chains, use_confusion, guide, "refit")
            losses += run.losses
            converged = run.converged
            self.elbo_by_form_["confusion" if use_confusion else "trust"] = -self._tail_mean(run.losses)
        else:
            plain = self._make_guide(structure, chains, False, None)
            run = self._run(structure, chains, False, plain, "trust")
            losses += run.losses
            guide, use_confusion, converged = plain, False, run.converged
            self.elbo_by_form_["trust"] = -self._tail_mean(run.losses)
            draws = self._draws(structure, chains, False, plain)
            try_confusion = self.confusion == "on"
            if self.confusion == "auto" and structure.pairs:
                self.bias_ = bias_statistic(evidence, structure, _document_from_draws(structure, draws))
                try_confusion = self.bias_["z"] > self.bias_z
            if try_confusion and structure.pairs:
                rich = self._make_guide(structure, chains, True, plain)
                run_c = self._run(structure, chains, True, rich, "confusion")
                losses += run_c.losses
                self.elbo_by_form_["confusion"] = -self._tail_mean(run_c.losses)
                gain = self.elbo_by_form_["confusion"] - self.elbo_by_form_["trust"]
                noise = math.hypot(self._tail_se(run.losses), self._tail_se(run_c.losses))
                self.confusion_gain_ = gain
                if self.confusion == "on" or gain > self.confusion_margin + 3 * noise:
                    guide, use_confusion, converged = rich, True, run_c.converged
                    draws = None
            self.draws_ = draws
        self.guide_ = guide
        self.chains_ = chains
        self.confusion_ = use_confusion
        self.losses_ = losses
        self.converged_ = converged
        self.steps_ = len(losses)
        if getattr(self, "draws_", None) is None or init_from is not None:
            self.draws_ = self._draws(structure, chains, use_confusion, guide)
        self.seconds_ = time.perf_counter() - started
        return self

    def _model(self, structure, chains, confusion):
        def model():
            belief_model(structure, chains, confusion=confusion)
        return model

    def _make_guide(self, structure, chains, confusion, warm_from):
        model = self._model(structure, chains, confusion)
        with _fast_pyro():
            if self.guide == "lowrank":
                guide = AutoLowRankMultivariateNormal(model, init_loc_fn=init_to_mean, init_scale=0.05, rank=10)
            else:
                guide = AutoNormal(model, init_loc_fn=init_to_mean, init_scale=0.05)
            guide()  # builds the parameters
            if warm_from is not None:
                _copy_shared(warm_from, guide)
        return guide

    def _run(self, structure, chains, confusion, guide, label: str) -> _Run:
        started = time.perf_counter()
        model = self._model(structure, chains, confusion)
        with _fast_pyro():
            loss_fn = TraceMeanField_ELBO()(model, guide)
            params = list(loss_fn.parameters())
            optim = Adam(params, lr=self.learning_rate)
            losses: list[float] = []
            converged = False
            watch = _Plateau(self.window, self.patience, self.rel_tol, self.blowup_factor)
            bar = _progress(self.max_steps, f"fit ({label})", self.progress)
            try:
                for step in range(self.max_steps):
                    optim.zero_grad()
                    loss = loss_fn()
                    value = float(loss.detach())
                    if not math.isfinite(value):
                        raise FitDiverged(f"the ELBO is {value}", step)
                    loss.backward()
                    if not all(bool(torch.isfinite(p.grad).all()) for p in params if p.grad is not None):
                        raise FitDiverged("a gradient is NaN or infinite", step)
                    optim.step()
                    losses.append(value)
                    if bar is not None:
                        bar.update(1)
                        if step % 10 == 0:
                            bar.set_postfix(elbo=f"{-value:.5g}", lr=f"{optim.lr:.3g}")
                    state = watch.update(losses)
                    if state == "blow-up":
                        raise FitDiverged(watch.reason, step)
                    if state == "plateau" and step + 1 >= self.min_steps:
                        if watch.plateaus >= 2:
                            converged = True
                            break
                        # first plateau: smaller steps average out the gradient noise
                        optim.lr *= self.lr_drop
                        watch.restart(len(losses))
            finally:
                if bar is not None:
                    bar.close()
            for p in params:
                if not bool(torch.isfinite(p).all()):
                    raise FitDiverged("a variational parameter became NaN", len(losses))
        return _Run(losses=losses, converged=converged, seconds=time.perf_counter() - started)

    def _tail_mean(self, losses: list[float]) -> float:
        return float(np.mean(losses[-self.window:]))

    def _tail_se(self, losses: list[float]) -> float:
        tail = np.asarray(losses[-self.window:])
        return float(tail.std() / math.sqrt(max(len(tail), 1)))

    # ------------------------------------------------------------------ posterior
    def _draws(self, structure, chains, confusion, guide) -> dict[str, np.ndarray]:
        model = self._model(structure, chains, confusion)
        del model
        out: dict[str, list] = {}
        with torch.no_grad(), _fast_pyro():
            for _ in range(self.n_draws):
                latents = guide()
                derived = derive(structure, latents)
                record = {
                    "trust": derived.trust.numpy(),
                    "rate": derived.rate.numpy(),
                    "temperature": (1.0 / derived.inv_temperature).numpy(),
                    "trust_root": torch.sigmoid(latents["trust_root"]).numpy(),
                    "trust_scale": latents["trust_scale"].numpy(),
                    "rate_loc": latents["rate_loc"].numpy(),
                    "rate_scale": latents["rate_scale"].numpy(),
                }
                for k, table in derived.prior_table.items():
                    record[f"prior_{k}"] = table[:-1].numpy()
                for k, table in derived.confusion.items():
                    record[f"confusion_{k}"] = table.numpy()
                for name, value in record.items():
                    out.setdefault(name, []).append(np.array(value, dtype=np.float64))
        return {name: np.stack(values) for name, values in out.items()}

    def params_document(self, *, interval: float = 0.9) -> dict[str, Any]:
        """The parameter document of :mod:`doxa.inference.read.params` (no calibration map yet)."""
        doc = _document_from_draws(self.structure_, self.draws_, interval)
        doc["diagnostics"] = self.diagnostics()
        return doc

    def diagnostics(self, max_points: int = 200) -> dict[str, Any]:
        losses = np.asarray(self.losses_, dtype=np.float64)
        stride = max(1, math.ceil(len(losses) / max_points))
        return {
            "elbo": [float(-x) for x in losses[::stride]],
            "elbo_stride": stride,
            "steps": int(self.steps_),
            "seconds": round(float(self.seconds_), 3),
            "converged": bool(self.converged_),
            "confusion": bool(self.confusion_),
            "elbo_by_form": {k: float(v) for k, v in self.elbo_by_form_.items()},
            "bias_check": self.bias_,
            "guide": self.guide,
            "n_readings": int(self.n_readings_),
            "n_settlements": int(self.n_settlements_),
            "n_questions": int(len(self.structure_.question_k)),
            "n_nodes": int(self.structure_.n_nodes),
            "events_per_step": self.events_per_step,
            "subsampled": any(b.subsample is not None for b in self.chains_),
        }


def _document_from_draws(structure: ModelStructure, draws: dict[str, np.ndarray],
                         interval: float = 0.9) -> dict[str, Any]:
    """Posterior means (trust, confusion, base rates), geometric means (change rates, τ) and intervals.

    A change rate is published as the geometric mean of its draws, the guide's median of a
    log-normal: the median of ``λ`` and of the half-life ``ln 2 / λ`` are the same summary,
    where the mean of ``λ`` would report a half-life shorter by ``exp(sd(log λ)²/2)``.
    """
    s, d = structure, draws
    lo_q, hi_q = (1 - interval) / 2, 1 - (1 - interval) / 2
    trust = d["trust"]
    doc = document_from_values(
        s,
        trust=trust.mean(0),
        confusion={k: d[f"confusion_{k}"].mean(0) for k in s.pairs if f"confusion_{k}" in d},
        priors={k: d[f"prior_{k}"].mean(0) for k in s.group_ks},
        rate=np.exp(np.log(d["rate"]).mean(0)),
        temperature=np.exp(np.log(d["temperature"]).mean(0)),
    )
    t_lo, t_hi = np.quantile(trust, [lo_q, hi_q], axis=0)
    for i, path in enumerate(s.tree.paths.tolist()):
        doc["trust"][path].update(lo=float(t_lo[i]), hi=float(t_hi[i]))
    r_lo, r_hi = np.quantile(d["rate"], [lo_q, hi_q], axis=0)
    for i, kind in enumerate(s.kinds.tolist()):
        doc["kinds"][kind]["change_rate_interval"] = [float(r_lo[i]), float(r_hi[i])]
    tau_lo, tau_hi = np.quantile(d["temperature"], [lo_q, hi_q], axis=0)
    for i, reader in enumerate(s.readers.tolist()):
        doc["readers"][reader].update(lo=float(tau_lo[i]), hi=float(tau_hi[i]))
    doc["defaults"] = {
        "trust": float(d["trust_root"].mean()),
        "change_rate": float(np.exp(d["rate_loc"]).mean()),
    }
    return doc


def bias_statistic(evidence: Evidence, structure: ModelStructure, document: dict[str, Any],
                   min_readings: int = 10) -> dict[str, float]:
    """Do sources state some answers more often than one number of trust explains?

    For every (source, kind) with at least ``min_readings`` readings, compare what its
    messages stated with what the one-number model predicted from the belief just before
    each message, ``e_c = m/K + (1-m)(α b_c + (1-α)(1-b_c)/(K-1))``: Pearson's X² over
    options, summed over pairs, against its degrees of freedom. ``z`` is the excess in
    standard deviations (X² ≈ df ± √(2 df) when trust is one number).

    What a message stated is read through the reader: its tempered output ``r̃`` is a
    likelihood over the stated option, so each message counts as the posterior
    ``r̃_c e_c / Σ r̃ e`` (whose expectation is ``e`` when the model holds). For certain
    readings (crowd labels) that is ``r̃`` itself; summing soft readings as they are
    would pull every source toward uniform statements and look like bias (z in the
    hundreds at 1M simulated readings with no biased source).
    """
    derived = derived_from_document(structure, {**document, "confusion": {}})
    result, stream = filter_evidence(evidence, structure, derived)
    reading = ~stream.is_settlement
    r_t = tempered_readings(stream, structure, derived)[reading]
    b = result.predictive[reading]
    k = structure.question_k[stream.q[reading]].astype(np.float64)[:, None]
    valid = np.arange(b.shape[1])[None, :] < k
    alpha = derived.trust.numpy()[stream.leaf[reading]][:, None]
    m = stream.mix[reading][:, None]
    expected = m / k + (1 - m) * (alpha * b + (1 - alpha) * (1 - b) / np.maximum(k - 1, 1))
    expected = np.where(valid, expected, 0.0)
    kind = structure.question_kind[stream.q[reading]]
    key = stream.leaf[reading] * max(structure.n_kinds, 1) + kind
    keys, group, counts = np.unique(key, return_inverse=True, return_counts=True)
    observed_sum = np.zeros((len(keys), b.shape[1]))
    expected_sum = np.zeros_like(observed_sum)
    joint = np.where(valid, r_t * expected, 0.0)
    total = joint.sum(axis=1, keepdims=True)
    stated = np.where(total > 0, joint / np.where(total > 0, total, 1.0), r_t)
    np.add.at(observed_sum, group, stated)
    np.add.at(expected_sum, group, expected)
    enough = counts >= min_readings
    with np.errstate(divide="ignore", invalid="ignore"):
        cells = np.where(expected_sum > 0, (observed_sum - expected_sum) ** 2 / expected_sum, 0.0)
    chi2 = float(cells[enough].sum())
    options = (expected_sum > 0).sum(axis=1)
    df = float(np.maximum(options[enough] - 1, 0).sum())
    z = (chi2 - df) / math.sqrt(2 * df) if df > 0 else 0.0
    return {"chi2": chi2, "df": df, "z": z, "pairs": int(enough.sum())}


def document_from_values(structure: ModelStructure, *, trust: np.ndarray, confusion: dict[int, np.ndarray],
                         priors: dict[int, np.ndarray], rate: np.ndarray, temperature: np.ndarray
                         ) -> dict[str, Any]:
    """A parameter document from one value per parameter (posterior means, or a test's point)."""
    s = structure
    doc = P.default_params()
    doc.pop("version")
    n_msgs = s.node_messages
    doc["trust"] = {path: {"mean": float(trust[i]), "lo": float(trust[i]), "hi": float(trust[i]),
                           "n": int(n_msgs[i])}
                    for i, path in enumerate(s.tree.paths.tolist())}
    conf_doc: dict[str, dict[str, list]] = {}
    for k, table in confusion.items():
        pairs = s.pairs[k]
        for i, (node, kind) in enumerate(zip(pairs.node.tolist(), pairs.kind.tolist())):
            conf_doc.setdefault(str(s.tree.paths[node]), {})[str(s.kinds[kind])] = np.asarray(table[i]).tolist()
    doc["confusion"] = conf_doc
    doc["kinds"] = {}
    for i, kind in enumerate(s.kinds.tolist()):
        k = int(s.kind_k[i])
        lam = float(rate[i])
        doc["kinds"][kind] = {
            "options": list(s.kind_options[i]),
            "prior": np.asarray(priors[k][s.kind_slot[i]], dtype=np.float64).tolist(),
            "change_rate": lam,
            "half_life_days": math.log(2.0) / lam if lam > 0 else float("inf"),
        }
    doc["readers"] = {reader: {"temperature": float(temperature[i])} for i, reader in enumerate(s.readers.tolist())}
    return doc


def derived_from_document(structure: ModelStructure, doc: dict[str, Any], dtype=torch.float64) -> Derived:
    """The model's parameters as the scorer would read them from ``doc`` (for the torch filter).

    Trust and confusion are looked up per node of *this* structure with the scorer's
    rules (deepest fitted node; confusion only where the document has one).
    """
    doc = P.with_defaults(doc)
    s = structure
    alpha = np.empty(s.n_nodes)
    for i, path in enumerate(s.tree.paths.tolist()):
        stated = s.stated_logit[i]
        stated_p = None if np.isnan(stated) else float(1 / (1 + np.exp(-stated)))
        alpha[i], _ = P.trust_for_source(doc, path, stated_p)
    alpha = np.clip(alpha, 1e-12, 1 - 1e-12)
    confusion = {}
    for k, table in s.pairs.items():
        matrices = []
        for node, kind in zip(table.node.tolist(), table.kind.tolist()):
            matrix, _ = P.confusion_for_source(doc, str(s.tree.paths[node]), str(s.kinds[kind]), k)
            if matrix is None:
                a = alpha[node]
                matrix = np.where(np.eye(k, dtype=bool), a, (1 - a) / max(k - 1, 1))
            matrices.append(np.asarray(matrix, dtype=np.float64))
        if doc.get("confusion"):
            confusion[k] = torch.as_tensor(np.stack(matrices), dtype=dtype)
    prior_table = {}
    for k in s.group_ks:
        rows = [P.kind_prior(doc, str(s.kinds[i]), s.kind_options[i]) for i in s.kinds_with_k(k)]
        prior_table[k] = torch.as_tensor(np.vstack(rows + [np.full(k, 1.0 / k)]), dtype=dtype)
    rate = torch.as_tensor([P.kind_change_rate(doc, str(kind)) for kind in s.kinds.tolist()], dtype=dtype)
    tau = torch.as_tensor([P.reader_temperature(doc, str(r)) for r in s.readers.tolist()] or [1.0], dtype=dtype)
    return Derived(trust_logit=torch.as_tensor(np.log(alpha) - np.log1p(-alpha), dtype=dtype),
                      confusion=confusion, prior_table=prior_table, rate=rate, inv_temperature=1.0 / tau)


def _fast_pyro():
    """Guide parameters local to their module (no global param store); argument checks off,
    since a NaN is caught by the divergence checks and reported as :class:`FitDiverged`."""
    return pyro.settings.context(module_local_params=True, validate_distributions_pyro=False,
                                 validate_distributions_torch=False, validate_infer=False, validate_poutine=False)


def _copy_shared(source_guide, target_guide) -> None:
    """Warm start: copy the variational parameters of every site both guides share."""
    src = dict(source_guide.named_parameters())
    with torch.no_grad():
        for name, param in target_guide.named_parameters():
            if name in src and src[name].shape == param.shape:
                param.copy_(src[name])


def _progress(total: int, desc: str, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    # disable=None: only on a terminal (a cron log gets no carriage-return spam)
    return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True, mininterval=0.5, disable=None)
