"""Model choice by held-out settled facts: one number of trust, or confusion matrices.

The nightly job (:mod:`doxa.inference.learn.train`, ``confusion="auto"``) fits both forms
of the model and keeps the one that predicts settlements it did not see better. The
settlements are cut into ``folds`` blocks in time order (ties, e.g. crowd labels all
at one instant, in question order); for each block, each form is refitted without the
block's settlements (warm-started from its full fit) and the filter gives the belief it
would have shown just before each of them. The score is the log-loss of those
predictions, ``-log p(answer)``; ``delta`` is the confusion form's minus the one-number
form's, per settlement, with the standard error of the paired differences.

The form with the lower held-out log-loss is kept when the difference is larger than its
standard error. When it is not (a few dozen settlements rarely settle it: on a store
where half the workers answer "yes" whatever the truth, 0.103 for the matrices against
0.098 with a standard error of 0.031 over 60 settlements), the held-out data cannot tell the forms
apart and the fit's own preference decides: the confusion form when its ELBO is higher
by more than the fit's margin (:class:`~doxa.inference.learn.fit.BeliefFit`). On TEMP
(crowd, 92 settlements) the held-out sign alone kept one number on one seed of five and
lost 1.9 points of accuracy there. A store with too few settled questions for the folds
keeps the fit's preference too; ``reason`` says which rule decided.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from doxa.data.evidence import Evidence

from .fit import BeliefFit, FitDiverged
from .predictions import predict_settlements

#: Blocks of settlements in time order; each is held out once.
FOLDS = 3
#: Fewer settled questions than this per block: too few to choose by.
MIN_PER_FOLD = 5


def choose_form(fit: BeliefFit, evidence: Evidence, *, folds: int = FOLDS, seed: int = 0,
                progress: bool = False) -> dict[str, Any]:
    """Held-out log-loss of both forms of a ``keep_forms`` fit; switches ``fit`` to the better one.

    Returns the choice for the train summary: ``chosen`` (``"confusion"`` or ``"trust"``),
    ``log_loss`` per form, ``delta`` (confusion − trust, nats per settlement), ``se``,
    ``settlements`` scored, ``folds``, ``reason``.
    """
    forms = getattr(fit, "forms_", None)
    if not forms:
        diverged = getattr(fit, "confusion_diverged_", None)
        if diverged:
            return {"chosen": "trust", "reason": f"the confusion form diverged at step {diverged['step']} "
                    f"({diverged['reason']}): kept the one-number form"}
        return {"chosen": "confusion" if fit.confusion_ else "trust", "reason": "only one form was fitted "
                "(no source has readings on a kind's own options)"}
    fitted_choice = "confusion" if fit.confusion_ else "trust"
    n = len(evidence.settle_q)
    if len(np.unique(evidence.settle_q)) < folds * MIN_PER_FOLD:
        return {"chosen": fitted_choice, "reason": f"fewer than {folds * MIN_PER_FOLD} settled questions: "
                "kept the form the fit preferred", "settlements": int(n)}
    order = np.lexsort((evidence.settle_q, evidence.settle_t))
    block = np.empty(n, dtype=np.int64)
    block[order] = np.arange(n) * folds // n
    losses: dict[str, list[np.ndarray]] = {"trust": [], "confusion": []}
    for f in range(folds):
        held_out = block == f
        rows = np.flatnonzero(held_out)
        for name, confusion in (("trust", False), ("confusion", True)):
            guide, _ = forms[confusion]
            start = _as_form(fit, confusion, guide)
            refit = BeliefFit(**{**fit.get_params(), "progress": progress, "keep_forms": False,
                                 "min_steps": 2 * fit.window, "max_steps": max(4 * fit.window, fit.steps_ // 4),
                                 "seed": seed + 101 + f, "learning_rate": fit.learning_rate * fit.lr_drop})
            try:
                refit.fit(evidence, settlement_mask=~held_out, init_from=start)
            except FitDiverged as err:
                return {"chosen": fitted_choice, "settlements": int(n), "reason": f"a held-out refit of the "
                        f"{name} form diverged ({err.reason}): kept the form the fit preferred"}
            pred = predict_settlements(evidence, fit.structure_, refit.params_document(), rows=rows)
            p = pred.probs[np.arange(len(pred.answer)), pred.answer]
            losses[name].append(-np.log(np.clip(p, 1e-12, 1.0)))
    trust, conf = np.concatenate(losses["trust"]), np.concatenate(losses["confusion"])
    diff = conf - trust
    delta = float(diff.mean())
    se = float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else float("inf")
    decisive = abs(delta) > se
    chosen = ("confusion" if delta < 0 else "trust") if decisive else fitted_choice
    fit.use_form(chosen == "confusion")
    return {"chosen": chosen, "log_loss": {"trust": float(trust.mean()), "confusion": float(conf.mean())},
            "delta": delta, "se": se, "settlements": int(len(diff)), "folds": folds,
            "fit_preferred": fitted_choice,
            "decisive": decisive,
            "reason": (("confusion matrices predict held-out settlements better" if chosen == "confusion" else
                        "one number of trust predicts held-out settlements better") if decisive else
                       "held-out log-loss within one standard error: kept the form the fit preferred "
                       "(the ELBO with its margin)")}


def _as_form(fit: BeliefFit, confusion: bool, guide) -> BeliefFit:
    """A view of ``fit`` holding one of its forms, to warm-start a refit from."""
    view = object.__new__(BeliefFit)
    view.__dict__.update(fit.__dict__)
    view.confusion_, view.guide_ = bool(confusion), guide
    return view


def summary_line(choice: dict[str, Any] | None) -> str | None:
    """How the train summary states the choice."""
    if not choice:
        return None
    if "delta" not in choice:
        return f"model: {'confusion matrices' if choice['chosen'] == 'confusion' else 'one number of trust'} " \
               f"({choice['reason']})"
    ll = choice["log_loss"]
    how = "chosen by held-out log-loss" if choice.get("decisive", True) else "held-out log-loss too close to tell"
    tail = "" if choice.get("decisive", True) else "; the fit's ELBO decided"
    return (f"model: {'confusion matrices' if choice['chosen'] == 'confusion' else 'one number of trust'}, {how} "
            f"on {choice['settlements']} settlements in {choice['folds']} time-ordered folds: "
            f"confusion {ll['confusion']:.4f} vs one number {ll['trust']:.4f} nats "
            f"(difference {choice['delta']:+.4f} ± {choice['se']:.4f}){tail}")
