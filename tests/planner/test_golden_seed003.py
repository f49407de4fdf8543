"""Golden tests: seed 003 (bloom-7b1 with Hugging Face + DDP / FSDP / DeepSpeed on Jean Zay A100)
with the catalog's Jean Zay network, no bandwidth given by hand.

The seed: one node (8 GPUs) -> two nodes made each step ~4x slower (DDP: 350 -> 700 days per 100B
tokens; FSDP and ZeRO-1 "2x slower"), until gradient accumulation 256 amortised the exchange
(16 -> 32 -> 48 GPUs: 73 -> 36 days DDP, 57 -> 29 -> 19 days ZeRO-1). The catalog network is
4 x 100 Gb/s Omni-Path per node driven by NCCL over verbs (catalog/clusters/jean-zay-a100.toml).
"""

from pathlib import Path

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import profile_fit
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.runs import load_runs
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance
from planner.validate import validate

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"
BLOOM = resolve_model("bloom-7b1")
SEED_BAND = 0.40  # seed 002/003: one configuration varies +-40% between allocations on Jean Zay
DDP = dict(sharding="none", micro_batch=1, activation_checkpointing="full")  # rows s003-06/07
FSDP = dict(sharding="fsdp_full_shard", micro_batch=2, activation_checkpointing="none")  # s003-01/02
ZERO1 = dict(sharding="zero1", micro_batch=1, activation_checkpointing="none")  # s003-03


def _run(gpus: int, **plan):
    system = resolve_system(Scenario(cluster="jean-zay-a100", gpus=gpus))
    assert system.measured_internode_busbw_gbps is None  # the catalog's network, nothing by hand
    p = ExecutionPlan(**{"stack": "hf", "dp": gpus, "seq_len": 1024, **plan})
    out = performance(BLOOM, Layout.from_plan(p), system, Settings())
    return {k: np.asarray(v).reshape(-1)[0] for k, v in out.items()}


def test_catalog_network_is_the_published_one():
    system = resolve_system(Scenario(cluster="jean-zay-a100", gpus=16))
    assert system.internode_gbps == 400  # 4 Omni-Path links of 100 Gb/s (BigScience tr11 README)
    assert system.internode_efficiency == pytest.approx(0.30)  # NCCL over OPA verbs


@pytest.mark.parametrize("plan", [DDP, FSDP, ZERO1], ids=["ddp", "fsdp", "zero1"])
def test_two_nodes_without_accumulation_are_slower_than_one(plan):
    one, two = _run(8, **plan), _run(16, **plan)
    assert two["tokens_per_s"] < one["tokens_per_s"]
    assert two["bottleneck"] == "network"
    assert one["bottleneck"] == "compute"


@pytest.mark.parametrize("plan", [DDP, ZERO1], ids=["ddp", "zero1"])
def test_accumulation_256_scales_across_nodes(plan):
    acc = {**plan, "micro_batch": 2, "grad_accum": 256}
    g16, g32, g48 = (_run(n, **acc) for n in (16, 32, 48))
    assert g32["tokens_per_s"] / g16["tokens_per_s"] == pytest.approx(2.0, rel=0.05)
    assert g48["tokens_per_s"] / g16["tokens_per_s"] == pytest.approx(3.0, rel=0.05)
    assert g16["bottleneck"] == "compute"
    # seed: 16 GPUs with accumulation 256 ran 9.6x the tokens/s of 16 GPUs without (DDP rows)
    assert g16["tokens_per_s"] > 4 * _run(16, **plan)["tokens_per_s"]


@pytest.fixture(scope="module")
def seed_errors():
    """In-sample errors with the stack profiles fitted on today's data (what `python -m
    validation.fit_profiles --write` puts into catalog/stacks), so a change of how rows are read
    (planner/run_precision.py) is judged with the factors it leads to, not with stale ones. The seed
    log's fitted site factor (planner/site_effects.py: x step time of every row of the log) is applied
    as the fit and its cross-validation apply it."""
    runs = load_runs(DATA / "published_dev.csv") + load_runs(DATA / "seed_runs.csv")
    profiles, sites = profile_fit.fit_sites(runs, load_catalog().stacks)
    assert 1.0 < sites["seed003"] < 3.0  # a slower site, not orders of magnitude
    report = validate([r for r in runs if r.id.startswith("s003")], Settings(stacks=profiles))
    return {p.id: (1.0 + p.error) / sites["seed003"] - 1.0 for p in report.runs if p.error is not None}


def test_two_node_ddp_rows_inside_the_band(seed_errors):
    """s003-07 (DDP, 16 GPUs, no accumulation: 700 days) and s003-08 (same with PowerSGD, which
    the planner does not model: 500 days) were predicted 4x and 3x too fast with the old network;
    the accumulation rows (s003-10..16) must stay inside the band too."""
    rows = ["s003-07", "s003-08", "s003-10", "s003-11", "s003-13", "s003-14", "s003-15", "s003-16"]
    outside = {r: round(seed_errors[r], 2) for r in rows if abs(seed_errors[r]) > SEED_BAND}
    assert not outside, outside


def test_single_node_rows_inside_the_band_with_a_per_step_overhead(seed_errors):
    """s003-01/03/05/06 (one node, no accumulation: 23-30 TFLOPs/GPU) were 40-100% too fast while the
    fit had no per-optimizer-step time; the hf profile's fitted step_overhead_s brings them inside."""
    rows = ["s003-01", "s003-03", "s003-05", "s003-06"]
    outside = {r: round(seed_errors[r], 2) for r in rows if abs(seed_errors[r]) > SEED_BAND}
    assert not outside, outside
