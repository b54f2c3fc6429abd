"""Stochastic variational inference for the belief model (docs/design.md §4.2).

:class:`BeliefFit` fits :func:`doxa.model.belief_model.belief_model` to an
:class:`~doxa.data.evidence.Evidence` and turns the posterior into the parameter
document the scorer reads (:mod:`doxa.inference.read.params`) through
:mod:`doxa.inference.learn.document`. The optimiser and its stopping rule are in
:mod:`doxa.inference.learn.optimiser`, the bias test in :mod:`doxa.inference.learn.bias`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoLowRankMultivariateNormal, AutoNormal, init_to_mean

from doxa.data.evidence import Evidence
from doxa.model.belief_model import belief_model, derive
from doxa.model.chains import make_chains
from doxa.model.settled_first import UNSETTLED_CAP
from doxa.model.events import EventStream
from doxa.model.structure import ModelStructure

from .bias import bias_statistic
from .document import document_from_draws
from .optimiser import Adam, Plateau

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


class BeliefFit:
    """Hierarchical source trust, base rates, change rates and reader temperature by SVI.

    The model is the hidden-Markov story of docs/design.md §2 (see :mod:`doxa.model.belief_model`):
    the answer of each question is marginalised exactly by the forward algorithm, so
    every latent is global and an unbiased ELBO can subsample questions (Hoffman et al.
    2013, "Stochastic variational inference"); a step sees about ``events_per_step``
    events. The guide is a mean-field normal in the unconstrained space (Kucukelbir et
    al. 2017, ADVI), or a low-rank multivariate normal (``guide="lowrank"``). The objective
    is ``Trace_ELBO``: Pyro 1.9's ``TraceMeanField_ELBO`` scores an auto-guide's constrained
    sites by ``kl_divergence(Delta, prior) = -log p(value)``, without the log-Jacobian the
    Delta carries, so HalfNormal scales collapse toward 0 and Dirichlet base rates run to
    the simplex edge (tests/test_fit.py, the base rates' known posterior).

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
    ``keep_forms=True`` (with ``"auto"``) fits both forms whatever the bias statistic and
    keeps both (``forms_``), for the nightly job to choose between them by held-out
    settled facts (:mod:`doxa.inference.learn.choice`, :meth:`use_form`): the bias test and
    the ELBO say how well a form explains the readings, not how well it predicts what
    will be settled, and on real crowd sets they kept the wrong one. Under ``"auto"`` a
    divergence of the confusion form keeps the one-number form (``confusion_diverged_``
    says where; seen on a real model's readings of 24 questions); under ``"on"`` it raises.

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
        unsettled_cap: float | None = UNSETTLED_CAP,
        keep_forms: bool = False,
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
        self.unsettled_cap = unsettled_cap
        self.keep_forms = keep_forms

    _OPTIONS = ("confusion", "max_steps", "min_steps", "learning_rate", "window", "patience", "rel_tol", "lr_drop",
                "events_per_step", "guide", "n_draws", "confusion_margin", "bias_z", "blowup_factor", "seed", "progress",
                "num_threads", "unsettled_cap", "keep_forms")

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
        chains = make_chains(stream, structure, events_per_step=self.events_per_step,
                             unsettled_cap=self.unsettled_cap)
        if not chains:
            raise NothingToFit("no question has two or more options and any evidence: nothing to fit")
        self.structure_ = structure
        self.n_events_ = len(stream)
        self.n_readings_ = int((~stream.is_settlement).sum())
        self.n_settlements_ = int(stream.is_settlement.sum())

        losses: list[float] = []
        self.elbo_by_form_: dict[str, float] = {}
        self.confusion_diverged_: dict[str, Any] | None = None
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
            try_confusion = self.confusion == "on" or (self.confusion == "auto" and self.keep_forms)
            if self.confusion == "auto" and structure.pairs and not try_confusion:
                self.bias_ = bias_statistic(evidence, structure, document_from_draws(structure, draws))
                try_confusion = self.bias_["z"] > self.bias_z
            if try_confusion and structure.pairs:
                rich = self._make_guide(structure, chains, True, plain)
                try:
                    run_c = self._run(structure, chains, True, rich, "confusion")
                except FitDiverged as err:
                    if self.confusion == "on":
                        raise
                    # under "auto" the matrices are an option: their divergence keeps the one-number form
                    self.confusion_diverged_ = {"step": err.step, "reason": err.reason}
                    run_c = None
            if try_confusion and structure.pairs and run_c is not None:
                losses += run_c.losses
                self.elbo_by_form_["confusion"] = -self._tail_mean(run_c.losses)
                gain = self.elbo_by_form_["confusion"] - self.elbo_by_form_["trust"]
                noise = math.hypot(self._tail_se(run.losses), self._tail_se(run_c.losses))
                self.confusion_gain_ = gain
                self.forms_ = {False: (plain, run.converged), True: (rich, run_c.converged)}
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

    def use_form(self, confusion: bool) -> "BeliefFit":
        """Keep the one-number (``False``) or confusion form of a ``keep_forms`` fit (held-out choice)."""
        forms = getattr(self, "forms_", None)
        if not forms or confusion not in forms:
            raise ValueError("use_form needs a fit with keep_forms=True that fitted both forms")
        if bool(confusion) != bool(self.confusion_):
            self.guide_, self.converged_ = forms[confusion]
            self.confusion_ = bool(confusion)
            self.draws_ = self._draws(self.structure_, self.chains_, self.confusion_, self.guide_)
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
            loss_fn = Trace_ELBO()(model, guide)
            params = list(loss_fn.parameters())
            optim = Adam(params, lr=self.learning_rate)
            losses: list[float] = []
            converged = False
            watch = Plateau(self.window, self.patience, self.rel_tol, self.blowup_factor)
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
                    "base_rate_concentration": latents["base_rate_concentration"].numpy(),
                }
                if derived.new_value_weight is not None:
                    record["new_value_weight"] = derived.new_value_weight.numpy()
                for k, table in derived.prior_table.items():
                    record[f"prior_{k}"] = table[:-1].numpy()
                for k, table in derived.confusion.items():
                    record[f"confusion_{k}"] = table.numpy()
                for name, value in record.items():
                    out.setdefault(name, []).append(np.array(value, dtype=np.float64))
        return {name: np.stack(values) for name, values in out.items()}

    def params_document(self, *, interval: float = 0.9) -> dict[str, Any]:
        """The parameter document of :mod:`doxa.inference.read.params` (no calibration map yet)."""
        doc = document_from_draws(self.structure_, self.draws_, interval)
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
            "confusion_diverged": self.confusion_diverged_,
            "bias_check": self.bias_,
            "guide": self.guide,
            "n_readings": int(self.n_readings_),
            "n_settlements": int(self.n_settlements_),
            "n_questions": int(len(self.structure_.question_k)),
            "n_nodes": int(self.structure_.n_nodes),
            "events_per_step": self.events_per_step,
            "subsampled": any(b.subsample is not None for b in self.chains_),
        }


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
    from tqdm.auto import tqdm  # lazy: only a fit with progress bars needs it

    # disable=None: only on a terminal (a cron log gets no carriage-return spam)
    return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True, mininterval=0.5, disable=None)
