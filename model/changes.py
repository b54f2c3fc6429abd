"""Reported changes: a message that says the answer changed is evidence on the step, not on the state (numpy only).

"I now have 25 postcards", "we moved to Leeds in May", "she no longer works there": besides
the answer it states, such a message says the answer is *not what it was*. Under a constant
change rate nothing else can say so: a statement that contradicts an earlier one is either a
change (rate ``λ``) or a wrong statement (trust ``α``), and where changes are rare — a
half-life of two years, statements a few weeks apart — the model reads the news as a mistake
and hovers at a coin flip between the old answer and the new one. Fitting the rate to such
data does not help: LongMemEval's knowledge-update questions change value in *every* gap
between sessions, some on the same day, so the fitted rate is fast, and then the newest
value is forgotten days later (docs/measurements/2026-12-conversations.md). The timing of a
change is not in the rate; it is in the message.

A reading therefore carries ``κ_i`` (``changed``), the reader's probability that the message
reports that the answer changed. Silence is not a report that nothing changed: most messages
say nothing either way, and ``κ = 0`` leaves the step as it was. What the report is about is
``d_i = [z_i ≠ z_{i-1}]``, whether the answer at the reading's time differs from the answer at
the question's previous event. A source states it truthfully with its trust, as it states the
answer (floored at chance for a yes/no fact, ``ᾱ = max(α_s, 1/2)``), and the part of the report
that is no report — ``1 - κ``, the reading's campaign discount ``c_i``
(:mod:`doxa.model.independence`), its ``unrelated`` and ``one_off`` mass — is uninformative,
exactly as for the answer it states. With ``k_i = κ_i c_i (1 - unrelated_i)(1 - one_off_i)``:

    g_i(differ) = 1 - k_i + 2 k_i ᾱ,        g_i(same) = 1 - k_i + 2 k_i (1 - ᾱ)

(the likelihood of the report, scaled so that ``k = 0`` gives 1 and 1: their mean is 1 for
every ``k``). ``unclear`` does not lessen it: "she moved, I don't know where" is unclear about
the answer and clear about the change. The step into the reading's time then reads, with
``ρ = exp(-λ Δ)`` and ``π`` the base rates,

    P(z_i = j, report | z_{i-1} = m) = [ρ [j = m] + (1 - ρ) π_j] · g_i([j ≠ m])

so the filter's prediction before the reading is

    b⁻_j = g_i(same) · b_j (ρ + (1 - ρ) π_j)  +  g_i(differ) · (1 - ρ) π_j (1 - b_j)

(``b`` the belief after the previous event; ``g = 1`` gives ``ρ b + (1 - ρ) π``). A question's
first event has no previous one to differ from: its report is not counted. Settlements report
nothing. Both the scorer and the fit take ``k`` from :func:`change_weight` of the same evidence
and ``g`` from :func:`step_factors`, so the scorer stays the exact filter of the fitted model.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

T = TypeVar("T")


def change_weight(changed: np.ndarray | None, share: np.ndarray, unrelated: np.ndarray,
                  one_off: np.ndarray) -> np.ndarray | None:
    """(N,) ``k_i = κ_i c_i (1 - unrelated_i)(1 - one_off_i)`` of each reading; None where no
    reading reports a change (``changed`` None)."""
    if changed is None:
        return None
    return (np.clip(np.nan_to_num(np.asarray(changed, dtype=np.float64)), 0.0, 1.0) * share
            * (1.0 - np.clip(unrelated, 0.0, 1.0)) * (1.0 - np.clip(one_off, 0.0, 1.0)))


def step_factors(weight: T, trust: T) -> tuple[T, T]:
    """``(g(same), g(differ))`` of the module docstring for reports of weight ``k`` by sources of
    trust ``α`` (numpy arrays or torch tensors alike)."""
    sure = trust.clip(min=0.5)
    return 1.0 - weight + 2.0 * weight * (1.0 - sure), 1.0 - weight + 2.0 * weight * sure
