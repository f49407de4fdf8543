"""Fill and drain through stages of unequal work (Alpa eq. 2): planner/pipeline_stages.py."""

import numpy as np
import pytest

from planner import pipeline_stages
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance


def test_equal_stages_keep_the_p_minus_1_bubble():
    # 40 blocks on 4 stages, no output layer: every stage is the slowest
    assert pipeline_stages.ratio(40, 4, 10, 10, 1.0, 0.0, False) == pytest.approx(1.0)
    # one stage: no bubble to scale
    assert pipeline_stages.ratio(40, 1, 40, 40, 1.0, 0.5, True) == pytest.approx(1.0)


def test_output_layer_on_the_last_stage_is_not_paid_p_minus_1_times():
    # one block per stage, the last also runs the output layer (0.41 of a block): the fill and
    # drain cross 63 one-block stages, not 63 stages as slow as the last
    r = pipeline_stages.ratio(64, 64, 1, 1, 1.0, 0.41, True)
    assert r == pytest.approx(63 / (63 * 1.41))


def test_uneven_split_fills_through_the_lighter_stages():
    # 49 blocks on 32 stages: 17 stages of 2, 15 of 1; the slowest holds 2
    r = pipeline_stages.ratio(49, 32, 2, 1, 1.0, 0.0, False)
    assert r == pytest.approx((49 - 2) / (31 * 2))


def test_vectorised_and_bounded():
    r = pipeline_stages.ratio(64, np.array([1, 2, 8, 64]), np.array([64, 32, 8, 1]), np.array([64, 32, 8, 1]),
                              np.full(4, 2e-3), np.full(4, 1e-3), np.array([True, True, True, True]))
    assert r.shape == (4,) and np.all((r > 0) & (r <= 1))
    assert r[0] == 1.0 and r[1] > r[2] > r[3]


def test_throughput_bubble_uses_the_ratio_on_a_wide_vocabulary():
    """gpt2-206b (64 blocks) on pp 64 with 4 micro batches (seed 002's max-size runs): the last
    stage carries the output layer; the bubble is less than (p-1)/m of the slowest stage."""
    spec = resolve_model("gpt2-206b")
    plan = ExecutionPlan(tp=4, pp=64, dp=1, micro_batch=1, grad_accum=4, seq_len=1024, stack="megatron",
                         activation_checkpointing="full", precision="fp16")
    system = resolve_system(Scenario(cluster="jean-zay-v100-32gb", gpus=256))
    perf = performance(spec, Layout.from_plan(plan), system, Settings())
    frac = float(perf["bubble_fraction"][0])
    assert 0.6 * 63 / 4 < frac < 0.95 * 63 / 4
