"""Per-unit overhead of parameter-sharding wrappers (FSDP, ZeRO-3): planner/shard_units.py, `unit_overhead_us`."""

import numpy as np
import pytest

from hardware.catalog import CatalogError, load_catalog
from hardware.stacks import StackProfile, profile_to_toml
from planner import profile_fit, shard_units
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings, stack_profiles
from planner.throughput import performance

BLOOM = resolve_model("bloom-7b1")


def _perf(unit_us: float, stack="fsdp", **plan_kw):
    plan = ExecutionPlan(**{"stack": stack, "sharding": "fsdp_full_shard", "dp": 8, "micro_batch": 1,
                            "grad_accum": 4, "activation_checkpointing": "full", "seq_len": 2048, **plan_kw})
    profiles = dict(stack_profiles(Settings()))
    profiles[stack] = profiles[stack].model_copy(update={"unit_overhead_us": unit_us})
    system = resolve_system(Scenario(cluster="jean-zay-a100", gpus=plan.tp * plan.pp * plan.dp))
    perf = performance(BLOOM, Layout.from_plan(plan), system, Settings(stacks=profiles))
    return {k: np.asarray(v).reshape(-1)[0] for k, v in perf.items()}


@pytest.mark.parametrize("sharding", ["none", "zero1", "zero2"])
def test_zero_for_layouts_that_keep_whole_parameters(sharding):
    stack = "megatron_deepspeed" if sharding != "none" else "megatron"
    p = _perf(500.0, stack=stack, sharding=sharding)
    assert p["raw_unit_overhead_s"] == 0.0
    assert p["step_time_s"] == _perf(0.0, stack=stack, sharding=sharding)["step_time_s"]


@pytest.mark.parametrize("sharding", ["zero3", "fsdp_full_shard", "fsdp_shard_grad_op", "fsdp_hybrid"])
def test_units_times_micro_batches_where_parameters_are_gathered_per_unit(sharding):
    stack = "hf" if sharding == "zero3" else "fsdp"
    for ga in (1, 4):
        p = _perf(0.0, stack=stack, sharding=sharding, grad_accum=ga)
        assert p["raw_unit_overhead_s"] == pytest.approx(ga * BLOOM.n_layers * 1e-6)
    # the fitted microseconds add units x micro batches x us to the busy time (and its share of no bubble: pp 1)
    a, b = _perf(0.0, stack=stack, sharding=sharding), _perf(300.0, stack=stack, sharding=sharding)
    assert b["step_time_s"] - a["step_time_s"] == pytest.approx(4 * BLOOM.n_layers * 300e-6, rel=1e-6)


def test_units_are_the_busiest_stages_blocks():
    one = _perf(0.0, stack="megatron_deepspeed", sharding="zero3", pp=1)
    two = _perf(0.0, stack="megatron_deepspeed", sharding="zero3", pp=2)
    assert one["raw_unit_overhead_s"] == pytest.approx(4 * BLOOM.n_layers * 1e-6)
    assert two["raw_unit_overhead_s"] == pytest.approx(4 * np.ceil(BLOOM.n_layers / 2) * 1e-6)


def test_gathers_per_unit_is_vectorised():
    plans = [ExecutionPlan(stack="fsdp", sharding=s, dp=8) for s in ("none", "fsdp_full_shard")]
    assert shard_units.gathers_per_unit(Layout.from_plans(plans)).tolist() == [0.0, 1.0]


def test_a_fitted_profile_field_read_from_the_catalog(tmp_path):
    assert "unit_overhead_us" in [p[0] for p in profile_fit.PARAMS]
    assert all(p.unit_overhead_us >= 0 for p in load_catalog().stacks.values())
    (tmp_path / "stacks").mkdir()
    mine = StackProfile(id="mystack", name="mine", unit_overhead_us=123.0)
    (tmp_path / "stacks" / "mystack.toml").write_text(profile_to_toml(mine))
    assert load_catalog([tmp_path]).stacks["mystack"].unit_overhead_us == 123.0
    (tmp_path / "stacks" / "mystack.toml").write_text(profile_to_toml(mine).replace("= 123.0", "= -1.0"))
    with pytest.raises(CatalogError):
        load_catalog([tmp_path])
