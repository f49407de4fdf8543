"""The DeepSpeed JSON and FSDP settings of a trainer run or a tuner trial name the stack that ran
them: the bundled trainer (they said "megatron", ExecutionPlan's default)."""

import json

from planner.exports.deepspeed_json import config_for_knobs, knobs_plan
from planner.exports.fsdp_settings import settings_for_knobs
from planner.resolve import resolve_model
from planner.scenario import Scenario
from tuner.trial import deepspeed_json, fsdp_json

KNOBS = {"sharding": "zero2", "activation_checkpointing": "full", "precision": "fp32", "micro_batch": 2, "grad_accum": 2}


def test_trainer_and_trial_deepspeed_configs_say_bundled():
    spec = resolve_model(Scenario(model="tiny"))
    assert knobs_plan(KNOBS, dp=2, seq_len=32, model=spec).stack == "bundled"
    assert config_for_knobs(KNOBS, dp=2, seq_len=32, model=spec, target="cpu")["plan"]["stack"] == "bundled"
    text = deepspeed_json(KNOBS, dp=2, seq_len=32, model=spec, on_gpu=False)
    assert json.loads(text)["plan"]["stack"] == "bundled"
    # knobs that name a stack keep it
    assert knobs_plan(KNOBS | {"stack": "hf"}, dp=2, seq_len=32, model=spec).stack == "hf"


def test_trainer_and_trial_fsdp_settings_say_bundled():
    knobs = KNOBS | {"sharding": "fsdp_full_shard"}
    assert settings_for_knobs(knobs, dp=2, seq_len=32, target="cpu")["plan"]["stack"] == "bundled"
    assert json.loads(fsdp_json(knobs, dp=2, seq_len=32, on_gpu=False))["plan"]["stack"] == "bundled"
