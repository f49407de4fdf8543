"""Megatron-Core's per-chunk data-parallel collectives under the interleaved schedule (planner/interleaved_dp.py):
each model chunk's gradients reduced after its last backward, chunk 0's exposed whole; each chunk's parameters
gathered p chunk forwards before they are used."""

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import interleaved_dp
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance


def test_last_chunk_s_reduction_is_exposed_whole_when_compute_hides_the_rest():
    # 0.6 s over 3 chunks: chunks 2 and 1 hide behind 4 x 1.0 / 3 s of cool-down backward each, chunk 0 does not
    assert interleaved_dp.grad_sync_s(0.6, 1.0, 4, 3) == pytest.approx(0.2)


def test_chunks_queue_up_when_their_reduction_outlasts_the_cool_down():
    # c = 0.2 s per chunk, h = 4 x 0.1 / 3 = 0.1333 s: chunks 2 and 1 each leave 0.0667 s, then chunk 0's 0.2 s
    assert interleaved_dp.grad_sync_s(0.6, 0.1, 4, 3) == pytest.approx(0.2 + 2 * (0.2 - 0.4 / 3))


def test_nothing_to_hide_behind_exposes_every_chunk():
    assert interleaved_dp.grad_sync_s(0.6, 0.0, 4, 3) == pytest.approx(0.6)
    assert interleaved_dp.param_gather_s(0.6, 0.0, 4, 3, 10) == pytest.approx(0.6)


def test_gather_of_chunk_0_is_a_pipeline_and_later_chunks_hide_behind_the_other_chunks_forwards():
    # chunk 0: 0.2 s in 10 buckets beside 1.0 / 3 s of forward -> its first bucket, 0.02 s; chunks 1, 2 hidden
    assert interleaved_dp.param_gather_s(0.6, 1.0, 4, 3, 10) == pytest.approx(0.02)
    # f / vpp = 0.1 s: chunk 0 = 0.2 - 0.1 x 0.9; chunk 1 behind 3 chunk forwards, chunk 2 behind 4: hidden
    assert interleaved_dp.param_gather_s(0.6, 0.3, 4, 3, 10) == pytest.approx(0.2 - 0.1 * 0.9)
    # f / vpp = 0.01 s: chunk 0 = 0.2 - 0.01 x 0.9, chunk 1 = 0.2 - 3 x 0.01, chunk 2 = 0.2 - 4 x 0.01
    assert interleaved_dp.param_gather_s(0.6, 0.03, 4, 3, 10) == pytest.approx(
        (0.2 - 0.01 * 0.9) + (0.2 - 3 * 0.01) + (0.2 - 4 * 0.01))


def _dp(stack: str, vpp: int, gbps: float, sharding: str = "zero1") -> float:
    plan = ExecutionPlan(stack=stack, tp=4, pp=4, vpp=vpp, dp=8, micro_batch=1, grad_accum=16, sharding=sharding,
                         activation_checkpointing="selective", precision="bf16", seq_len=4096)
    system = resolve_system(Scenario(cluster="dgx-h100", gpus=128, internode_gbps=gbps))
    perf = performance(resolve_model("llama2-13b"), Layout.from_plan(plan), system,
                       Settings(stacks=load_catalog().stacks))
    return float(np.asarray(perf["dp_comm_s"]).reshape(-1)[0])


def test_megatron_interleaving_spreads_a_slow_network_s_reduction_over_the_cool_down():
    # 200 Gbps per node: a stage's reduction and gather outlast one micro batch's compute; with 4 chunks three of
    # them run behind the cool-down / the other chunks' forwards (~0.30 s -> ~0.21 s)
    assert _dp("megatron", 4, 200.0) < 0.8 * _dp("megatron", 1, 200.0)
    # DeepSpeed's ZeRO-1 (no Megatron-Core buckets, no per-chunk reduction) keeps its exposure
    assert _dp("megatron_deepspeed", 4, 200.0) == pytest.approx(_dp("megatron_deepspeed", 1, 200.0))


def test_megatron_interleaving_exposes_the_last_chunk_s_whole_reduction_on_a_fast_network():
    # 3200 Gbps: one pipeline stage's collectives hide behind one micro batch but for their last bucket; with
    # vpp 2 chunk 0's whole reduction (half the stage) follows the last backward
    assert _dp("megatron", 2, 3200.0) > 2.0 * _dp("megatron", 1, 3200.0)
