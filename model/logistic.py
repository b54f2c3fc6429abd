"""The logistic function and its inverse, on floats and numpy arrays alike: the one
definition for the story's priors, the synthetic world, the baselines and the training
report. numpy only (no torch), so the evaluation and the read side can use it freely.

``logit(p)`` is computed as ``log p − log1p(−p)``, which keeps full precision for p near
0 as well as near 1 (``log(p / (1 − p))`` loses digits to the division for small p).
"""

from __future__ import annotations

import numpy as np


def logit(p):
    """``log(p / (1 − p))`` for p in (0, 1); a float for a float, an array for an array."""
    return np.log(p) - np.log1p(-p)


def sigmoid(x):
    """``1 / (1 + e^−x)``, the inverse of :func:`logit`."""
    return 1.0 / (1.0 + np.exp(-x))
