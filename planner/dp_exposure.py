"""The profile fit's view of the data-parallel exposure (planner/dp_comm.py; pure, vectorised).

Each DP term is max(k x comm - overlap x compute, k x floor): piecewise linear in the stack's comm factor k and
in the compute seconds that hide the collectives, which are themselves linear in the compute time factors
(planner/throughput.py). The fit (planner/profile_fit.py) is linear least squares, so it takes the exposure's
tangent plane at the current profile (a Gauss-Newton step, exact inside a branch of each max):

    E(k, c) ~ E0 + slope x (k - k0) - share x (c - c0)

with `slope` = dE/dk (k's column), c the stack-scaled compute seconds of the micro batches, `share` = -dE/dc
(a second more of compute hides `share` seconds more of communication, 0 <= share <= overlap < 1: it comes
off each compute factor's column) and the rest, E0 - slope x k0 + share x c0, a fixed part (0 where every
term is homogeneous in (k, c); ZeRO++'s quantization kernels, which neither scales, are not).
Both derivatives are one-sided finite differences, exact away from a branch's kink.
"""

from __future__ import annotations

import numpy as np

from planner import dp_comm
from planner.stacks import merged

STEP = 1e-6  # relative step of the finite differences


def fit_columns(spec, layout, links, fwd_micro, bwd_micro, prof, *, hbm_Bps, exposed, compute_s, moe_spec=None) -> dict:
    """{"dp_comm_slope_s": dE/dk, "dp_hidden_share": -dE/dc, "dp_fixed_s": the rest} per plan, where
    `exposed` = dp_comm.exposed_s at (`prof`, `fwd_micro`, `bwd_micro`) and `compute_s` = c, the stack-scaled
    compute seconds of all micro batches of a step (grad accumulation x (fwd + bwd))."""
    k = np.asarray(prof["comm_time_factor"], dtype=np.float64)
    dk = STEP * np.maximum(k, 1e-3)
    up_k, _ = dp_comm.exposed_s(spec, layout, links, fwd_micro, bwd_micro,
                                merged(prof, {"comm_time_factor": k + dk}), hbm_Bps=hbm_Bps, moe_spec=moe_spec)
    up_c, _ = dp_comm.exposed_s(spec, layout, links, fwd_micro * (1.0 + STEP), bwd_micro * (1.0 + STEP), prof,
                                hbm_Bps=hbm_Bps, moe_spec=moe_spec)
    slope = (up_k - exposed) / dk
    c = np.asarray(compute_s, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(c > 0, (exposed - up_c) / (STEP * np.where(c > 0, c, 1.0)), 0.0)
    share = np.maximum(share, 0.0)
    return {"dp_comm_slope_s": slope, "dp_hidden_share": share, "dp_fixed_s": exposed - slope * k + share * c}
