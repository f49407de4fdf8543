"""What the calibration cannot fix: per-knob corrections learned from the trials.

Two global factors (tuner/calibrate.py) scale every prediction alike; they cannot say "ZeRO-3
is slower here than modelled" or "on this machine micro batch 32 is as fast as 256". This
fits log(measured / calibrated prediction) as a sum of one offset per knob value (one-hot
features), by ridge regression that shrinks towards the planner (all offsets 0), and ranks
untried configurations by the corrected prediction plus a small bonus for what is uncertain
(Bayesian linear regression's posterior std, an upper-confidence-bound rule).
"""

from __future__ import annotations

import numpy as np


class ResidualModel:
    def __init__(self, choices: dict[str, tuple], *, ridge: float = 1.0, explore: float = 0.3):
        self.features = [(k, v) for k, vals in choices.items() if len(vals) > 1 for v in vals]
        self.ridge = ridge
        self.explore = explore
        self.w = np.zeros(len(self.features))
        self.cov = np.eye(len(self.features)) / ridge
        self.noise_var = 0.04

    def x(self, knobs: dict) -> np.ndarray:
        return np.array([1.0 if knobs.get(k) == v else 0.0 for k, v in self.features])

    def fit(self, knobs: list[dict], log_ratio: list[float]) -> "ResidualModel":
        """log_ratio[i] = log(measured / calibrated prediction) of completed trial i."""
        if not knobs or not self.features:
            return self
        X = np.stack([self.x(k) for k in knobs])
        y = np.asarray(log_ratio, dtype=float)
        A = X.T @ X + self.ridge * np.eye(X.shape[1])
        self.cov = np.linalg.inv(A)
        self.w = self.cov @ X.T @ y
        resid = y - X @ self.w
        self.noise_var = max(0.01, float(resid @ resid) / max(1, len(y)))
        return self

    def score(self, knobs: dict, log_pred: float) -> float:
        """Corrected log speed plus an exploration bonus."""
        x = self.x(knobs)
        std = float(np.sqrt(max(0.0, self.noise_var * (x @ self.cov @ x))))
        return log_pred + float(x @ self.w) + self.explore * std
