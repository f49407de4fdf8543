"""Corners the dev data does not visit, found by validation/sanity_sweep.py (invariants of
physics): each test failed before its fix."""

import numpy as np
import pytest

from planner import pinned
from planner.layout import Layout
from planner.pipeline_stages import bubble_fraction
from planner.resolve import resolve_model, resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance


def test_context_parallelism_needs_no_head_split():
    """Ring attention (Megatron-Core / torchtitan CP) splits the sequence, not the heads: cp 16 on
    a 40-head model is a valid plan (it was refused: 'cp does not divide n_heads')."""
    scenario = Scenario(n_layers=40, hidden=5120, n_heads=40, vocab=50257, gpu="h100-80gb", gpus=32, tp=1, pp=1,
                        cp=16, seq_len=131072, global_batch=2)
    spec, system = resolve_model(scenario), resolve_system(scenario)
    pinned.check_pinned(spec, system, scenario, 131072, 2)  # no PlanError


def test_interleaving_cannot_beat_one_micro_batch_through_the_pipeline():
    """Fewer micro batches than stages: the step is at least one micro batch's trip through all
    p stages (p t), interleaved or not; it was (1 + (p-1)/v) t with one micro batch."""
    assert bubble_fraction(8, 1, 4) == pytest.approx(7.0)  # p t in all, as without interleaving
    assert bubble_fraction(8, 1, 1) == pytest.approx(7.0)
    assert bubble_fraction(8, 4, 2) == pytest.approx((4 + 3 / 2) / 4)  # (p-m) t + (m-1) t / v
    # at m >= p the interleaved bubble (p-1)/(m v) of Narayanan et al. SC21 is unchanged
    for m in (8, 16, 64):
        assert bubble_fraction(8, m, 2) == pytest.approx(7 / (m * 2))
        assert bubble_fraction(8, m, 1) == pytest.approx(7 / m)
    # never below one micro batch's latency, never above the non-interleaved bubble
    for p in (2, 4, 8, 16):
        for m in (1, 2, 3, 5, 8, 16, 32):
            for v in (1, 2, 3, 4):
                f = bubble_fraction(p, m, v)
                assert m * (1 + f) >= p - 1e-12
                assert f <= (p - 1) / m + 1e-12


def test_throughput_of_an_interleaved_pipeline_with_one_micro_batch():
    spec = resolve_model(Scenario(model="llama2-13b"))
    system = resolve_system(Scenario(cluster="dgx-a100", gpus=16))
    steps = {}
    for vpp in (1, 2, 5):
        plan = ExecutionPlan(tp=2, pp=8, vpp=vpp, dp=1, micro_batch=1, grad_accum=1, seq_len=2048)
        p = performance(spec, Layout.from_plan(plan), system, Settings())
        busy = float(p["bubble_s"][0] / p["bubble_fraction"][0])
        assert float(p["step_time_s"][0]) >= busy * (1 + 7 * float(p["bubble_stage_factor"][0])) * 0.999
        steps[vpp] = float(p["step_time_s"][0])
    assert steps[5] >= steps[1] * 0.99  # interleaving only adds sends with one micro batch


def test_fused_attention_without_a_measured_curve_runs_the_causal_half():
    """On a GPU without an attention curve (V100) the fused kernel's
    estimate skips the masked half of the causal scores like the measured curves do: its core is
    faster than the eager (materialised) score GEMMs, never 1/0.75 slower (it was)."""
    spec = resolve_model(Scenario(model="llama2-7b"))
    for gpu in ("v100-32gb", "v100-16gb"):
        system = resolve_system(Scenario(gpu=gpu, gpus=8))
        assert not system.gpu.attention_efficiency  # the case under test
        raw = {}
        for attention in ("eager", "flash"):
            plan = ExecutionPlan(dp=8, micro_batch=1, seq_len=4096, attention=attention,
                                 precision="fp16" if gpu.startswith("v100") else "bf16")
            raw[attention] = float(performance(spec, Layout.from_plan(plan), system, Settings())["raw_attention_s"][0])
        assert raw["flash"] < raw["eager"], gpu
