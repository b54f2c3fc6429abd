"""The bias test: do sources state some answers more often than one number of trust explains?"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from doxa.data.evidence import Evidence
from doxa.model.filter import filter_evidence, tempered_readings
from doxa.model.structure import ModelStructure

from .document import derived_from_document


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
    tempered = tempered_readings(stream, structure, derived)[reading]
    b = result.predictive[reading]
    k = structure.question_k[stream.q[reading]].astype(np.float64)[:, None]
    valid = np.arange(b.shape[1])[None, :] < k
    alpha = np.maximum(derived.trust.numpy()[stream.leaf[reading]][:, None], 1.0 / k)
    m = stream.mix[reading][:, None]
    expected = m / k + (1 - m) * (alpha * b + (1 - alpha) * (1 - b) / np.maximum(k - 1, 1))
    expected = np.where(valid, expected, 0.0)
    kind = structure.question_kind[stream.q[reading]]
    key = stream.leaf[reading] * max(structure.n_kinds, 1) + kind
    keys, group, counts = np.unique(key, return_inverse=True, return_counts=True)
    observed_sum = np.zeros((len(keys), b.shape[1]))
    expected_sum = np.zeros_like(observed_sum)
    joint = np.where(valid, tempered * expected, 0.0)
    total = joint.sum(axis=1, keepdims=True)
    stated = np.where(total > 0, joint / np.where(total > 0, total, 1.0), tempered)
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
