"""The ZeRO-3 leaf module of an MoE model's export: the class the plan fetched as one unit (planner/zero3.py
LEAF_BLOCK_STACKS), named where the launcher has a key for it, or a note where it has none.

A DeepSpeed ZeRO-3 plan of an MoE model assumes its Hugging Face MoE block is a ZeRO-3 leaf module (fetched whole:
deepspeed/utils/z3_leaf_module.py set_z3_leaf_modules, DeepSpeed PR #4966). accelerate sets it from the deepspeed_config
key `deepspeed_moe_layer_cls_names` (accelerate/commands/config/cluster.py writes it from "Specify the comma-separated
list of transformers MoE layer class names"; launch.py passes --deepspeed_moe_layer_cls_names as the env variable
ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES; utils/dataclasses.py DeepSpeedPlugin.set_moe_leaf_modules splits it on
commas, finds each class in the model and calls set_z3_leaf_modules, raising where a name is not in the model). A
DeepSpeed JSON has no such key (the call belongs in the training code): its export says so in a note.

`family` is the config's model_type (planner/hf_config.py), the catalog's presets too. The block class of each, as
transformers' modeling code names it (checked in huggingface/transformers src/transformers/models/*/modeling_*.py):
mixtral MixtralDecoderLayer.block_sparse_moe = MixtralSparseMoeBlock; qwen2_moe Qwen2MoeSparseMoeBlock; qwen3_moe
Qwen3MoeSparseMoeBlock; olmoe OlmoeSparseMoeBlock; granitemoe GraniteMoeDecoderLayer.block_sparse_moe = GraniteMoeMoE;
phimoe PhimoeSparseMoeBlock; gpt_oss GptOssDecoderLayer.mlp = GptOssMLP (router + experts); deepseek_v3 DeepseekV3MoE;
jamba JambaSparseMoeBlock; llama4_text Llama4TextMoe. deepseek_v2 is left out: its class is DeepseekV2MoE in one
transformers release and DeepseekV2Moe in another, and accelerate raises on a name the model lacks.
"""

from __future__ import annotations

from planner import moe
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan
from planner.zero3 import LEAF_BLOCK_STACKS

MOE_BLOCK_CLASS = {
    "mixtral": "MixtralSparseMoeBlock", "qwen2_moe": "Qwen2MoeSparseMoeBlock", "qwen3_moe": "Qwen3MoeSparseMoeBlock",
    "olmoe": "OlmoeSparseMoeBlock", "granitemoe": "GraniteMoeMoE", "phimoe": "PhimoeSparseMoeBlock",
    "gpt_oss": "GptOssMLP", "deepseek_v3": "DeepseekV3MoE", "jamba": "JambaSparseMoeBlock",
    "llama4_text": "Llama4TextMoe",
}
ACCELERATE_KEY = "deepspeed_moe_layer_cls_names"  # accelerate's deepspeed_config key (module header)


def applies(plan: ExecutionPlan, model: ModelSpec | None) -> bool:
    """A ZeRO-3 plan of an MoE model on a stack that fetches the MoE block as one leaf module."""
    return (model is not None and moe.is_moe(model) and plan.sharding == "zero3"
            and plan.stack in LEAF_BLOCK_STACKS)


def block_class(model: ModelSpec) -> str | None:
    """The transformers MoE block class of `model`'s family, None where not known."""
    return MOE_BLOCK_CLASS.get(model.family)


def accelerate_value(plan: ExecutionPlan, model: ModelSpec | None) -> str | None:
    """What the accelerate YAML's deepspeed_config writes under ACCELERATE_KEY (None: nothing)."""
    return block_class(model) if applies(plan, model) else None


def note(fmt: str, plan: ExecutionPlan, model: ModelSpec | None) -> str | None:
    """Where the file cannot name the leaf class: what the user's code must call."""
    if not applies(plan, model) or fmt not in ("deepspeed", "accelerate"):
        return None
    cls = block_class(model)
    if fmt == "accelerate" and cls is not None:
        return None
    what = cls or "your MoE block class"
    why = ("a DeepSpeed config has no key for it" if fmt == "deepspeed"
           else f"no transformers MoE block class is known for model family {model.family!r}, so the YAML "
                f"has no {ACCELERATE_KEY}")
    return (f"ZeRO-3 leaf module: the plan fetches each MoE block of {model.name} whole (one all-gather per layer); "
            f"{why}: call deepspeed.utils.set_z3_leaf_modules(model, [{what}]) before deepspeed.initialize, "
            "or ZeRO-3 fetches expert by expert (and may hang when ranks route differently)")
