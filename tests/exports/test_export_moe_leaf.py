"""An hf ZeRO-3 plan of an MoE model fetches each MoE block as one leaf module (planner/zero3.py LEAF_BLOCK_STACKS):
the accelerate export names the block class (deepspeed_moe_layer_cls_names) and accelerate's own launch path and
DeepSpeedPlugin mark it a ZeRO-3 leaf in a model; a DeepSpeed JSON (no key for it) and unknown families get a note."""

from __future__ import annotations

import json

import pytest
import torch.nn as nn

from planner.exports.bundle import Chosen, export
from planner.exports.moe_leaf import MOE_BLOCK_CLASS
from planner.model import ModelSpec
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario

SYSTEM = resolve_system(Scenario(gpu="h100-80gb", gpus=16))
MIXTRAL = resolve_model("mixtral-8x7b")
CUSTOM = ModelSpec(name="my-moe", family="gpt", n_layers=2, hidden=64, n_heads=4, vocab=256, max_positions=64,
                   mlp="swiglu", bias=False, ffn_hidden=128, moe_experts=4, moe_top_k=2, moe_ffn_hidden=32)


def _plan(**kw) -> ExecutionPlan:
    return ExecutionPlan(**{"dp": 16, "seq_len": 2048, "micro_batch": 1, "sharding": "zero3", "stack": "hf", **kw})


def _export(fmt: str, model: ModelSpec, **kw):
    return export(fmt, Chosen(plan=_plan(**kw), model_ref=model.name, model=model, system=SYSTEM))


class MixtralSparseMoeBlock(nn.Module):  # the class name transformers gives Mixtral's MoE block
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(8, 4, bias=False)
        self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.Linear(8, 8)
        self.moe = MixtralSparseMoeBlock()


def test_accelerate_names_the_leaf_block_and_accelerate_marks_it_in_the_model(tmp_path, monkeypatch):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import DeepSpeedPlugin
    from accelerate.utils.launch import prepare_deepspeed_cmd_env
    from deepspeed.utils import z3_leaf_module

    out = _export("accelerate", MIXTRAL)
    files = {f.name: f.content for f in out.files}
    assert "deepspeed_moe_layer_cls_names: MixtralSparseMoeBlock" in files["accelerate.yaml"]
    assert not any("set_z3_leaf_modules" in n for n in out.notes)
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    yaml_text = files["accelerate.yaml"].replace("ds_config.json", str(tmp_path / "ds_config.json"))
    (tmp_path / "accelerate.yaml").write_text(yaml_text)

    # what `accelerate launch --config_file FILE train.py` does before it starts processes
    args = launch_command_parser().parse_args(["--config_file", str(tmp_path / "accelerate.yaml"), "train.py"])
    args, defaults, _ = _validate_launch_command(args)
    args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config.keys())
    _, env = prepare_deepspeed_cmd_env(args)
    assert env["ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES"] == "MixtralSparseMoeBlock"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    plugin = DeepSpeedPlugin()  # reads the exported JSON; the leaf class from the env, as Accelerator.prepare does
    assert plugin.zero_stage == 3
    net = Net()
    plugin.set_moe_leaf_modules(net)
    assert z3_leaf_module(net.moe) and not z3_leaf_module(net.attn)


def test_deepspeed_json_has_no_key_so_the_export_notes_the_call():
    out = _export("deepspeed", MIXTRAL)
    assert "moe_layer_cls" not in out.files[0].content
    assert any("set_z3_leaf_modules(model, [MixtralSparseMoeBlock])" in n for n in out.notes)


def test_a_family_without_a_known_block_class_gets_the_note_in_the_accelerate_export():
    out = _export("accelerate", CUSTOM)
    assert "deepspeed_moe_layer_cls_names" not in out.files[0].content
    assert any("set_z3_leaf_modules(model, [your MoE block class])" in n and "'gpt'" in n for n in out.notes)


@pytest.mark.parametrize("kw", [dict(sharding="zero2"), dict(stack="generic")])
def test_nothing_where_the_plan_assumes_no_leaf_module(kw):
    for fmt in ("accelerate", "deepspeed"):
        out = _export(fmt, MIXTRAL, **kw)
        assert "deepspeed_moe_layer_cls_names" not in out.files[0].content
        assert not any("set_z3_leaf_modules" in n for n in out.notes)
    dense = _export("accelerate", resolve_model("llama2-7b"))
    assert "deepspeed_moe_layer_cls_names" not in dense.files[0].content


def test_the_catalog_moe_presets_readable_families_have_a_class():
    """Every MoE preset whose family the planner reads from a config has its transformers block class (deepseek_v2 is
    left to the note: its class name differs between transformers releases)."""
    from planner.hf_moe import READ_TYPES

    assert set(READ_TYPES) <= set(MOE_BLOCK_CLASS)
    assert resolve_model("qwen3-30b-a3b").family == "qwen3_moe" and resolve_model("olmoe-1b-7b").family == "olmoe"
    assert json.loads(_export("deepspeed", MIXTRAL).files[0].content)["zero_optimization"]["stage"] == 3
