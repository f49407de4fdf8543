"""The dtype every export writes for a plan's gradient reduction is the one its timing counted (planner/dp_comm.py
grad_bytes over the plan's stack profile, planner/grad_dtype.py): the fsdp stack (llm-foundry's PURE mixed precision,
fsdp_reduce_fp32 false) reduces in bf16, the bundled trainer and torchtitan in fp32; a mixed-precision ZeRO-0 plan,
timed as DDP under AMP, reduces in fp32 under DeepSpeed too."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from hardware.catalog import load_catalog
from plan_cli.main import app
from planner import dp_comm
from planner.exports import deepspeed_config
from planner.exports.fsdp_settings import fsdp_settings
from planner.layout import Layout
from planner.scenario import ExecutionPlan, Scenario
from tests.exports.deepspeed_parse import parse_with_deepspeed

TORCH = {"float32": 4.0, None: 2.0}  # FSDP2 reduce_dtype None: the 16-bit param_dtype


def _timed_bytes(plan: ExecutionPlan) -> float:
    prof = load_catalog().stacks[plan.stack]
    return float(dp_comm.grad_bytes(Layout.from_plan(plan), None, np.asarray([float(prof.fsdp_reduce_fp32)]))[0])


@pytest.mark.parametrize("stack", ["fsdp", "bundled", "torchtitan", "hf"])
@pytest.mark.parametrize("precision", ["bf16", "fp16", "bf16_pure"])
@pytest.mark.parametrize("dtype", ["default", "fp32", "bf16"])
def test_fsdp_export_reduces_in_the_dtype_the_plan_was_timed_with(stack, precision, dtype):
    plan = ExecutionPlan(dp=8, sharding="fsdp_full_shard", stack=stack, precision=precision, grad_reduce_dtype=dtype)
    written = fsdp_settings(plan)["mixed_precision"]["reduce_dtype"]
    assert TORCH[written] == _timed_bytes(plan), (stack, precision, dtype, written)


def test_the_fsdp_stack_reduces_in_bf16_and_the_bundled_trainer_keeps_fp32():
    mp = lambda stack: fsdp_settings(ExecutionPlan(dp=8, sharding="fsdp_full_shard", stack=stack))["mixed_precision"]  # noqa: E731
    assert mp("fsdp") == {"param_dtype": "bfloat16", "reduce_dtype": None}
    assert mp("bundled")["reduce_dtype"] == mp("torchtitan")["reduce_dtype"] == "float32"
    # the tuner's trials and the trainer build theirs from knobs, labelled as the bundled stack
    from planner.exports.fsdp_settings import settings_for_knobs
    trial = settings_for_knobs({"sharding": "fsdp_full_shard", "precision": "bf16"}, dp=2, seq_len=64, target="cpu")
    assert trial["mixed_precision"]["reduce_dtype"] == "float32"


def test_a_catalog_profile_decides(tmp_path):
    prof = load_catalog().stacks["fsdp"].model_copy(update={"fsdp_reduce_fp32": True})
    plan = ExecutionPlan(dp=8, sharding="fsdp_full_shard", stack="fsdp")
    assert fsdp_settings(plan, profile=prof)["mixed_precision"]["reduce_dtype"] == "float32"


def test_deepspeed_zero0_under_amp_reduces_in_fp32_as_timed(tmp_path):
    plans = [ExecutionPlan(dp=8, sharding="none", stack="hf"), ExecutionPlan(dp=8, sharding="zero2", stack="hf"),
             ExecutionPlan(dp=8, sharding="none", stack="hf", precision="fp16")]
    assert [_timed_bytes(p) for p in plans] == [4.0, 2.0, 4.0]
    configs = [deepspeed_config(p, target="cpu") for p in plans]
    got = parse_with_deepspeed(tmp_path, configs, '{"comm": str(c.communication_data_type)}')
    # DeepSpeed's own default (None: the bf16 compute dtype, engine.py communication_data_type) where that is it
    assert [g["comm"] for g in got] == ["torch.float32", "None", "torch.float32"]


def test_plan_export_fsdp_writes_bf16_for_the_fsdp_stack(tmp_path):
    out = tmp_path / "fsdp.json"
    r = CliRunner().invoke(app, ["export", "fsdp", "--model", "7b", "--gpus", "16", "--gpu", "h100-80gb",
                                 "--sharding", "fsdp_full_shard", "--stack", "fsdp", "--out", str(out)])
    assert r.exit_code == 0, r.output
    settings = json.loads(out.read_text())
    assert settings["plan"]["stack"] == "fsdp"
    assert settings["mixed_precision"]["reduce_dtype"] is None


def test_the_accelerate_export_says_when_it_cannot_write_the_planned_fp32_reduction():
    from planner.exports.bundle import Chosen, export
    from planner.resolve import resolve_system

    system = resolve_system(Scenario(model="7b", gpus=8, cluster="dgx-a100"))

    def said(stack: str, dtype: str = "default") -> bool:
        plan = ExecutionPlan(dp=8, sharding="fsdp_full_shard", stack=stack, grad_reduce_dtype=dtype)
        notes = export("accelerate", Chosen(plan=plan, model_ref="7b", system=system)).notes
        return any("accelerate's mixed_precision reduces in the 16-bit dtype" in n for n in notes)
    # accelerate's mixed_precision: bf16 reduces in bf16, what the hf and fsdp profiles time; not bundled's fp32
    assert (said("hf"), said("fsdp"), said("bundled"), said("bundled", "bf16"), said("hf", "fp32")) == (
        False, False, True, False, True)
