"""One FSDP settings builder (planner/exports/fsdp_settings.py) for the trainer's FSDP backend,
the tuner's FSDP trials and `plan export fsdp|accelerate`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from plan_cli.main import app
from planner.errors import PlanError
from planner.exports.accelerate import accelerate_config, to_yaml
from planner.exports.deepspeed_json import config_text
from planner.exports.fsdp_settings import fsdp_settings, knobs_of, settings_for_knobs
from planner.scenario import ExecutionPlan
from test_export_accelerate import system

KNOBS = [
    {"sharding": "fsdp_full_shard", "precision": "bf16", "activation_checkpointing": "full", "micro_batch": 2},
    {"sharding": "fsdp_shard_grad_op", "precision": "fp16", "offload": "optimizer+params", "grad_accum": 2},
    {"sharding": "fsdp_hybrid", "precision": "bf16_pure", "activation_checkpointing": "selective"},
    {"sharding": "fsdp_full_shard", "precision": "fp32", "optimizer": "sgd"},
]


@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: f"{k['sharding']}-{k['precision']}")
def test_trainer_builds_its_fsdp_settings_with_the_export_builder(knobs):
    from trainer.backends.fsdp import fsdp_settings_from_knobs, shard_kwargs  # imports torch
    from trainer.config import TrainConfig

    cfg = TrainConfig(model="tiny", nproc=2, seq_len=32, **knobs)
    ran = fsdp_settings_from_knobs(cfg, on_gpu=False)
    assert ran == settings_for_knobs(cfg.knobs(), dp=2, seq_len=32, target="cpu")
    assert {k: knobs_of(ran)[k] for k in knobs} == knobs  # the settings say every knob they run
    kw = shard_kwargs(ran)
    assert kw["reshard_after_forward"] is (knobs["sharding"] != "fsdp_shard_grad_op")
    assert ("mp_policy" in kw) is (knobs["precision"] in ("bf16", "fp16"))
    if knobs.get("offload") == "optimizer+params":
        assert kw["offload_policy"].pin_memory is False  # no pinned memory without a GPU
    assert ran["mesh"] == ({"replicate": 2, "shard": 1} if knobs["sharding"] == "fsdp_hybrid" else {"shard": 2})


def test_builder_needs_no_torch():
    code = ("import sys; from planner.exports.fsdp_settings import settings_for_knobs; "
            "settings_for_knobs({'sharding': 'fsdp_full_shard'}, dp=2, seq_len=8, target='cpu'); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: f"{k['sharding']}-{k['precision']}")
def test_accelerate_section_is_a_translation_of_the_settings(knobs):
    plan = ExecutionPlan(dp=16, **knobs)
    settings = fsdp_settings(plan, target="gpu", nodes=2)
    parsed = yaml.safe_load(to_yaml(accelerate_config(plan, system(16))))
    fsdp = parsed["fsdp_config"]
    assert fsdp["fsdp_reshard_after_forward"] is settings["reshard_after_forward"]
    assert fsdp["fsdp_offload_params"] is settings["offload_policy"]["offload_params"]
    assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == settings["transformer_layer_cls_to_wrap"]
    if "replicate" in settings["mesh"]:
        assert parsed["parallelism_config"]["parallelism_config_dp_replicate_size"] == settings["mesh"]["replicate"]
    # given settings (a trial's) win over a rebuild
    changed = settings | {"reshard_after_forward": not settings["reshard_after_forward"]}
    again = accelerate_config(plan, system(16), fsdp=changed)
    assert again["fsdp_config"]["fsdp_reshard_after_forward"] is changed["reshard_after_forward"]


def test_refusals_name_the_field():
    with pytest.raises(PlanError) as e:
        fsdp_settings(ExecutionPlan(dp=2, sharding="zero2"))
    assert e.value.field == "sharding"
    with pytest.raises(PlanError) as e:
        fsdp_settings(ExecutionPlan(dp=2, sharding="fsdp_full_shard", offload="optimizer"))
    assert e.value.field == "offload"
    with pytest.raises(PlanError) as e:
        knobs_of({"sharding_strategy": "NO_SHARD"})
    assert e.value.field == "fsdp_config"


def test_plan_export_fsdp_from_a_scenario(tmp_path):
    out = tmp_path / "fsdp.json"
    r = CliRunner().invoke(app, ["export", "fsdp", "--model", "tiny", "--gpus", "2", "--target", "cpu",
                                 "--sharding", "fsdp_shard_grad_op", "--precision", "bf16",
                                 "--offload", "optimizer+params", "--out", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    conf = json.loads(text)
    assert config_text(conf) == text and conf["sharding_strategy"] == "SHARD_GRAD_OP"
    assert conf["reshard_after_forward"] is False and conf["offload_policy"] == {"offload_params": True, "pin_memory": False}
    r = CliRunner().invoke(app, ["export", "fsdp", "--model", "tiny", "--gpus", "2", "--sharding", "zero1"])
    assert r.exit_code == 2 and "sharding" in r.output and "Traceback" not in r.output
