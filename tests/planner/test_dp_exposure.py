"""Data-parallel exposure (planner/dp_comm.py): the stack's comm_time_factor k slows the collectives, not
the compute they hide behind, so more compute never shortens a step (exposed = max(k x comm - overlap x
compute, k x floor), as planner/zero3.py does for ZeRO-3)."""

import numpy as np
import pytest

from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings, stack_profiles
from planner.throughput import performance

# Measured (round 26, helper N; python -m validation.fit_profiles, main LOSO 6.7% / LOOO 8.1% / all 10.4% / LOST 11.1%):
# the fix (each term max(k x comm - overlap x compute, k x floor), the fit taking the secant exposure/k as k's
# column) makes the fit oscillate (fsdp k 2.69 -> 0.95 -> 2.84 on successive refits); with its line in k (slope
# as the column, hidden compute as a fixed part) it converges (fsdp k 1.90) but LOSO 6.7 -> 7.5% (fms_fsdp
# 10.7 -> 21.1%, its 128-GPU rows predicted too slow), LOOO 8.1 -> 8.2, all rows 10.4 -> 11.2, LOST 11.1,
# seeds 59/72: not kept. Hence strict xfail until the DP exposure is refitted with k on the comm only.
XFAIL = pytest.mark.xfail(strict=True, reason="throughput.py multiplies the DP overlap subtraction by "
                          "comm_time_factor too (k x max(comm - overlap x compute, floor))")
LLAMA = resolve_model("llama2-7b")
CASES = [  # (stack, sharding, cluster, gpus): DP collectives partly hidden, partly exposed
    ("fsdp", "fsdp_full_shard", "dgx-a100", 16),
    ("fsdp", "fsdp_full_shard", "jean-zay-a100", 32),
    ("fsdp", "fsdp_hybrid", "jean-zay-a100", 32),
    ("bundled", "zero1", "jean-zay-a100", 32),
    ("megatron_deepspeed", "zero2", "jean-zay-a100", 32),
    ("bundled", "none", "jean-zay-a100", 32),
]


def _perf(stack, sharding, cluster, gpus, update=None, **plan):
    settings = Settings()
    if update:
        profiles = stack_profiles(settings)
        settings = Settings(stacks={**profiles, stack: profiles[stack].model_copy(update=update)})
    p = ExecutionPlan(**{"stack": stack, "sharding": sharding, "dp": gpus, "micro_batch": 1, "grad_accum": 1,
                         "precision": "bf16", "seq_len": 1024, **plan})
    out = performance(LLAMA, Layout.from_plan(p), resolve_system(Scenario(cluster=cluster, gpus=gpus)), settings)
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in out.items() if k != "bottleneck"}


# Round 27: with collectives costed at their message size and the refitted profiles, the dgx-a100 case holds
# (its DP time sits on the exposure floor at every k); the Jean Zay cases still fail.
@pytest.mark.parametrize("case", [pytest.param(c, id=f"{c[0]}-{c[1]}-{c[3]}", marks=() if c[2] == "dgx-a100" else XFAIL)
                                  for c in CASES])
def test_more_compute_never_shortens_the_step(case):
    """Slower attention or GEMM kernels, or recompute, add compute: the step never gets shorter, however
    slow the stack's collectives (k = 1 to 3)."""
    for k in (1.0, 2.0, 3.0):
        base = _perf(*case, update={"comm_time_factor": k})
        assert base["dp_comm_s"] > 0
        for factor in ("attention_time_factor", "gemm_time_factor"):
            steps = [_perf(*case, update={"comm_time_factor": k, factor: f})["step_time_s"]
                     for f in (1.0, 1.25, 1.5, 2.0, 3.0)]
            assert np.all(np.diff(steps) >= -1e-12), (k, factor, steps)
        recompute = _perf(*case, update={"comm_time_factor": k}, activation_checkpointing="full")
        assert recompute["step_time_s"] >= base["step_time_s"] - 1e-12, k


@XFAIL
@pytest.mark.parametrize("case", CASES[1:], ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES[1:]])
def test_one_more_second_of_compute_hides_at_most_one_second_of_comm(case):
    """Exposure falls by at most the compute's growth times the overlap share (<= 1), whatever k."""
    for k in (1.0, 2.7):
        slow = {"comm_time_factor": k, "gemm_time_factor": 1.5}
        a, b = _perf(*case, update={"comm_time_factor": k}), _perf(*case, update=slow)
        assert a["dp_comm_s"] - b["dp_comm_s"] <= b["compute_s"] - a["compute_s"] + 1e-12
