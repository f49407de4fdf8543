"""Whether a stack's rows identify a fixed per-step term (the profile fit's `step_overhead_s` ridge scale).

A fixed host time per optimizer step s and a time factor on the per-micro-batch parts can only be told
apart by rows that change the number of micro batches per step and nothing else: the same model, GPUs,
layout and micro batch at two or more grad accumulations (step = ga x micro + s). Without such rows a long
step's fixed term is a guess the ridge has to make, and the tighter prior (`UNIDENTIFIED_SCALE_S`) keeps one
origin's long steps from charging other origins' short ones (validation/worst_rows.md finding 1:
leave-one-origin-out published MAPE 8.25% at a 0.3 s scale, 7.92% at 0.1 s); rows that do identify it
(seed 003's HF loop: ~0.2-0.3 s per step) keep the profile fit's scale (planner/profile_fit.py).
"""

from __future__ import annotations

import functools
from collections import defaultdict

# the per-step term's ridge scale where a stack's rows do not identify it: tens of ms, a tuned loop's
# per-step host work (megatron fits 0 s, megatron_deepspeed 0.065 s on 3+ origins)
UNIDENTIFIED_SCALE_S = 0.1


def _config(run) -> tuple:
    return run.gpu_type, run.model, run.spec.n_layers, run.spec.hidden, _plan_key(run.plan)


@functools.lru_cache(maxsize=4096)
def _plan_key(plan) -> tuple:
    """The plan's knobs but the batch (a frozen, hashable ExecutionPlan: once per plan, as the origin
    screen asks for every fold and setting: validation/origin_cv.py --grid)."""
    knobs = plan.model_dump(exclude={"grad_accum", "global_batch", "global_batch_tokens"})
    return tuple(sorted(map(str, knobs.items())))


def identified(runs) -> bool:
    """True when some configuration among `runs` was measured at two or more grad accumulations."""
    seen: dict[tuple, set[int]] = defaultdict(set)
    for r in runs:
        seen[_config(r)].add(int(r.plan.grad_accum))
    return any(len(ga) > 1 for ga in seen.values())
