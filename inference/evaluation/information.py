"""What the evidence could say about a parameter, whatever the fit.

Used by the recovery test and ``bench/rate_recovery.py`` to tell a fit that misses a
parameter from evidence that does not determine it.
"""

from __future__ import annotations

import numpy as np

from doxa.data.evidence import Evidence

#: A factor ``f`` on a rate is pinned by the data when ``log f`` is at least this many
#: ideal standard deviations (``1 / sqrt(rate_information)``) away.
PINNED_SDS = 2.5


def rate_information(evidence: Evidence, questions: np.ndarray, lam: float, prior: np.ndarray,
                     min_weight: float = 0.5) -> float:
    """Fisher information about ``log λ`` if every informative observation were exact.

    Observations: the settlements and the readings whose lasting part ``(1-u)(1-o)`` is at
    least ``min_weight``. Consecutive observations of a question ``Δ`` apart differ with
    ``p = (1-ρ)(1-Σπ²)``, ``ρ = exp(-λΔ)``; each pair adds ``(∂p/∂log λ)² / (p(1-p))``. Real
    readings are noisy, so this is an upper bound on what the evidence can say about the rate.
    """
    lasting = (1 - np.clip(evidence.unclear + evidence.unrelated, 0, 1)) * (1 - np.clip(evidence.one_off, 0, 1))
    keep = np.isin(evidence.q, questions) & (lasting >= min_weight)
    settled = np.isin(evidence.settle_q, questions)
    q = np.r_[evidence.q[keep], evidence.settle_q[settled]]
    t = np.r_[evidence.t[keep], evidence.settle_t[settled]]
    order = np.lexsort((t, q))
    q, t = q[order], t[order]
    gap = np.diff(t)[np.diff(q) == 0]
    same = float(np.sum(np.square(prior)))
    rho = np.exp(-lam * gap)
    p = (1 - rho) * (1 - same)
    slope = lam * gap * rho * (1 - same)
    return float(np.sum(slope ** 2 / np.clip(p * (1 - p), 1e-12, None)))
