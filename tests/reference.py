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
                    alpha: float, temperature: float = 1.0, share: float = 1.0) -> list[float]:
    """L(j) = (1 - c w)/K + c w (ᾱ r̃_j + (1-ᾱ)(1-r̃_j)/(K-1)), w = (1-u)(1-o), ᾱ = max(α, 1/K)."""
    k = len(probs)
    u = unclear + unrelated
    o = one_off
    a = max(alpha, 1.0 / k)
    w = share * (1 - u) * (1 - o)
    return [(1 - w) / k + w * (a * x + (1 - a) * (1 - x) / (k - 1)) for x in tempered(probs, temperature)]


def hand_shares(readings: list[dict], burst_days: float = 2.0, fresh_messages: int = 3) -> list[float]:
    """Independent share c of each reading (model/independence.py), one reading at a time.

    ``readings``: dicts with ``question``, ``source``, ``day``, ``probs``, ``history`` (the
    source's messages in the store), ``layer`` (the source's layer path; missing: one layer
    for all) and optionally ``unclear``, ``unrelated``, ``one_off`` (missing: 0). A reading
    states its single top option, if any. With same-answer readings of its question within
    ``burst_days`` (chained) from its own source it shares with those at least half as
    strong as it (strength: how far its renormalised top probability stands above an even
    reading, times its clarity); if it is fresh, it also groups with fresh sources of its
    own layer, sharing with all; the smaller share wins.
    """
    def stated(r):
        ranked = sorted(range(len(r["probs"])), key=lambda j: -r["probs"][j])
        if len(ranked) > 1 and r["probs"][ranked[0]] <= r["probs"][ranked[1]] + 1e-9:
            return None
        return ranked[0]

    def strength(r):
        k, total = len(r["probs"]), sum(r["probs"])
        top = max(r["probs"]) / total if total > 0 else 1.0 / k
        clarity = min(max(1.0 - r.get("unclear", 0.0) - r.get("unrelated", 0.0), 0.0), 1.0) \
            * min(max(1.0 - r.get("one_off", 0.0), 0.0), 1.0)
        return min(max(clarity * (k * top - 1.0) / max(k - 1.0, 1.0), 0.0), 1.0)

    def group_of(i, same):
        members = sorted((r["day"], j) for j, r in enumerate(readings) if same(j))
        groups, last = [], None
        for day, j in members:
            if last is None or day - last > burst_days:
                groups.append([])
            groups[-1].append(j)
            last = day
        return next(g for g in groups if i in g)

    out = []
    for i, r in enumerate(readings):
        s = stated(r)
        if s is None:
            out.append(1.0)
            continue
        own = group_of(i, lambda j: readings[j]["question"] == r["question"] and stated(readings[j]) == s
                       and readings[j]["source"] == r["source"])
        share = 1.0 / sum(strength(readings[j]) >= strength(r) / 2 for j in own)
        if r["history"] <= fresh_messages:
            campaign = group_of(i, lambda j: readings[j]["question"] == r["question"]
                                and stated(readings[j]) == s and readings[j]["history"] <= fresh_messages
                                and readings[j].get("layer") == r.get("layer"))
            share = min(share, 1.0 / len(campaign))
        out.append(share)
    return out


def bayes(belief: list[float], likelihood: list[float]) -> list[float]:
    joint = [b * l for b, l in zip(belief, likelihood)]
    return [x / sum(joint) for x in joint]


def decay(belief: list[float], prior: list[float], rate: float, days: float) -> list[float]:
    """P(z_{t+Δ}) = ρ b + (1-ρ) π with ρ = exp(-λΔ)."""
    rho = math.exp(-rate * days)
    return [rho * b + (1 - rho) * p for b, p in zip(belief, prior)]
