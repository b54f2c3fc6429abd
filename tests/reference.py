"""The likelihood of docs/design.md §2 and the trust lookup of inference/read/params.py, written again for tests.

Independent of the scorer's code on purpose: plain Python over one reading at a time.
"""

from __future__ import annotations

import math


def hand_trust(path: str, stated: float | None, fitted: dict[str, float], by_top: dict[str, float],
               fallback: float) -> float:
    """Deepest fitted node of the path, else the user's stated trust, else the default of the top layer."""
    parts = path.split("/")
    for depth in range(len(parts), 0, -1):
        node = "/".join(parts[:depth])
        if node in fitted:
            return fitted[node]
    if stated is not None:
        return stated
    return by_top.get(parts[0], fallback)


def tempered(probs: list[float], temperature: float = 1.0) -> list[float]:
    """r̃ ∝ r^(1/τ) over the options, uniform when the reader put no mass on any option."""
    k = len(probs)
    total = sum(probs)
    r = [p / total for p in probs] if total > 0 else [1.0 / k] * k
    powered = [x ** (1.0 / temperature) if x > 0 else 0.0 for x in r]
    return [x / sum(powered) for x in powered]


def hand_likelihood(probs: list[float], unclear: float, unrelated: float, one_off: float,
                    alpha: float, temperature: float = 1.0) -> list[float]:
    """L(j) = (u + (1-u) o)/K + (1-u)(1-o)(α r̃_j + (1-α)(1-r̃_j)/(K-1))."""
    k = len(probs)
    u = unclear + unrelated
    o = one_off
    return [(u + (1 - u) * o) / k + (1 - u) * (1 - o) * (alpha * x + (1 - alpha) * (1 - x) / (k - 1))
            for x in tempered(probs, temperature)]


def bayes(belief: list[float], likelihood: list[float]) -> list[float]:
    joint = [b * l for b, l in zip(belief, likelihood)]
    return [x / sum(joint) for x in joint]


def decay(belief: list[float], prior: list[float], rate: float, days: float) -> list[float]:
    """P(z_{t+Δ}) = ρ b + (1-ρ) π with ρ = exp(-λΔ)."""
    rho = math.exp(-rate * days)
    return [rho * b + (1 - rho) * p for b, p in zip(belief, prior)]
