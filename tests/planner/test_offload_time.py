"""planner/offload_time.py: what crosses the host link per step, by who keeps what on the host."""

import numpy as np
import pytest

from planner import comm
from planner.layout import Layout
from planner.offload_time import offload_s
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings

SYSTEM = resolve_system(Scenario(cluster="dgx-a100", gpus=8))
SHARD = 1e9
PROF = {"overlap_host": 0.0, "overlap_zero3": 0.0, "cpu_optimizer_threads_per_rank": 0.0}


def _offload(sharding: str, offload: str, precision: str = "bf16", ga: int = 1) -> float:
    plan = ExecutionPlan(stack="fsdp" if sharding.startswith("fsdp") else "hf", sharding=sharding, offload=offload,
                         dp=8, micro_batch=1, grad_accum=ga, seq_len=2048, precision=precision)
    lay = Layout.from_plan(plan)
    links = comm.Links.of(SYSTEM, Settings())
    return float(np.asarray(offload_s(lay, links, SYSTEM, SHARD, 28.0, np.array([0.0]), np.array([0.0]), PROF))[0])


def _host_Bps(sharding: str) -> float:
    return float(np.asarray(comm.Links.of(SYSTEM, Settings()).host_Bps).ravel()[0])


def test_fsdp_fetches_its_fp32_host_shard_deepspeed_its_16_bit_one():
    """Per micro batch the offloaded parameters come up twice (forward, backward): FSDP moves its fp32 shard and
    casts on the GPU (4 B), DeepSpeed ZeRO-3 its 16-bit partition (2 B). One extra micro batch adds exactly that."""
    B = _host_Bps("zero3")
    fsdp = _offload("fsdp_full_shard", "optimizer+params", ga=2) - _offload("fsdp_full_shard", "optimizer+params", ga=1)
    zero3 = _offload("zero3", "optimizer+params", ga=2) - _offload("zero3", "optimizer+params", ga=1)
    assert fsdp == pytest.approx(2 * SHARD * 4.0 / B + SHARD * 4.0 / B, rel=1e-9)  # fetch + the grads' fp32 trip
    assert zero3 == pytest.approx(2 * SHARD * 2.0 / B + SHARD * 4.0 / B, rel=1e-9)


def test_the_updated_parameters_reach_the_gpu_after_the_step_either_way():
    """ZeRO-Offload (optimizer only) uploads the updated 16-bit parameters after CPU Adam; with the parameters on
    the host the first fetch of the updated shard waits for the step just the same: one shard, unhidden. So the
    parameters' offload costs its fetches on top, never less (the sanity sweep's offload rule)."""
    B = _host_Bps("zero3")
    opt_only = _offload("zero3", "optimizer")
    both = _offload("zero3", "optimizer+params")
    assert both - opt_only == pytest.approx(2 * SHARD * 2.0 / B, rel=1e-9)  # the fetches, nothing hides them here
    fsdp_both = _offload("fsdp_full_shard", "optimizer+params")
    assert fsdp_both - opt_only == pytest.approx(2 * SHARD * 4.0 / B + SHARD * (4.0 - 2.0) / B, rel=1e-9)
