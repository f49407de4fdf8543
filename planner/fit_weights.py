"""How much each measured run, and each stack's own data, counts in the profile fit (planner/profile_fit.py).

A weighted least-squares fit should weigh a row by 1 / (its noise + the model's error), both squared:
  - published rows are single reported figures: their scatter around the model is the model's own error,
    about the published leave-one-source-out CV MAPE (~10%, validation/fit_profiles.py);
  - the seed logs vary +-40% from one day to the next for one configuration on Jean Zay (seed 002, rows
    s002-22..25; seed 003 ran on the same machine): read as a range of about two standard deviations,
    a noise of 0.20 on top of the model's 0.10, so a seed row counts 0.1^2 / (0.1^2 + 0.2^2) = 0.2 of a
    published one.
A stack's own factors are a deviation from the pooled fit of all stacks (hierarchical shrinkage): the
fewer independent origins (papers, repositories, seed logs) measured it, the more of that deviation may be
the one site or team that measured it rather than the stack (the hf profile is fitted on two seed logs of
one cluster only), so the pull towards the pooled fit grows as 1 / origins.
"""

from __future__ import annotations

import numpy as np

from planner.runs import Run

MODEL_SPREAD = 0.10  # relative error of the model on a published row (published CV MAPE, fit_profiles)
# SEED_SPREAD and FULL_ORIGINS stay at their physical readings: leave-one-origin-out published MAPE
# (validation/origin_cv.py, frozen parts, at profile_fit's RIDGE_POOLED 0.003 / RIDGE_STACK 0.001),
# origin-out / source-out %: SEED_SPREAD 0.1: 8.13 / 7.00 (but seed rows inside +-40% 55 of 72),
# 0.2: 8.34 / 7.16, 0.4: 8.83 / 7.28; FULL_ORIGINS 1: 8.66 / 7.26, 2: 8.39 / 7.21, 3: 8.34 / 7.16,
# 5: 8.41 / 7.10. Adding SEED_SPREAD 0.1/0.2 and FULL_ORIGINS 1/3 to the nested selection of the
# ridges made it worse (8.64% vs 8.31%): their choice overfits the held-out origins.
SEED_SPREAD = 0.20  # seed logs: +-40% day to day (seed 002) read as +-2 standard deviations
# origins of one stack at or above which its own data get the base pull only (RIDGE_STACK)
FULL_ORIGINS = 3


def is_seed(run: Run) -> bool:
    return run.source.startswith("seed")


def noise_weight(run: Run) -> float:
    """1 for a published row; MODEL^2 / (MODEL^2 + SEED^2) for a seed-log row."""
    if not is_seed(run):
        return 1.0
    return MODEL_SPREAD**2 / (MODEL_SPREAD**2 + SEED_SPREAD**2)


def noise_weights(runs: list[Run]) -> np.ndarray:
    return np.array([noise_weight(r) for r in runs])


def origin(run: Run) -> str:
    """The independent origin of a row: its source without the table (`seed003`, `llmfoundry`).

    One paper, repository benchmark page or seed log is one origin, including the Megatron papers of one
    NVIDIA team (megatron_2020, megatron_sc21, megatron_korthikanti, megatron_core_h100, nemo_perf): each
    is its own measurement campaign (V100 DGX-2 2020, A100 Selene 2021/2022, H100 Megatron-Core / NeMo
    2024) on its own code version, and the runs the planner is judged on are likewise new papers of teams
    that may be known (a later paper of the same team). Holding the whole team out at once
    (validation/origin_cv.py --grid, frozen parts): published MAPE 9.2% instead of 8.3%."""
    return run.source.split(":", 1)[0]


def stack_ridge(runs: list[Run], base: float) -> float:
    """The pull of one stack's factors towards the pooled fit: `base` with FULL_ORIGINS or more
    independent origins, base x FULL_ORIGINS / origins below."""
    n = len({origin(r) for r in runs})
    return base * FULL_ORIGINS / max(min(n, FULL_ORIGINS), 1)
