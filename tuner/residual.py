"""What the calibration cannot fix: per-backend and per-knob corrections learned from the trials.

Two global factors (tuner/calibrate.py) scale every prediction alike; they cannot say "FSDP
runs 2x faster here than modelled" or "on this machine micro batch 32 is as fast as 256".
This fits log(measured / calibrated prediction) as a sum of offsets, one per backend
(ddp / deepspeed / fsdp: a framework's efficiency is what the planner's model knows least, so
one measured FSDP plan corrects every FSDP plan) and one per knob value, by Bayesian linear
regression whose prior is the planner (all offsets 0, a backend's within ~2x, a knob value's
within ~1.4x). Untried configurations are ranked by the corrected prediction plus a small
bonus for what is uncertain (the posterior std, an upper-confidence-bound rule), and a
backend of the space with no measurement yet has its best plan tried first: until then the
planner's prior on it cannot be checked, and every other ranking depends on it.
"""

from __future__ import annotations

import math

import numpy as np

from tuner.trial import run_backend

BACKEND_PRIOR_STD = math.log(2.0)  # the planner's prior on a backend may be 2x off
VALUE_PRIOR_STD = 0.35  # ... on one knob value, ~1.4x
NOISE_VAR = 0.1  # log-variance of one trial on a shared machine (repeats differ 2.5x max/min)
NOISE_PRIOR_RUNS = 4  # weight of NOISE_VAR against the residuals when the noise is re-estimated


class ResidualModel:
    def __init__(self, choices: dict[str, tuple], *, explore: float = 0.3,
                 backend_std: float = BACKEND_PRIOR_STD, value_std: float = VALUE_PRIOR_STD,
                 noise_var: float = NOISE_VAR, study_backend: str = "any"):
        self.study_backend = study_backend
        backends = sorted({self.backend({"sharding": s}) for s in choices.get("sharding", ())})
        self.backends = backends
        self.features = ([("backend", b) for b in backends] if len(backends) > 1 else []) + \
            [(k, v) for k, vals in choices.items() if len(vals) > 1 for v in vals]
        self.prior_var = np.array([(backend_std if k == "backend" else value_std) ** 2 for k, _ in self.features])
        self.explore = explore
        self.noise_var = noise_var
        self.w = np.zeros(len(self.features))
        self.cov = np.diag(self.prior_var)
        self.measured_backends: set[str] = set()

    def backend(self, knobs: dict) -> str:
        """The framework a trial of `knobs` runs under (`--backend deepspeed`: all DeepSpeed)."""
        return run_backend(knobs, self.study_backend)

    def x(self, knobs: dict) -> np.ndarray:
        return np.array([1.0 if (self.backend(knobs) == v if k == "backend" else knobs.get(k) == v) else 0.0
                         for k, v in self.features])

    def fit(self, knobs: list[dict], log_ratio: list[float], tried: list[dict] = ()) -> "ResidualModel":
        """log_ratio[i] = log(measured / calibrated prediction) of completed trial i; `tried`:
        the knobs of launched trials without a speed (OOM, crash): their backend was tried."""
        self.measured_backends = {self.backend(k) for k in [*knobs, *tried]}
        if not knobs or not self.features:
            return self
        X = np.stack([self.x(k) for k in knobs])
        y = np.asarray(log_ratio, dtype=float)
        for _ in range(2):  # the noise from the residuals, shrunk towards NOISE_VAR
            precision = X.T @ X / self.noise_var + np.diag(1.0 / self.prior_var)
            self.cov = np.linalg.inv(precision)
            self.w = self.cov @ X.T @ y / self.noise_var
            resid = y - X @ self.w
            self.noise_var = (NOISE_PRIOR_RUNS * NOISE_VAR + float(resid @ resid)) / (NOISE_PRIOR_RUNS + len(y))
        return self

    def correction(self, knobs: dict) -> float:
        """The learned log offset of this configuration (0: the planner as calibrated)."""
        return float(self.x(knobs) @ self.w)

    def std(self, knobs: dict) -> float:
        x = self.x(knobs)
        return float(np.sqrt(max(0.0, x @ self.cov @ x)))

    def score(self, knobs: dict, log_pred: float) -> float:
        """Corrected log speed plus an exploration bonus."""
        return log_pred + self.correction(knobs) + self.explore * self.std(knobs)

    def backends_first(self, ranked: list[dict], space: list[dict]) -> list[dict]:
        """`ranked` after the best plan (in `space`, ranked) of each backend not measured yet."""
        if not self.measured_backends or len(self.backends) < 2:
            return ranked  # nothing measured: the planner's own order
        first, seen = [], set(self.measured_backends)
        for k in space:
            b = self.backend(k)
            if b not in seen:
                seen.add(b)
                first.append(k)
        return first + [k for k in ranked if k not in first]
