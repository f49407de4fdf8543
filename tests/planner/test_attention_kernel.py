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


def _flash_benchmark_fwd_bwd_flops(batch, seqlen, headdim, nheads, causal=True) -> float:
    """Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py `flops(..., mode="fwd_bwd")`:
    4 b s^2 h d, halved when causal, x 3.5 (backward = 2.5 forwards)."""
    f = 4 * batch * seqlen**2 * nheads * headdim // (2 if causal else 1)
    return 3.5 * f


@pytest.mark.parametrize("ckpt, recomputed", [("none", 0.0), ("selective", 1.0), ("full", 1.0)])
def test_fused_attention_time_is_the_kernel_benchmarks_fwd_bwd_flops_at_the_curve_rate(ckpt, recomputed):
    # llama2-7b (32 layers, 32 heads of 128) at 4096 on H100: the curve reads 0.30 of the bf16 peak, a
    # forward+backward rate in the FlashAttention benchmark's FLOPs; a recomputed forward adds 1/3.5 of it.
    cat = load_catalog()
    gpu = cat.gpus["h100-80gb"]
    spec = resolve_model("llama2-7b")
    plan = ExecutionPlan(stack="fsdp", tp=1, dp=8, precision="bf16", micro_batch=2, seq_len=4096,
                         activation_checkpointing=ckpt)
    perf = performance(spec, Layout.from_plan(plan), resolve_system(Scenario(gpu="h100-80gb", cluster="dgx-h100",
                                                                             gpus=8)), Settings(stacks=cat.stacks))
    kernel_s = spec.n_layers * _flash_benchmark_fwd_bwd_flops(2, 4096, 128, 32) / (0.30 * gpu.peak_tflops("bf16") * 1e12)
    got = float(np.asarray(perf["raw_attention_s"]).reshape(-1)[0])
    assert got == pytest.approx(kernel_s * (3.5 + recomputed) / 3.5, rel=1e-6)


def test_eager_attention_backward_is_two_forwards():
    assert attention_kernel.passes(True, 0.0) == 3.0  # dS -> dQ, dK and dP -> dV: 2 GEMMs per forward GEMM
    assert attention_kernel.passes(False, 0.0) == 3.5  # the fused backward recomputes QK^T and the softmax
    assert attention_kernel.passes(np.array([True, False]), np.array([1.0, 1.0])).tolist() == [4.0, 4.5]
