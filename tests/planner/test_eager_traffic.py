"""Eager attention's element-wise HBM traffic over the score matrix (planner/eager_traffic.py):
Hugging Face's unfused fp32 softmax vs Megatron's fused 16-bit one."""

import numpy as np
import pytest

from planner import eager_traffic, throughput
from planner.layout import Layout
from planner.presets import resolve_model
from planner.scenario import ExecutionPlan
from planner.settings import Settings
from tests.planner.test_memory import system

BLOOM = resolve_model("bloom-7b1")


@pytest.mark.parametrize("c, fp16, fwd, bwd", [(2, True, 28, 32), (2, False, 16, 28), (4, False, 16, 20)],
                         ids=["fp16", "bf16", "fp32"])
def test_bytes_per_score_of_the_hf_kernels(c, fp16, fwd, bwd):
    f, b = eager_traffic.hf_bytes_per_score(c, fp16)
    assert (float(f), float(b)) == (fwd, bwd)


def test_fused_softmax_keeps_the_activation_count():
    # Megatron's fused kernel: 5 B per score at 16 bit, forward + 2 backward passes, + recompute
    s = eager_traffic.seconds_per_token(32, 2048, 1, 2, False, 0, 1.0, 1e12)
    assert float(s) == pytest.approx(32 * 2048 * 5.0 * 4.0 / 1e12)
    hf = eager_traffic.seconds_per_token(32, 2048, 1, 2, False, 1, 1.0, 1e12)
    assert float(hf) == pytest.approx(32 * 2048 * (2 * 16 + 28) / 1e12)


def _elementwise(stack: str, attention: str, seq_len: int) -> float:
    plan = ExecutionPlan(stack=stack, dp=8, sharding="zero1", seq_len=seq_len, micro_batch=2,
                         attention=attention, activation_checkpointing="full")
    out = throughput.performance(BLOOM, Layout.from_plan(plan), system(gpus=8), Settings())
    return float(np.asarray(out["raw_elementwise_s"]).reshape(-1)[0])


def test_the_step_carries_the_hf_score_traffic():
    tokens, hbm = 2 * 2048, system(gpus=8).gpu.hbm_gbytes_per_s * 1e9 * throughput.HBM_EFFICIENCY
    per_token = eager_traffic.seconds_per_token(BLOOM.n_heads, 2048, 1, 2, False, 1, 1.0, hbm)
    extra = _elementwise("hf", "eager", 2048) - _elementwise("hf", "flash", 2048)
    assert extra == pytest.approx(float(per_token) * tokens * BLOOM.n_layers, rel=1e-6)
    # quadratic in the sequence: per token, twice the scores at twice the length
    extra_1k = _elementwise("hf", "eager", 1024) - _elementwise("hf", "flash", 1024)
    assert extra / extra_1k == pytest.approx(4.0, rel=1e-6)
    # the unfused path moves more bytes than Megatron's fused kernel
    assert extra > _elementwise("megatron", "eager", 2048) - _elementwise("megatron", "flash", 2048)
