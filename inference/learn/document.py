"""The fitted model as the params document the scorer reads (:mod:`doxa.inference.read.params`), and back.

:func:`document_from_draws` summarises posterior draws, :func:`document_from_values` writes
one value per parameter, and :func:`derived_from_document` reads a document back into the
model's parameters with the scorer's lookup rules (for the torch filter and the tests).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from doxa.inference.read.params import (DEFAULT_NEW_VALUE_WEIGHT, confusion_for_source, default_params,
                                        kind_change_rate, kind_prior, new_value_weight, reader_temperature,
                                        trust_for_source, with_defaults)
from doxa.model.likelihood import Derived
from doxa.model.logistic import logit, sigmoid
from doxa.model.structure import ModelStructure


def document_from_draws(structure: ModelStructure, draws: dict[str, np.ndarray],
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
        new_value_weight=np.exp(np.log(d["new_value_weight"]).mean(0)) if "new_value_weight" in d else None,
    )
    t_lo, t_hi = np.quantile(trust, [lo_q, hi_q], axis=0)
    for i, path in enumerate(s.tree.paths.tolist()):
        doc["trust"][path].update(lo=float(t_lo[i]), hi=float(t_hi[i]))
    r_lo, r_hi = np.quantile(d["rate"], [lo_q, hi_q], axis=0)
    for i, kind in enumerate(s.kinds.tolist()):
        doc["kinds"][kind]["change_rate_interval"] = [float(r_lo[i]), float(r_hi[i])]
    if "new_value_weight" in d:  # θ of the kinds with open questions: geometric mean, like λ
        th_lo, th_hi = np.quantile(d["new_value_weight"], [lo_q, hi_q], axis=0)
        for i in np.flatnonzero(s.open_kinds).tolist():
            doc["kinds"][str(s.kinds[i])]["new_value_weight_interval"] = [float(th_lo[i]), float(th_hi[i])]
    tau_lo, tau_hi = np.quantile(d["temperature"], [lo_q, hi_q], axis=0)
    for i, reader in enumerate(s.readers.tolist()):
        doc["readers"][reader].update(lo=float(tau_lo[i]), hi=float(tau_hi[i]))
    doc["defaults"] = {
        "trust": float(d["trust_root"].mean()),
        "change_rate": float(np.exp(d["rate_loc"]).mean()),
    }
    return doc


def document_from_values(structure: ModelStructure, *, trust: np.ndarray, confusion: dict[int, np.ndarray],
                         priors: dict[int, np.ndarray], rate: np.ndarray, temperature: np.ndarray,
                         new_value_weight: np.ndarray | None = None) -> dict[str, Any]:
    """A parameter document from one value per parameter (posterior means, or a test's point)."""
    s = structure
    doc = default_params()
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
    closed_kinds = np.zeros(s.n_kinds, dtype=bool)
    closed_kinds[s.question_kind[~s.question_open]] = True
    for i, kind in enumerate(s.kinds.tolist()):
        k = int(s.kind_k[i])
        lam = float(rate[i])
        closed = bool(closed_kinds[i])  # a kind of open questions only has no option list of its own
        doc["kinds"][kind] = {
            "options": list(s.kind_options[i]) if closed else [],
            "prior": np.asarray(priors[k][s.kind_slot[i]], dtype=np.float64).tolist() if closed else [],
            "change_rate": lam,
            "half_life_days": math.log(2.0) / lam if lam > 0 else float("inf"),
        }
    for i in np.flatnonzero(s.open_kinds).tolist():
        doc["kinds"][str(s.kinds[i])]["new_value_weight"] = float(
            DEFAULT_NEW_VALUE_WEIGHT if new_value_weight is None else new_value_weight[i])
    doc["readers"] = {reader: {"temperature": float(temperature[i])} for i, reader in enumerate(s.readers.tolist())}
    return doc


def derived_from_document(structure: ModelStructure, doc: dict[str, Any], dtype=torch.float64) -> Derived:
    """The model's parameters as the scorer would read them from ``doc`` (for the torch filter).

    Trust and confusion are looked up per node of *this* structure with the scorer's
    rules (deepest fitted node; confusion only where the document has one).
    """
    doc = with_defaults(doc)
    s = structure
    alpha = np.empty(s.n_nodes)
    for i, path in enumerate(s.tree.paths.tolist()):
        stated = s.stated_logit[i]
        stated_p = None if np.isnan(stated) else float(sigmoid(stated))
        alpha[i], _ = trust_for_source(doc, path, stated_p)
    alpha = np.clip(alpha, 1e-12, 1 - 1e-12)
    confusion = {}
    for k, table in s.pairs.items():
        matrices = []
        for node, kind in zip(table.node.tolist(), table.kind.tolist()):
            matrix, _ = confusion_for_source(doc, str(s.tree.paths[node]), str(s.kinds[kind]), k)
            if matrix is None:
                a = max(alpha[node], 1.0 / k)
                matrix = np.where(np.eye(k, dtype=bool), a, (1 - a) / max(k - 1, 1))
            matrices.append(np.asarray(matrix, dtype=np.float64))
        if doc.get("confusion"):
            confusion[k] = torch.as_tensor(np.stack(matrices), dtype=dtype)
    prior_table = {}
    for k in s.group_ks:
        rows = [kind_prior(doc, str(s.kinds[i]), s.kind_options[i]) for i in s.kinds_with_k(k)]
        prior_table[k] = torch.as_tensor(np.vstack(rows + [np.full(k, 1.0 / k)]), dtype=dtype)
    rate = torch.as_tensor([kind_change_rate(doc, str(kind)) for kind in s.kinds.tolist()], dtype=dtype)
    tau = torch.as_tensor([reader_temperature(doc, str(r)) for r in s.readers.tolist()] or [1.0], dtype=dtype)
    theta = (torch.as_tensor([new_value_weight(doc, str(kind)) for kind in s.kinds.tolist()], dtype=dtype)
             if s.question_open.any() else None)
    return Derived(trust_logit=torch.as_tensor(logit(alpha), dtype=dtype),
                   confusion=confusion, prior_table=prior_table, rate=rate, inv_temperature=1.0 / tau,
                   new_value_weight=theta)
