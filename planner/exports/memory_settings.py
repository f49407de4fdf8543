"""DeepSeek-V3's memory-saving switches (planner/memory_recipe.py: `plan estimate --recompute-norms-mla-up
--fp8-activation-cache --optimizer-moments-bf16`) in each export format, or a one-line refusal naming the switch
and the framework, so that no exported run keeps more memory than its plan said.

Megatron-LM, every flag checked in NVIDIA/Megatron-LM megatron/training/arguments.py (the 2025 file at commit
000c4ac24f61159c138b0975def722c65245983c, the one moe_routing.py cites):
- recompute_norms_mla_up: `_add_training_args` --recompute-granularity (choices full, selective: "selective:
  submodules set in --recompute-modules are recomputed, default is core_attn") and --recompute-modules (nargs '*':
  'choices: "core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"', '"layernorm":
  recompute the input_layernorm and pre_mlp_layernorm', '"mla_up_proj": recompute the MLA up projection and RoPE
  applying parts', both "output-discarding checkpointing"). A plan with selective recompute keeps core_attn in the
  list (Megatron's default, the planner's selective recompute); a plan without recompute gets layernorm (and
  mla_up_proj for an MLA model) alone; full recompute rebuilds every layer anyway: nothing to write, a note.
  validate_args: "recompute method is not yet supported for selective recomputing granularity" (none written).
- optimizer_moments_bf16: `_add_experimental_args`, "Args of precision-aware optimizer": --use-precision-aware-
  optimizer, --exp-avg-dtype and --exp-avg-sq-dtype (choices fp32, fp16, bf16, fp8); --main-grads-dtype and
  --main-params-dtype stay at their default fp32, as the recipe keeps masters and gradients.
  megatron/core/optimizer/optimizer_config.py OptimizerConfig.__post_init__ asserts "--use-precision-aware-optimizer
  only supported with adam" and "... only supported with distributed optimizer": other plans are refused.
- fp8_activation_cache: no flag. Megatron-Core's TransformerConfig has activation_func_fp8_input_store ("Store the
  input of MLP activation function in FP8 for backprop"), but arguments.py defines no argument for it
  (core_transformer_config_from_args copies only the fields args has), and nothing keeps o_proj's input in E5M6:
  refused.

DeepSpeed JSON (deepspeed 0.19.8, deepspeed/runtime/precision_config.py and config.py): bf16.bf16_optimizer_states
("Keep optimizer states in bf16 (only valid when bf16_master_weights_and_grads is enabled)"; config.py asserts
"bf16_optimizer_states requires bf16_master_weights_and_grads to be enabled") also makes the masters and gradients
BF16, not the recipe's FP32 ones: refused. The activation_checkpointing section (partition_activations,
cpu_checkpointing, contiguous_memory_optimization, number_checkpoints, synchronize_checkpoint_boundary, profile) has
no per-op recompute; no key stores activations in FP8.
FSDP2 settings (torch.distributed.fsdp MixedPrecisionPolicy: param_dtype, reduce_dtype, output_dtype,
cast_forward_inputs): no optimizer-state dtype (torch.optim.AdamW keeps its moments in the sharded parameter's
dtype), no recompute of single ops, no FP8 activations. accelerate: its DeepSpeed or FSDP section, as above.
torchrun / slurm: the bundled trainer (trainer/) has none of the three.
"""

from __future__ import annotations

from planner import mla
from planner.errors import PlanError
from planner.memory_recipe import MemoryRecipe
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan

FRAMEWORK = {"deepspeed": "DeepSpeed", "fsdp": "PyTorch FSDP2", "accelerate": "accelerate (DeepSpeed / FSDP2)",
             "torchrun": "the bundled trainer", "slurm": "the bundled trainer", "megatron": "Megatron-LM"}
_NO_KEY = {
    "recompute_norms_mla_up": "no setting recomputes the norms and MLA up-projections alone",
    "fp8_activation_cache": "no setting keeps the saved activations in FP8",
    "optimizer_moments_bf16": "no setting keeps AdamW's moments in BF16 with FP32 masters and gradients",
}
_WHY = {("deepspeed", "optimizer_moments_bf16"): ("bf16.bf16_optimizer_states requires bf16_master_weights_and_grads: "
                                                  "BF16 masters and gradients, not the planned FP32 ones"),
        ("fsdp", "optimizer_moments_bf16"): "MixedPrecisionPolicy has no optimizer-state dtype",
        ("megatron", "fp8_activation_cache"): ("megatron/training/arguments.py has no flag for it "
                                               "(TransformerConfig.activation_func_fp8_input_store is no argument)")}


def refusal(fmt: str, plan: ExecutionPlan, recipe: MemoryRecipe) -> PlanError | None:
    """Why `fmt` cannot write a switch of `recipe` for `plan` (None: it writes them all)."""
    for switch in recipe.given:
        if fmt == "megatron" and switch != "fp8_activation_cache":
            if switch == "optimizer_moments_bf16" and (why := _moments_refusal(plan)) is not None:
                return why
            continue
        why = _WHY.get((fmt, switch)) or _WHY.get(("deepspeed" if fmt == "accelerate" else fmt, switch)) \
            or _NO_KEY[switch]
        other = "" if switch == "fp8_activation_cache" else "export megatron, or "
        return PlanError(switch, f"{FRAMEWORK.get(fmt, fmt)} cannot write it: {why}; "
                         f"allowed: {other}plan without --{switch.replace('_', '-')}")
    return None


def _moments_refusal(plan: ExecutionPlan) -> PlanError | None:
    if plan.optimizer != "adamw":
        return PlanError("optimizer_moments_bf16", f"{plan.optimizer} has no Adam moments (Megatron-Core: "
                         "'--use-precision-aware-optimizer only supported with adam'); allowed: adamw plans")
    if plan.sharding != "zero1":
        return PlanError("optimizer_moments_bf16", "Megatron-Core's --use-precision-aware-optimizer is 'only supported "
                         "with distributed optimizer'; allowed: a zero1 plan (--sharding zero1)")
    if plan.precision not in ("bf16", "fp16", "fp8"):
        return PlanError("optimizer_moments_bf16", f"a {plan.precision} plan keeps no FP32 masters beside 16-bit "
                         "weights, the planner saved nothing; allowed: bf16, fp16 or fp8 plans")
    return None


def megatron_args(plan: ExecutionPlan, model: ModelSpec, recipe: MemoryRecipe,
                  notes: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(recompute flags replacing the plan's, optimizer flags) of the switches; a refusal raises."""
    if (why := refusal("megatron", plan, recipe)) is not None:
        raise why
    recompute: list[str] = []
    if recipe.recompute_norms_mla_up:
        modules = ["layernorm"] + (["mla_up_proj"] if mla.is_mla(model) else [])
        if plan.activation_checkpointing == "full":
            if notes is not None:
                notes.append("recompute_norms_mla_up: full recompute rebuilds every layer already (no --recompute-modules)")
        else:
            kept = ["core_attn"] if plan.activation_checkpointing == "selective" else []
            recompute = ["--recompute-granularity", "selective", "--recompute-modules", *kept, *modules]
    optimizer = (["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
                 if recipe.optimizer_moments_bf16 else [])
    return recompute, optimizer
