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
_LEVELS, _POINTS = 8, 41  # grid levels (each 1/8 the span of the last), points per axis
# bound on the rounding gap between a sum of n squared errors less one of them and the sum without it, as a
# share of the sum: n x 2^-53 per sum, far below this for any number of trials a study runs (10^4: 1e-12)
_SLACK = 1e-9


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


def _columns(obs: list[Observation]) -> tuple[np.ndarray, ...]:
    """compute_s, comm_s, rest_s, measured_step_s of each observation, as (n, 1) columns."""
    return tuple(np.array([getattr(o, f) for o in obs])[:, None]
                 for f in ("compute_s", "comm_s", "rest_s", "measured_step_s"))


def _squared_errors(cols: tuple[np.ndarray, ...], u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(n, len(u)): squared log error of each observation at each (u, v) = (log 1/compute, log 1/network)."""
    a, b, r, m = cols
    pred = a * np.exp(u)[None, :] + b * np.exp(v)[None, :] + r
    err = np.log(np.maximum(pred, 1e-30) / m)
    return err**2


def _loss(obs: list[Observation], u: np.ndarray, v: np.ndarray, ridge: float) -> np.ndarray:
    """Sum of squared log errors for every (u, v) = (log 1/compute, log 1/network) pair."""
    return _squared_errors(_columns(obs), u, v).sum(axis=0) + ridge * (u**2 + v**2)


def _usable(o: Observation) -> bool:
    return o.measured_step_s > 0 and (o.compute_s + o.comm_s) > 0


def _grid(cu: float, cv: float, half: float) -> tuple[np.ndarray, np.ndarray]:
    g = np.linspace(-half, half, _POINTS)
    uu, vv = np.meshgrid(cu + g, cv + g, indexing="ij")
    return uu.ravel(), vv.ravel()


def fit_calibration(obs: list[Observation], *, ridge: float = 1e-4, source: str = "plan tune") -> Calibration:
    """Coarse-to-fine grid search in log space (two parameters: exact enough, no local minima)."""
    usable = [o for o in obs if _usable(o)]
    if not usable:
        return Calibration(source=f"{source} (no completed trials)")
    cu, cv, half = 0.0, 0.0, _LOG_RANGE
    for _ in range(_LEVELS):
        u, v = _grid(cu, cv, half)
        k = int(np.argmin(_loss(usable, u, v, ridge)))
        cu, cv = float(u[k]), float(v[k])
        half /= 8.0
    return Calibration(compute=math.exp(-cu), network=math.exp(-cv),
                       source=f"{source} ({len(usable)} trials)")


def fit_each_left_out(obs: list[Observation], *, ridge: float = 1e-4, source: str = "plan tune") -> list[Calibration]:
    """[fit_calibration(obs without obs[i]) for each i], the same numbers at a fraction of the cost. Fits whose
    grid is the same at a level (centred on one point: most, as leaving one trial out seldom moves the coarse
    minimum) share every trial's squared errors there, and each one's loss is read as all the trials' sum less
    its own trial's. That differs from fit_calibration's sum by rounding alone (< _SLACK of it), so where one
    grid point is the least by more than that, it is fit_calibration's argmin; where two are closer, the fit's
    loss is summed as fit_calibration sums it (its kept trials, in order)."""
    usable = [j for j, o in enumerate(obs) if _usable(o)]
    pos = {j: p for p, j in enumerate(usable)}  # a trial's row among the usable ones
    cols = _columns([obs[j] for j in usable])
    centre = [(0.0, 0.0)] * len(obs)
    half = _LOG_RANGE
    for _ in range(_LEVELS if usable else 0):
        groups: dict[tuple[float, float], list[int]] = {}
        for i, c in enumerate(centre):
            groups.setdefault(c, []).append(i)
        for (cu, cv), fits in groups.items():
            u, v = _grid(cu, cv, half)
            sq = _squared_errors(cols, u, v)
            total, reg = sq.sum(axis=0), ridge * (u**2 + v**2)
            for i in fits:
                own = sq[pos[i]] if i in pos else 0.0
                k = _least(total - own + reg, _SLACK * (total + reg),
                           lambda: sq[[p for j, p in pos.items() if j != i]].sum(axis=0) + reg)
                centre[i] = (float(u[k]), float(v[k]))
        half /= 8.0
    n_kept = [len(usable) - (i in pos) for i in range(len(obs))]
    return [Calibration(compute=math.exp(-cu), network=math.exp(-cv), source=f"{source} ({k} trials)") if k
            else Calibration(source=f"{source} (no completed trials)") for (cu, cv), k in zip(centre, n_kept)]


def _least(approx: np.ndarray, slack: np.ndarray, exact) -> int:
    """argmin of the exact loss, known to lie within `slack` of `approx`: approx's argmin where no other point
    can be as low, else argmin of exact() (a callable: computed only then)."""
    k = int(np.argmin(approx))
    if np.count_nonzero(approx - slack <= approx[k] + slack[k]) == 1:
        return k
    return int(np.argmin(exact()))


def relative_errors(predicted: list[float], measured: list[float]) -> list[float]:
    """|predicted - measured| / measured for each pair."""
    return [abs(p - m) / m for p, m in zip(predicted, measured) if m > 0 and p is not None]


def summarize_errors(errors: list[float]) -> dict:
    if not errors:
        return {"n": 0, "mean_abs_pct": None, "median_abs_pct": None, "max_abs_pct": None}
    e = np.array(errors) * 100.0
    return {"n": int(e.size), "mean_abs_pct": float(e.mean()), "median_abs_pct": float(np.median(e)),
            "max_abs_pct": float(e.max())}
