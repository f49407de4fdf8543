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
from planner import profile_fit
from planner.throughput import performance
from validation.fit_profiles import load_all
from hardware.catalog import load_catalog

# Round 26 (python -m validation.fit_profiles): with the fit taking the secant exposure/k as k's column the fit
# oscillated (fsdp k 2.69 -> 0.95 -> 2.84 on successive refits); with k's line alone (hidden compute a fixed part)
# it converged (fsdp k 1.90) at LOSO 6.7 -> 7.5% (fms_fsdp 10.7 -> 21.1%): not kept.
# Round 30 (helper r30-dpx): the fit takes the exposure's full tangent (planner/dp_exposure.py: its slope in k as
# k's column, the share of compute it hides off each compute factor's column) and converges (two successive
# --write refits identical; fsdp k 2.76 -> 1.91). Published LOSO 6.4 -> 6.6%, LOOO 7.9 -> 6.9%, LOST 9.7 -> 9.8%,
# fms_fsdp 10.3 -> 7.1%, llm-foundry H100 4.9 -> 6.3%, seeds 59/72: kept.
LLAMA = resolve_model("llama2-7b")
CASES = [  # (stack, sharding, cluster, gpus): DP collectives partly hidden, partly exposed
    ("fsdp", "fsdp_full_shard", "dgx-a100", 16),
    ("fsdp", "fsdp_full_shard", "jean-zay-a100", 32),
    ("fsdp", "fsdp_hybrid", "jean-zay-a100", 32),
    ("bundled", "zero1", "jean-zay-a100", 32),
    ("megatron_deepspeed", "zero2", "jean-zay-a100", 32),
    ("bundled", "none", "jean-zay-a100", 32),
]


def _perf(stack, sharding, cluster, gpus, update=None, fit_columns=False, **plan):
    settings = Settings()
    if update:
        profiles = stack_profiles(settings)
        settings = Settings(stacks={**profiles, stack: profiles[stack].model_copy(update=update)})
    p = ExecutionPlan(**{"stack": stack, "sharding": sharding, "dp": gpus // plan.get("cp", 1), "micro_batch": 1,
                         "grad_accum": 1, "precision": "bf16", "seq_len": 1024, **plan})
    out = performance(LLAMA, Layout.from_plan(p), resolve_system(Scenario(cluster=cluster, gpus=gpus)), settings,
                      fit_columns=fit_columns)
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in out.items() if k != "bottleneck"}


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}" for c in CASES])
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


@pytest.mark.parametrize("case", CASES[1:], ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES[1:]])
def test_one_more_second_of_compute_hides_at_most_one_second_of_comm(case):
    """Exposure falls by at most the compute's growth times the overlap share (<= 1), whatever k."""
    for k in (1.0, 2.7):
        slow = {"comm_time_factor": k, "gemm_time_factor": 1.5}
        a, b = _perf(*case, update={"comm_time_factor": k}), _perf(*case, update=slow)
        assert a["dp_comm_s"] - b["dp_comm_s"] <= b["compute_s"] - a["compute_s"] + 1e-12


def test_dp_and_cp_ring_share_the_compute_they_hide_behind():
    """The CP ring's K/V exchange and the DP collectives both hide behind the attention: slower attention
    (e.g. a longer sequence at the same tokens per micro batch, validation/sanity_scaling.py seq_tokens) never
    shortens the step, though each exposure alone falls."""
    case = ("torchtitan", "fsdp_full_shard", "jean-zay-a100", 32)
    for k in (1.0, 2.0):
        steps = [_perf(*case, update={"comm_time_factor": k, "attention_time_factor": f}, cp=4, seq_len=8192,
                       activation_checkpointing="none")
                 for f in (0.5, 1.0, 1.5, 2.0, 3.0)]
        assert steps[0]["cp_comm_s"] > steps[-1]["cp_comm_s"]  # the ring hides behind attention
        assert np.all(np.diff([s["step_time_s"] for s in steps]) >= -1e-12), k


@pytest.mark.parametrize("case", CASES[1:], ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in CASES[1:]])
def test_the_fits_tangent_predicts_the_exposure(case):
    """planner/dp_exposure.py's columns: the exposure's slope in k and the share of compute it hides predict a
    small change of k or of the compute (inside one branch of each max, where the exposure is linear)."""
    k0, g0 = 1.8, 1.0
    base = _perf(*case, update={"comm_time_factor": k0, "gemm_time_factor": g0}, fit_columns=True)
    more_k = _perf(*case, update={"comm_time_factor": k0 * 1.001, "gemm_time_factor": g0})
    assert more_k["dp_comm_s"] - base["dp_comm_s"] == pytest.approx(base["dp_comm_slope_s"] * k0 * 0.001, rel=1e-3)
    more_g = _perf(*case, update={"comm_time_factor": k0, "gemm_time_factor": g0 * 1.001})
    grown = more_g["compute_s"] - base["compute_s"]
    assert base["dp_comm_s"] - more_g["dp_comm_s"] == pytest.approx(base["dp_hidden_share"] * grown, rel=2e-2, abs=1e-9)
    assert 0.0 <= base["dp_hidden_share"] < 1.0  # a second of compute hides less than a second of comm


def test_the_profile_fit_converges():
    """Round 26's secant column made successive refits oscillate (fsdp k 2.69 -> 0.95 -> 2.84): with the tangent
    a refit started from the last one's profiles lands on the same factors."""
    runs, priors = load_all(), load_catalog().stacks
    first, _ = profile_fit.fit_sites(runs, priors)
    second, _ = profile_fit.fit_sites(runs, {**priors, **first})
    for stack in ("fsdp", "megatron", "megatron_deepspeed", "torchtitan", "hf"):
        for field, *_ in profile_fit.PARAMS:
            assert getattr(second[stack], field) == pytest.approx(getattr(first[stack], field), rel=1e-3, abs=1e-3)
