"""Host time of synchronous kernel launches (CUDA_LAUNCH_BLOCKING=1): planner/launch_sync.py."""

from pathlib import Path

import numpy as np
import pytest

from planner import launch_sync
from planner.errors import PlanError
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.runs import load_runs
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings, stack_profiles
from planner.throughput import at, performance

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"
BLOOM = resolve_model("bloom-7b1")


def _perf(blocking: bool, gpus=32, **plan_kw):
    plan = ExecutionPlan(**{"stack": "megatron_deepspeed", "sharding": "zero1", "tp": 4, "pp": 2,
                            "dp": gpus // 8, "activation_checkpointing": "full", "seq_len": 2048, **plan_kw})
    system = resolve_system(Scenario(cluster="jean-zay-a100", gpus=gpus)).model_copy(
        update={"launch_blocking": blocking})
    perf = performance(BLOOM, Layout.from_plan(plan), system, Settings())
    return {k: np.asarray(v).reshape(-1)[0] for k, v in perf.items()}


def test_the_flag_is_read_from_the_notes_of_the_runs_file():
    runs = load_runs(DATA / "published_dev.csv")
    flagged = {r.id for r in runs if r.system.launch_blocking}
    bloom = {r.id for r in runs if r.id.startswith("bloom_prequel_")}
    assert flagged == bloom and len(bloom) == 53  # the only source that says so
    one = next(r for r in runs if r.id == "bloom_prequel_007")
    assert any("CUDA_LAUNCH_BLOCKING=1" in n for n in one.assumptions)
    seeds = load_runs(DATA / "seed_runs.csv")
    assert not any(r.system.launch_blocking for r in seeds)


def test_a_column_wins_over_the_notes_and_a_bad_value_names_the_field():
    notes: list[str] = []
    assert launch_sync.launch_blocking_of({"notes": "export CUDA_LAUNCH_BLOCKING=1"}, notes)
    assert notes and not launch_sync.launch_blocking_of({"notes": "async launches"}, [])
    assert not launch_sync.launch_blocking_of({"launch_blocking": "false", "notes": "CUDA_LAUNCH_BLOCKING=1"}, [])
    assert launch_sync.launch_blocking_of({"launch_blocking": "true"}, [])
    with pytest.raises(PlanError) as e:
        launch_sync.launch_blocking_of({"id": "r1", "launch_blocking": "maybe"}, [])
    assert e.value.field == "launch_blocking"


def test_zero_without_the_flag_and_in_the_breakdown_with_it():
    off, on = _perf(False, micro_batch=1, grad_accum=16), _perf(True, micro_batch=1, grad_accum=16)
    assert off["launch_sync_s"] == 0.0 and off["raw_launch_sync_s"] == 0.0
    assert on["launch_sync_s"] > 0
    # the host time is part of the busy time: the step grows by it and by its share of the bubble
    bubble = 1 + on["bubble_fraction"]
    assert on["step_time_s"] - off["step_time_s"] == pytest.approx(on["launch_sync_s"] * bubble, rel=0.02)
    time, _ = at({k: np.atleast_1d(v) for k, v in on.items()}, 0)
    assert time.launch_sync_s == pytest.approx(on["launch_sync_s"])


def test_it_scales_like_layers_times_micro_batches():
    """A fixed cost per block and micro batch: at the same global batch, micro batch 1 pays it
    twice as often as micro batch 2; more stages leave fewer blocks to each GPU."""
    us = stack_profiles(Settings())["megatron_deepspeed"].sync_launch_us
    mb1, mb2 = _perf(True, micro_batch=1, grad_accum=32), _perf(True, micro_batch=2, grad_accum=16)
    assert mb1["launch_sync_s"] == pytest.approx(2 * mb2["launch_sync_s"])
    pp2 = _perf(True, 24, micro_batch=1, grad_accum=32, pp=2, dp=3)  # 30 blocks: 15 per stage
    pp3 = _perf(True, 24, micro_batch=1, grad_accum=32, pp=3, dp=2)  # 10 per stage
    assert pp2["launch_sync_s"] == pytest.approx(1.5 * pp3["launch_sync_s"])
    layers = BLOOM.n_layers / 2
    launches = launch_sync.LAUNCHES_FORWARD * 2 + launch_sync.LAUNCHES_BACKWARD  # full recompute
    assert mb1["raw_launch_sync_s"] == pytest.approx(32 * layers * launches * 1e-6)
    assert mb1["launch_sync_s"] == pytest.approx(mb1["raw_launch_sync_s"] * us)
    # without recomputation the forward is launched once
    none = _perf(True, micro_batch=1, grad_accum=32, activation_checkpointing="none")
    assert none["raw_launch_sync_s"] / mb1["raw_launch_sync_s"] == pytest.approx(
        (launch_sync.LAUNCHES_FORWARD + launch_sync.LAUNCHES_BACKWARD) / launches)
