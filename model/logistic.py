"""The logistic function and its inverse, on floats and numpy arrays alike: the one
definition for the story's priors, the synthetic world, the baselines and the training
report. numpy only (no torch), so the evaluation and the read side can use it freely.

``logit(p) = log(p / (1 − p))``: for ``p > 1/2`` the ``1 − p`` is exact, so this is as
accurate as ``log p − log1p(−p)`` there, and it is the form the synthetic world was
drawn with (its figures stay bit for bit the same). The fit's own two conversions of trust
to log-odds (model/structure.py, inference/learn/document.py) keep ``log p − log1p(−p)``:
moved onto this form they shift the bench's doxa-learned log-loss in the 11th digit.
"""

from __future__ import annotations

import numpy as np


def logit(p):
    """``log(p / (1 − p))`` for p in (0, 1); a float for a float, an array for an array."""
    return np.log(p / (1.0 - p))


def sigmoid(x):
    """``1 / (1 + e^−x)``, the inverse of :func:`logit`."""
    return 1.0 / (1.0 + np.exp(-x))
