"""Is the network the bottleneck? What the inter-node network costs each plan, and the bandwidth it needs.

Each plan's step is evaluated with the nodes' inter-node bandwidth scaled (planner/throughput.py
`internode_scale`, every cross-node collective, send and all-to-all alike) against an unlimited
network. `network_share`: the share of the step the finite network costs at the nodes' bandwidth.
`network_gbps_needed`: the least line rate per node (the unit of the cluster's `internode_gbps`) at
which the step is within TOLERANCE of the unlimited network's; 0 for a plan no network slows.

Seed 001's figure (the DP bytes carried within the whole compute time) assumed every second of compute
hides traffic; the model hides DP traffic behind the last micro batch's backward and the next forward
only (planner/dp_comm.py), so that figure called networks sufficient that still cost a tenth of a step.
"""

from __future__ import annotations

import numpy as np

TOLERANCE = 0.01  # "needed": the step at most 1% longer than on an unlimited network
GRID = 2.0 ** (np.arange(-24, 25) / 2.0)  # 1/4096 .. 4096 x the nodes' bandwidth, sqrt(2) apart
REFINE = 2.0 ** (np.arange(1, 16) / 32.0)  # 15 points between two grid points (~2% apart)
UNLIMITED = 1e9


def _steps(step_of, n: int, scales: np.ndarray) -> np.ndarray:
    """Step times (n plans x len(scales) per plan, or n x k per-plan scales) in one evaluation."""
    per_plan = scales if scales.ndim == 2 else np.broadcast_to(scales, (n, scales.size))
    return np.asarray(step_of(np.repeat(np.arange(n), per_plan.shape[1]), per_plan.reshape(-1))).reshape(n, -1)


def assess(step_of, n: int, available_gbps: float) -> tuple[np.ndarray, np.ndarray]:
    """(network_gbps_needed, network_share) of `n` plans. `step_of(index, scale)`: the step times of plans
    `index` (repeated) with their inter-node bandwidth x `scale`, both arrays of one length."""
    if n == 0:
        return np.zeros(0), np.zeros(0)
    steps = _steps(step_of, n, np.concatenate([[1.0, UNLIMITED], GRID]))
    now, free, grid = steps[:, 0], steps[:, 1], steps[:, 2:]
    ok = grid <= free[:, None] * (1.0 + TOLERANCE)
    # the first grid point from which every larger bandwidth is within the tolerance
    bad = ~ok
    last_bad = np.where(bad.any(axis=1), GRID.size - 1 - np.argmax(bad[:, ::-1], axis=1), -1)
    first_ok = last_bad + 1
    unused = first_ok == 0  # within the tolerance even at 1/4096 of the bandwidth: no network in the step
    lo = GRID[np.clip(last_bad, 0, GRID.size - 1)]
    fine = lo[:, None] * REFINE[None, :]
    fine_ok = _steps(step_of, n, fine) <= free[:, None] * (1.0 + TOLERANCE)
    # first refined point from which the rest pass; none: the upper grid point
    fine_bad = ~fine_ok
    last_fine_bad = np.where(fine_bad.any(axis=1), REFINE.size - 1 - np.argmax(fine_bad[:, ::-1], axis=1), -1)
    upper = np.where(last_fine_bad + 1 < REFINE.size, fine[np.arange(n), np.minimum(last_fine_bad + 1, REFINE.size - 1)],
                     lo * np.sqrt(2.0))
    needed = np.where(unused, 0.0, upper * available_gbps)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(now > 0, np.clip(1.0 - free / now, 0.0, 1.0), 0.0)
    return needed, np.where(unused, 0.0, share)
