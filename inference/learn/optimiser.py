"""The optimiser of the fit and its stopping rule: Adam written out, and a plateau test on the smoothed ELBO."""

from __future__ import annotations

import math

import numpy as np
import torch


class Adam:
    """Adam (Kingma & Ba 2015, "Adam: a method for stochastic optimization") over a list of tensors.

    ``m ← β₁m + (1-β₁)g``, ``v ← β₂v + (1-β₂)g²``, ``θ ← θ - lr·(m/(1-β₁ᵗ)) / (√(v/(1-β₂ᵗ)) + ε)``:
    the same update as ``torch.optim.Adam`` with its defaults. Written out because the
    first ``torch.optim`` step imports ``torch._dynamo``, seconds of every ``doxa train``
    process, for features (compilation, fused kernels) a few small tensors do not need.
    """

    def __init__(self, params: list[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        self.params = list(params)
        self.lr = lr
        self.betas = betas
        self.eps = eps
        self.steps = 0
        self._m = [torch.zeros_like(p) for p in self.params]
        self._v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        beta1, beta2 = self.betas
        step_size = self.lr / (1 - beta1 ** self.steps)
        root_correction = math.sqrt(1 - beta2 ** self.steps)
        for p, m, v in zip(self.params, self._m, self._v):
            if p.grad is None:
                continue
            m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            p.addcdiv_(m, (v.sqrt() / root_correction).add_(self.eps), value=-step_size)


class Plateau:
    """Convergence on a smoothed ELBO: the mean loss over the last ``window`` steps.

    The smoothed loss has reached a plateau when it has not improved on its best by
    more than ``rel_tol`` (relative) or two standard errors of the window mean, whichever
    is larger, for ``patience`` steps. A blow-up is a smoothed loss that has climbed back
    above where it started and above its best by ``blowup_factor`` times the larger of
    the descent so far, twenty step-to-step deviations and 5% of the loss.
    """

    def __init__(self, window: int, patience: int, rel_tol: float, blowup_factor: float):
        self.window, self.patience, self.rel_tol, self.blowup_factor = window, patience, rel_tol, blowup_factor
        self.best = math.inf
        self.best_step = 0
        self.start = None
        self.plateaus = 0
        self.since = 0
        self.reason = ""

    def restart(self, step: int) -> None:
        self.best, self.best_step, self.since = math.inf, step, step

    def update(self, losses: list[float]) -> str:
        w, n = self.window, len(losses)
        if n - self.since < w or n % max(w // 5, 1):
            return "running"
        tail = np.asarray(losses[-w:])
        cur = float(tail.mean())
        if self.start is None:
            self.start = cur
        noise = 2.0 * float(tail.std()) / math.sqrt(w)
        if cur < self.best - max(self.rel_tol * abs(cur), noise):
            self.best, self.best_step = cur, n
        elif self.best < math.inf and cur > self.start and cur - self.best > self.blowup_factor * max(
                self.start - self.best, 20.0 * float(tail.std()), 0.05 * abs(self.best), 1.0):
            self.reason = f"the ELBO fell from {-self.best:.5g} to {-cur:.5g} (blow-up)"
            return "blow-up"
        if n - self.best_step >= self.patience:
            self.plateaus += 1
            return "plateau"
        return "running"
