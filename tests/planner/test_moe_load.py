"""The MoE capacity factor as a plan setting (Settings.moe_capacity_factor, `plan estimate
--moe-capacity-factor`): padded to capacity, every expert runs capacity x the mean rows in its GEMMs,
all-to-alls and saved activations; dropless (None), the busiest rank runs LOAD_IMBALANCE x the mean
(planner/moe_time.py load_factor)."""

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import memory, moe_time, throughput
from planner.layout import Layout
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from tests.planner.moe_models import MIXTRAL_8X7B

CATALOG = load_catalog()
SYSTEM = resolve_system(Scenario(gpu="h100-80gb", gpus=64), CATALOG)
LAYOUT = Layout.from_plan(ExecutionPlan(tp=1, dp=64, ep=8, sharding="zero1", activation_checkpointing="none",
                                        micro_batch=1, grad_accum=4, seq_len=4096))


def _run(capacity):
    settings = Settings(stacks=CATALOG.stacks, moe_capacity_factor=capacity)
    perf = throughput.performance(MIXTRAL_8X7B, LAYOUT, SYSTEM, settings)
    mem = memory.memory_arrays(MIXTRAL_8X7B, LAYOUT, SYSTEM, settings)
    keys = ("moe_a2a_s", "moe_compute_s", "tokens_per_s", "activations_bytes", "total_bytes")
    return {k: float(np.asarray({**perf, **mem}[k]).reshape(-1)[0]) for k in keys}


def test_load_factor_is_the_capacity_or_the_dropless_imbalance():
    assert moe_time.load_factor(Settings()) == moe_time.LOAD_IMBALANCE == 1.25
    assert moe_time.load_factor(Settings(moe_capacity_factor=2.0)) == 2.0
    assert moe_time.load_factor(None) == 1.25


def test_padded_capacity_scales_all_to_alls_gemms_and_saved_tokens():
    dropless, c1, c2 = _run(None), _run(1.0), _run(2.0)
    # the all-to-all carries the padded buffers: bytes x 2 / 1 (latency aside)
    assert c2["moe_a2a_s"] / c1["moe_a2a_s"] == pytest.approx(2.0, rel=0.02)
    assert c1["moe_a2a_s"] < dropless["moe_a2a_s"] < c2["moe_a2a_s"]
    assert c1["moe_compute_s"] < dropless["moe_compute_s"] < c2["moe_compute_s"]
    assert c1["activations_bytes"] < dropless["activations_bytes"] < c2["activations_bytes"]
    assert c1["tokens_per_s"] > dropless["tokens_per_s"] > c2["tokens_per_s"]
    # what differs in memory is the routed copies (dispatched; the megatron stack applies the probs inside
    # the activation and keeps no expert output: moe_expert_outputs_kept = 0) and the dispatch buffers
    slots = 4096 * 2 * 4096 * 2  # tokens x top-2 x hidden x bf16
    extra = (2.0 - 1.0) * slots * (32 + 2)  # 32 MoE layers x 1 tensor saved, 2 buffers
    assert c2["total_bytes"] - c1["total_bytes"] == pytest.approx(extra, rel=0.01)


def test_cli_bad_capacity_factor_exits_2():
    from typer.testing import CliRunner

    from plan_cli.main import app

    args = ["estimate", "--gpu", "h100-80gb", "--gpus", "64", "--model", "mixtral-8x7b", "--moe-capacity-factor", "0"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "moe_capacity_factor" in result.output and "allowed: a number > 0" in result.output


def test_node_limit_cuts_the_all_to_all_only_across_nodes():
    def a2a(limit, **knobs):
        lay = Layout.from_plan(ExecutionPlan(**{**dict(tp=1, dp=64, ep=8, etp=1, seq_len=4096, sharding="zero1",
                                                     micro_batch=1, grad_accum=4), **knobs}))
        s = Settings(stacks=CATALOG.stacks, moe_node_limit=limit)
        return float(np.asarray(throughput.performance(MIXTRAL_8X7B, lay, SYSTEM, s)["moe_a2a_s"]).reshape(-1)[0])

    assert a2a(1) == pytest.approx(a2a(None))  # ep 8 inside a node: nothing crosses a NIC
    # tp 2 x ep 8 x etp 2: the ep group spans 2 nodes; a token's 2 experts on 1 node: 0.5 NIC copies, not 2 x 4/7
    spans = dict(tp=2, dp=32, ep=8, etp=2, sequence_parallel=True)
    assert a2a(1, **spans) < 0.6 * a2a(None, **spans)


def test_moe_check_prints_the_comparisons_and_shares():
    """validation/moe_check.py: every cited micro-benchmark row with the model beside it, and the
    time shares of the two plans (the DeepSeek-V3-like one flat and node-limited)."""
    from validation import moe_check

    text = moe_check.report()
    assert text.count("of the step") == 3 * 4
    assert "DeepGEMM" in text and "DeepEP" in text and "node_limit 4" in text
    a2a = [float(line.split()[2]) for line in text.splitlines() if line.strip().startswith("expert all-to-all")]
    flat, limited = a2a[1], a2a[2]
    assert limited < 0.5 * flat
