"""Stacks on Transformer Engine run cuDNN fused attention on Hopper (planner/attention_kernel.py)."""

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import attention_kernel
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance


def _attention_s(stack: str, gpu: str, cluster: str, cudnn: bool) -> float:
    cat = load_catalog()
    stacks = dict(cat.stacks)
    stacks[stack] = stacks[stack].model_copy(update={"cudnn_attention": cudnn})
    plan = ExecutionPlan(stack=stack, tp=1, dp=8, precision="bf16", micro_batch=1, seq_len=4096)
    perf = performance(resolve_model("llama2-7b"), Layout.from_plan(plan),
                       resolve_system(Scenario(gpu=gpu, cluster=cluster, gpus=8)), Settings(stacks=stacks))
    return float(np.asarray(perf["raw_attention_s"]).reshape(-1)[0])


def test_hopper_cudnn_curve_is_faster_than_flash2_at_every_length():
    gpu = load_catalog().gpus["h100-80gb"]
    for s in (512, 2048, 8192, 16384):
        fa2 = attention_kernel.efficiency(gpu, s, 128, 0)
        cud = attention_kernel.efficiency(gpu, s, 128, 1)
        assert 1.3 < float(cud / fa2) < 1.8


def test_megatron_attention_uses_cudnn_on_h100_only():
    assert load_catalog().stacks["megatron"].cudnn_attention
    h_fa2 = _attention_s("megatron", "h100-80gb", "dgx-h100", False)
    h_cud = _attention_s("megatron", "h100-80gb", "dgx-h100", True)
    assert h_cud == pytest.approx(h_fa2 * 0.30 / 0.49, rel=0.02)  # 4096: 0.30 FA2 vs 0.49 cuDNN
    # no cuDNN curve in the A100 catalog entry: the FlashAttention-2 curve either way
    a_fa2 = _attention_s("megatron", "a100-80gb", "dgx-a100", False)
    assert _attention_s("megatron", "a100-80gb", "dgx-a100", True) == pytest.approx(a_fa2)
