"""The generative story of docs/design.md §2, drawn: true answers over time, what a message
states, what a reader reports.

This is the one generator of the story. Its two users differ only in what the story does
not model, who sends what and when:

- :mod:`.world`, the generated world (people, layers of sources, copies, campaigns; records
  that go through the real ingest path), for the benchmark;
- :mod:`.simulate`, evidence arrays straight into the fit (a plain tree of sources, no
  texts, no DuckDB), for the fit's tests and the fit-scale benchmark.

The story, per question ``q`` of kind ``k`` with options ``0..K-1``:

- **answers**: ``z_q(0) ~ Categorical(π_k)``; change events arrive as a Poisson process of
  rate ``λ_k`` per day, and at each event ``z`` is redrawn from ``π_k`` (possibly the same
  option), so ``P(z_{t+Δ}=j | z_t=i) = ρ[i=j] + (1-ρ)π_k[j]`` with ``ρ = e^{-λ_k Δ}``;
- **statement**: with probability ``u + (1-u)·o`` (unclear or unrelated, or one-off) a
  message states an option uniformly at random, whatever the truth; otherwise it states
  ``z_q(t)`` with probability ``α_s`` and one of the other ``K-1`` uniformly (or its
  source's favourite, for a biased source) otherwise;
- **reading**: given the stated option ``c``, ``r̃ ~ Dirichlet(β·1 + e_c)``, so that
  ``p(r̃ | c) ∝ r̃_c``: a calibrated soft reading, exactly the evidence the model assumes.
  The reader reports ``probs = (1-u)·normalise(r̃^τ)`` (``τ > 1``: overconfident), and
  ``unclear + unrelated = u``.

Times are integer seconds from the start of the horizon. Every function takes the
``numpy`` Generator it draws from, and draws in a fixed order, so a seeded caller gets the
same output byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SECONDS_PER_DAY = 86_400


def categorical(rng: np.random.Generator, probs: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """One draw per entry of ``rows`` from ``probs[rows]`` (rows of a (R, K) matrix, zero-padded)."""
    cum = np.cumsum(probs, axis=1)
    cum = cum / cum[:, -1:]
    draws = rng.random(rows.shape[0])
    return (draws[:, None] >= cum[rows]).sum(axis=1).astype(np.int64)


@dataclass
class AnswerTimelines:
    """Every question's true answer over ``[0, horizon]`` seconds.

    ``initial[q]`` is the answer at time 0; the change events of question ``q`` are rows
    ``start[q] : start[q] + count[q]`` of ``change_t`` / ``change_value`` (sorted by question,
    then time). An event may redraw the option it replaces.
    """

    initial: np.ndarray
    change_q: np.ndarray
    change_t: np.ndarray
    change_value: np.ndarray
    start: np.ndarray
    horizon: int

    @classmethod
    def draw(cls, rng: np.random.Generator, prior: np.ndarray, rate_per_day: np.ndarray,
             question_kind: np.ndarray, days: float, horizon: int) -> "AnswerTimelines":
        """``prior`` (kinds × K_max, zero-padded) is π, ``rate_per_day`` λ, per kind."""
        n_q = question_kind.size
        initial = categorical(rng, prior, question_kind)
        counts = rng.poisson(rate_per_day[question_kind] * days)
        change_q = np.repeat(np.arange(n_q), counts)
        change_t = rng.integers(1, horizon, size=change_q.size)
        order = np.lexsort((change_t, change_q))
        change_q, change_t = change_q[order], change_t[order]
        change_value = categorical(rng, prior, question_kind[change_q])
        start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        return cls(initial, change_q, change_t, change_value, start, horizon)

    def answer(self, q: np.ndarray, t: np.ndarray) -> np.ndarray:
        """True option index of questions ``q`` at seconds ``t`` (vectorised)."""
        key = self.change_q * (self.horizon + 1) + self.change_t
        n_before = np.searchsorted(key, q * (self.horizon + 1) + t, side="right") - self.start[q]
        if not self.change_value.size:
            return self.initial[q]
        last = self.change_value[np.maximum(self.start[q] + n_before - 1, 0)]
        return np.where(n_before > 0, last, self.initial[q])

    def bounds(self) -> np.ndarray:
        """``(Q + 1,)`` offsets: question ``q``'s events are ``bounds[q] : bounds[q + 1]``."""
        return np.concatenate([self.start, [self.change_q.size]])

    def real_changes(self) -> np.ndarray:
        """Per change event: whether it changed the answer (a redraw may keep it)."""
        if not self.change_q.size:
            return np.zeros(0, dtype=bool)
        previous = np.where(np.r_[True, self.change_q[1:] != self.change_q[:-1]],
                            self.initial[self.change_q], np.r_[-1, self.change_value[:-1]])
        return self.change_value != previous


def state(rng: np.random.Generator, truth: np.ndarray, k: np.ndarray, alpha: np.ndarray, u: np.ndarray,
          o: np.ndarray, lean_to: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The option each message states, and whether it says nothing about the truth.

    ``lean_to[i] >= 0`` makes that option, instead of a uniformly drawn one, what message
    ``i`` states when it is wrong (a source's bias).
    """
    n = truth.size
    noise = rng.random(n) < u + (1.0 - u) * o
    correct = rng.random(n) < alpha
    other = (truth + 1 + rng.integers(0, np.maximum(k - 1, 1))) % k
    if lean_to is not None:
        other = np.where(lean_to >= 0, lean_to, other)
    uniform = rng.integers(0, k)
    return np.where(noise, uniform, np.where(correct, truth, other)), noise


def soft_reading(rng: np.random.Generator, stated: np.ndarray, k: np.ndarray, beta: np.ndarray,
                 width: int) -> np.ndarray:
    """Calibrated readings ``r̃ ~ Dirichlet(β·1 + e_c)``, as ``(n, width)`` rows zero past ``k``."""
    n = stated.size
    shape = np.repeat(np.asarray(beta, dtype=np.float64)[:, None], width, axis=1)
    shape[np.arange(n), stated] += 1.0
    draws = rng.gamma(shape)
    draws[np.arange(width)[None, :] >= k[:, None]] = 0.0
    # a row whose gammas all underflowed to 0 cannot happen: the stated entry has shape >= 1
    return draws / draws.sum(axis=1, keepdims=True)


def report(calibrated: np.ndarray, tau: np.ndarray, u: np.ndarray, fraction: np.ndarray,
           k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the reader reports: ``probs = (1-u)·normalise(r̃^τ)``, ``unclear``, ``unrelated``.

    ``fraction`` of ``u`` is unrelated, the rest unclear. Kept at full precision (no
    rounding): the model's inverse map ``r^(1/τ)`` magnifies small probabilities, and the
    masses then sum to 1 within float error.
    """
    with np.errstate(divide="ignore"):
        logs = np.log(calibrated) * tau[:, None]
    logs -= logs.max(axis=1, keepdims=True)
    powered = np.exp(logs)
    powered[np.arange(calibrated.shape[1])[None, :] >= k[:, None]] = 0.0
    r = powered / powered.sum(axis=1, keepdims=True)
    return r * (1.0 - u)[:, None], u * (1.0 - fraction), u * fraction


__all__ = ["AnswerTimelines", "SECONDS_PER_DAY", "categorical", "report", "soft_reading", "state"]
