"""Fit the planner's efficiency factors (Calibration.compute, .network) to measured runs.

Each completed trial gives the planner's step-time breakdown at the default calibration
(compute, exposed communication, the rest) and the measured step time. The planner divides
achievable matmul throughput by `compute` and bus bandwidth by `network`, so with x = 1/compute
and y = 1/network the prediction is t = compute_s*x + comm_s*y + rest_s. We fit (log x, log y)
by least squares on log(predicted / measured), with a weak pull towards 1 so that a factor the
data cannot see (no communication on one rank) stays at 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.settings import Calibration

_LOG_RANGE = math.log(20.0)  # factors searched in [1/20, 20]: beyond that it is not calibration


@dataclass(frozen=True)
class Observation:
    """One completed trial: the default-calibration breakdown and what was measured."""

    compute_s: float
    comm_s: float
    rest_s: float
    measured_step_s: float


def predicted_step_s(obs: list[Observation], compute: float, network: float) -> np.ndarray:
    a = np.array([o.compute_s for o in obs])
    b = np.array([o.comm_s for o in obs])
    r = np.array([o.rest_s for o in obs])
    return a / compute + b / network + r


def _loss(obs: list[Observation], u: np.ndarray, v: np.ndarray, ridge: float) -> np.ndarray:
    """Sum of squared log errors for every (u, v) = (log 1/compute, log 1/network) pair."""
    a = np.array([o.compute_s for o in obs])[:, None]
    b = np.array([o.comm_s for o in obs])[:, None]
    r = np.array([o.rest_s for o in obs])[:, None]
    m = np.array([o.measured_step_s for o in obs])[:, None]
    pred = a * np.exp(u)[None, :] + b * np.exp(v)[None, :] + r
    err = np.log(np.maximum(pred, 1e-30) / m)
    return (err**2).sum(axis=0) + ridge * (u**2 + v**2)


def fit_calibration(obs: list[Observation], *, ridge: float = 1e-4, source: str = "plan tune") -> Calibration:
    """Coarse-to-fine grid search in log space (two parameters: exact enough, no local minima)."""
    usable = [o for o in obs if o.measured_step_s > 0 and (o.compute_s + o.comm_s) > 0]
    if not usable:
        return Calibration(source=f"{source} (no completed trials)")
    cu, cv, half = 0.0, 0.0, _LOG_RANGE
    for _ in range(8):
        g = np.linspace(-half, half, 41)
        uu, vv = np.meshgrid(cu + g, cv + g, indexing="ij")
        loss = _loss(usable, uu.ravel(), vv.ravel(), ridge)
        k = int(np.argmin(loss))
        cu, cv = float(uu.ravel()[k]), float(vv.ravel()[k])
        half /= 8.0
    return Calibration(compute=math.exp(-cu), network=math.exp(-cv),
                       source=f"{source} ({len(usable)} trials)")


def relative_errors(predicted: list[float], measured: list[float]) -> list[float]:
    """|predicted - measured| / measured for each pair."""
    return [abs(p - m) / m for p, m in zip(predicted, measured) if m > 0 and p is not None]


def summarize_errors(errors: list[float]) -> dict:
    if not errors:
        return {"n": 0, "mean_abs_pct": None, "median_abs_pct": None, "max_abs_pct": None}
    e = np.array(errors) * 100.0
    return {"n": int(e.size), "mean_abs_pct": float(e.mean()), "median_abs_pct": float(np.median(e)),
            "max_abs_pct": float(e.max())}
