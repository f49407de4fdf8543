"""Adafactor's step as the PyTorch implementations run it (planner/adafactor.py): bytes counted from
the code, and seed 003's own comparison of its DDP + Adafactor run against DeepSpeed ZeRO-1."""

import numpy as np
import pytest

from planner import adafactor, throughput
from planner.layout import Layout
from planner.runs import load_runs
from planner.settings import Settings
from planner.validate import predict, resolved_plan
from validation.fit_profiles import DATA


@pytest.fixture(scope="module")
def seed003():
    return {r.id: r for r in load_runs(DATA / "seed_runs.csv") if r.id.startswith("s003-")}


def _layout(run, **update):
    return Layout.from_plan(resolved_plan(run, Settings()).model_copy(update=update))


def test_bytes_per_parameter_follow_each_implementation(seed003):
    ddp = seed003["s003-06"]  # HF stack, 16-bit weights (planner/run_precision.py)
    assert ddp.plan.optimizer == "adafactor" and ddp.plan.precision == "bf16_pure"
    assert adafactor.bytes_per_param(_layout(ddp))[0] == 84 + 18
    assert adafactor.bytes_per_param(_layout(ddp, precision="bf16"))[0] == 84  # AMP: fp32 weights, no casts
    assert adafactor.bytes_per_param(_layout(ddp, stack="bundled"))[0] == 64  # torch.optim.Adafactor
    # every implementation moves 3-5x what one fused kernel would (the old figure, 20 B)
    assert all(b > 3 * 20 for b in (64, 84, 102))


def test_a_7b_adafactor_step_in_16_bit_weights_streams_100_bytes_per_parameter(seed003):
    run = seed003["s003-06"]  # bloom-7b1, DDP (optimizer not sharded), A100 80GB
    lay = _layout(run)
    perf = throughput.performance(run.spec, lay, run.system, Settings())
    hbm_Bps = run.system.gpu.hbm_gbytes_per_s * 1e9 * throughput.HBM_EFFICIENCY
    expected = run.spec.n_params * 102 / hbm_Bps  # ~0.44 s on 2.0 TB/s at 80%
    assert perf["raw_optimizer_s"][0] == pytest.approx(expected, rel=1e-6)
    assert 0.35 < expected < 0.55


def test_seed_003s_ddp_checkpointing_adafactor_run_is_slower_than_zero1_as_the_seed_states(seed003):
    """Seed 003: "gradient checkpointing + diff(DDP,DS1) coute +36% en temps de calcul": DDP with
    checkpointing and Adafactor (s003-06, 350 days) against DeepSpeed ZeRO-1 with AdamW and no
    checkpointing (s003-03, 258 days), both micro batch 1 on 8 A100. With a fused-kernel Adafactor
    (20 B per parameter) the planner put DDP 5% faster; Adafactor's real step puts it slower, as measured."""
    ddp, zero1 = predict(seed003["s003-06"], Settings()), predict(seed003["s003-03"], Settings())
    measured = 350 / 258
    ratio = ddp.predicted_iter_time_s / zero1.predicted_iter_time_s
    assert measured == pytest.approx(1.36, abs=0.005)
    # with the fitted profiles (they move at each refit): within the hf stack's stated error (~24%) of the
    # seed's ratio, and on the right side of 1 (the fused-kernel step gave 0.95)
    assert measured / 1.24 < ratio < measured * 1.24, ratio


def test_the_optimizer_step_weighs_little_under_long_accumulation(seed003):
    """s003-10: the same DDP + Adafactor at 256 micro batches per step: the step is < 1% of it."""
    run = seed003["s003-10"]
    perf = throughput.performance(run.spec, _layout(run), run.system, Settings())
    assert np.all(perf["optimizer_s"] < 0.01 * perf["step_time_s"])
