"""An MoE run whose row states no ep (planner/validate.py uses this): the planner's fastest fitting
(ep, etp) for the row's stated layout, as `plan estimate` would choose them with the other knobs
pinned (planner/moe_parallel.py ep_candidates: ep every divisor of the experts that fits the ranks,
etp 1 or tp)."""

from __future__ import annotations

import numpy as np

from planner import memory, moe_parallel, search, throughput
from planner.layout import Layout
from planner.scenario import ExecutionPlan
from planner.settings import Settings, stack_profiles


def best_expert_layout(spec, system, plan: ExecutionPlan, settings: Settings) -> ExecutionPlan:
    """`plan` with the fastest (ep, etp) that fits (the one using least memory where none fits)."""
    pairs = moe_parallel.ep_candidates(spec, plan.tp, plan.cp, plan.dp, None, None)
    plans = [plan.model_copy(update={"ep": ep, "etp": etp}) for ep, etp in pairs]
    lay = Layout.from_plans(plans)
    mem = memory.memory_arrays(spec, lay, system, settings)
    reasons = search.reject_reasons(spec, system, lay, plan.seq_len, plan.global_batch, stack_profiles(settings), mem)
    fits = np.asarray(reasons) == search.FITS
    if not fits.any():
        return plans[int(np.argmin(np.asarray(mem["total_bytes"]).reshape(-1)))]
    speed = np.asarray(throughput.performance(spec, lay, system, settings)["tokens_per_s"], dtype=float).reshape(-1)
    return plans[int(np.argmax(np.where(fits, speed, -np.inf)))]
