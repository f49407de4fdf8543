"""ZeRO++ in the DeepSpeed export: DeepSpeed's real `zero_optimization` keys, which DeepSpeed's own
config class (runtime/zero/config.py DeepSpeedZeroConfig, as installed) parses back to the plan's
values; a misspelled key is rejected by the same check (the test can fail); refusals name the knob."""

from __future__ import annotations

import json

import pytest

from planner.errors import PlanError
from planner.exports import deepspeed_config
from planner.scenario import ExecutionPlan
from tests.exports.deepspeed_parse import parse_with_deepspeed
from trainer.backends.deepspeed_backend import knobs_from_ds_config, refuse_zeropp_without_cuda

PLANS = [
    ExecutionPlan(sharding="zero3", dp=32, micro_batch=2, zeropp_qwz=True, zeropp_hpz_partition_size=8,
                  zeropp_qgz=True),
    ExecutionPlan(sharding="zero3", dp=16, zeropp_hpz_partition_size=4),
    ExecutionPlan(sharding="zero3", dp=16, zeropp_qwz=True, precision="fp16"),
    ExecutionPlan(sharding="zero3", dp=16, zeropp_qgz=True, offload="optimizer"),
]



def _parse_with_deepspeed(tmp_path, configs: list[dict]) -> list[dict]:
    return parse_with_deepspeed(tmp_path, configs, '{"stage": int(c.zero_config.stage), "qwz": '
                                'c.zero_config.zero_quantized_weights, "hpz": c.zero_config.zero_hpz_partition_size, '
                                '"qgz": c.zero_config.zero_quantized_gradients}')


def test_deepspeed_parses_the_exported_zeropp_keys(tmp_path):
    configs = [deepspeed_config(p) for p in PLANS]
    bad = json.loads(json.dumps(configs[0]))
    bad["zero_optimization"]["zero_quantised_weights"] = True  # not DeepSpeed's spelling
    parsed = _parse_with_deepspeed(tmp_path, configs + [bad])
    for plan, got in zip(PLANS, parsed):
        assert got == {"stage": 3, "qwz": plan.zeropp_qwz, "hpz": plan.zeropp_hpz_partition_size,
                       "qgz": plan.zeropp_qgz}, got
    assert "error" in parsed[-1] and "zero_quantised_weights" in parsed[-1]["error"]


def test_keys_only_for_features_turned_on_and_read_back():
    zero = deepspeed_config(PLANS[1])["zero_optimization"]
    assert zero["zero_hpz_partition_size"] == 4
    assert "zero_quantized_weights" not in zero and "zero_quantized_gradients" not in zero
    plain = deepspeed_config(ExecutionPlan(sharding="zero3", dp=16))["zero_optimization"]
    assert not any(k.startswith("zero_q") or k.startswith("zero_hpz") for k in plain)
    for plan in PLANS:  # a DeepSpeed config given to the trainer carries the plan's ZeRO++ knobs
        knobs = knobs_from_ds_config(deepspeed_config(plan), {})
        assert (knobs["zeropp_qwz"], knobs["zeropp_hpz_partition_size"], knobs["zeropp_qgz"]) == (
            plan.zeropp_qwz, plan.zeropp_hpz_partition_size, plan.zeropp_qgz)


@pytest.mark.parametrize("field, knobs", [
    ("zeropp_qwz", dict(zeropp_qwz=True)),
    ("zeropp_hpz_partition_size", dict(zeropp_hpz_partition_size=8)),
    ("zeropp_qgz", dict(zeropp_qgz=True)),
])
def test_refused_below_stage_3(field, knobs):
    with pytest.raises(PlanError) as e:
        deepspeed_config(ExecutionPlan(sharding="zero2", dp=16, **knobs))
    assert e.value.field == field and "zero3" in str(e.value)


def test_the_trainer_refuses_quantized_zeropp_without_cuda():
    conf = deepspeed_config(PLANS[0])
    with pytest.raises(PlanError) as e:
        refuse_zeropp_without_cuda(conf, on_gpu=False)
    assert e.value.field == "zeropp_qwz"
    refuse_zeropp_without_cuda(conf, on_gpu=True)
    refuse_zeropp_without_cuda(deepspeed_config(PLANS[1]), on_gpu=False)  # hpZ alone: no quantizer
