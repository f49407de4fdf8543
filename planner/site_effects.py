"""Site factors of the seed logs: what one team's cluster and software versions add to every run they logged.

The seed logs (seed 002: Jean Zay V100, seed 003: Jean Zay / Adastra A100) are slow across stacks: seed 002's
Megatron-LM rows come out ~55% slower than the megatron profile fitted on published runs predicts, and its
HF + DeepSpeed rows slower still. Left in the stack factors, that slowness would be carried to every
published run of the stack (the hf profile rests on these logs only). So each seed origin gets one
multiplier m on the model's step time, shared by all its rows whatever their stack (a random effect:
log m ~ N(0, SITE_SPREAD^2)); a stack's factors then carry only what differs between stacks within and
across the logs. Published rows get none: they are the population the planner predicts, and a user fits
their own site with `plan calibrate`. Cross-validation predicts a held-out seed table with the factor of its
origin fitted on that origin's other tables.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from planner.fit_weights import MODEL_SPREAD, is_seed, origin
from planner.runs import Run

# prior sd of log m: a site may be a few times slower, not orders of magnitude. Leave-one-origin-out
# published MAPE (validation/origin_cv.py --grid): 1e-3 (no site factor) 10.2%, 0.3: 8.5%, 1.0: 8.3%, 3.0: 8.4%.
SITE_SPREAD = 1.0
INNER = 8  # alternations of (factors | sites) and (sites | factors) per design


def keys(runs: list[Run]) -> list[str | None]:
    """The site of each run: its seed origin, None for published rows."""
    return [origin(r) if is_seed(r) else None for r in runs]


def row_factors(site_of: list[str | None], sites: dict[str, float]) -> np.ndarray:
    return np.array([sites.get(k, 1.0) if k else 1.0 for k in site_of])


def update(model_over_measured: np.ndarray, w: np.ndarray, site_of: list[str | None]) -> dict[str, float]:
    """Each site's m minimising sum w (m r - 1)^2 + lam (m - 1)^2 over its rows, r = model / measured step
    time; lam = (MODEL_SPREAD / SITE_SPREAD)^2 in the units of a published row's weight (planner/fit_weights.py)."""
    lam = (MODEL_SPREAD / SITE_SPREAD) ** 2
    num: dict[str, float] = defaultdict(lambda: lam)
    den: dict[str, float] = defaultdict(lambda: lam)
    for r, wi, k in zip(model_over_measured, w, site_of):
        if k:
            num[k] += wi * r
            den[k] += wi * r * r
    return {k: float(num[k] / den[k]) for k in num}
