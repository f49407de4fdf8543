"""validation/memory_pressure.py: the planner's memory model against what seed 003 says of its memory.

Seed 003: "Deepspeed stage 3, gradacc 1, act_chkpting, AdamW, bloom-7b, bs 1, 2xA100 ... VRAM
hyper-limite: warnings de GPU cache flushing" (s003-23), and for ZeRO-3, mb 2, no checkpointing on 32
A100 (s003-27) "VRAM=5GB !! (a cause du Stage 3!)".
"""

from pathlib import Path

import pytest

from planner.runs import load_runs
from validation.memory_pressure import Pressure, pressure_of, screen, seeds_inside

SEEDS = Path(__file__).resolve().parents[2] / "validation" / "data" / "seed_runs.csv"


@pytest.fixture(scope="module")
def seed_rows():
    return {r.id: r for r in load_runs(SEEDS)}


def test_the_row_with_stated_cache_flushes_is_in_the_flushing_regime(seed_rows):
    p = pressure_of(seed_rows["s003-23"])
    assert p.reserved_share > 1.0 >= p.required_share
    assert p.flushing


def test_zero3_without_checkpointing_at_mb2_is_at_the_cap_yet_holds_5gb_between_steps(seed_rows):
    p = pressure_of(seed_rows["s003-27"])
    assert p.required_share > 0.95  # its activations (no checkpointing, 2 x 2048 tokens) fill the device
    assert p.flushing
    # "VRAM=5GB": ZeRO-3's shards of bloom-7b1 over 32 GPUs plus the CUDA context, once the cache is returned
    assert 4.0 <= p.resident_gib <= 7.0


def test_the_slow_micro_batch_4_row_of_seed_002_is_far_from_the_cap(seed_rows):
    slow, fast = pressure_of(seed_rows["s002-42"]), pressure_of(seed_rows["s002-41"])
    assert not slow.flushing
    assert slow.required_share < fast.required_share  # mb 4 holds less than mb 8, which ran faster


def test_flushing_needs_the_step_to_fit():
    assert not Pressure("x", required_share=1.02, reserved_share=1.1, resident_gib=1.0).flushing
    assert not Pressure("x", required_share=0.8, reserved_share=0.9, resident_gib=1.0).flushing


def test_screen_slows_only_rows_at_or_above_the_threshold():
    errors = {"s003-a": 0.86, "s003-b": 0.10, "pub": 0.04}
    shares = {"s003-a": 0.99, "s003-b": 0.50, "pub": 1.00}
    new = screen(errors, shares, threshold=0.97, k=1.33)
    assert new["s003-a"] == pytest.approx(1.86 / 1.33 - 1)
    assert new["s003-b"] == 0.10
    assert new["pub"] == pytest.approx(1.04 / 1.33 - 1)
    assert seeds_inside(new) == 2 and seeds_inside(errors) == 1
