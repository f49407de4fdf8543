"""An `ExecutionPlan` as a DeepSpeed JSON config (the dict `deepspeed.initialize` takes).

Key names follow DeepSpeed's config reference (deepspeed.ai/docs/config-json); the tests
validate every combination with `deepspeed.runtime.config.DeepSpeedConfig`.
"""

from __future__ import annotations

import json
from typing import Any

from hardware.stacks import StackProfile
from planner import grad_dtype
from planner.errors import PlanError
from planner.exports.common import Recipe, Target, check_target, is_fsdp, run_fields
from planner.exports.cp_settings import deepspeed_keys
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan

ZERO_STAGE = {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3}


def deepspeed_config(
    plan: ExecutionPlan,
    *,
    target: Target = "gpu",
    recipe: Recipe | None = None,
    model: ModelSpec | None = None,
    profile: StackProfile | None = None,
) -> dict[str, Any]:
    """The DeepSpeed config for `plan` on `plan.dp` data-parallel ranks (`profile`: the stack profile it was timed
    with, None: the built-in catalog's for plan.stack; its gradient reduction dtype: planner/grad_dtype.py).

    `train_batch_size = micro_batch * grad_accum * dp` (DeepSpeed asserts exactly this, with
    dp the data-parallel world size its mpu reports, the world size without one).
    """
    target = check_target(target)
    recipe = recipe or Recipe()
    _check_plan(plan)
    cp_keys = deepspeed_keys(plan)  # Ulysses: sequence_parallel_size; other cp_impls refused
    config: dict[str, Any] = {
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "gradient_clipping": recipe.grad_clip,
        "steps_per_print": 100,
        "wall_clock_breakdown": False,
        "zero_optimization": zero_section(plan, target, model),
        "optimizer": optimizer_section(plan, target, recipe),
        **precision_sections(plan),
        **grad_reduce_keys(plan, profile),
        **cp_keys,
    }
    scheduler = scheduler_section(recipe)
    if scheduler is not None:
        config["scheduler"] = scheduler
    if plan.offload != "none" and plan.optimizer != "adamw":
        # ZeRO-Offload insists on DeepSpeedCPUAdam unless told the torch optimizer is wanted.
        config["zero_force_ds_cpu_optimizer"] = False
    if plan.optimizer != "adamw" and ZERO_STAGE[plan.sharding] > 0:
        # ZeRO refuses optimizers it has not tested (torch.optim.SGD/Adafactor) without this
        config["zero_allow_untested_optimizer"] = True
    if plan.activation_checkpointing != "none":
        config["activation_checkpointing"] = checkpointing_section(plan)
    # Unknown top-level keys are ignored by DeepSpeed: the plan travels with its config, so
    # the bundled trainer (and a reader) knows the knobs DeepSpeed itself has no key for.
    config["plan"] = plan.model_dump(mode="json")
    return config


def auto_buckets(hidden: int) -> dict[str, int]:
    """Hugging Face's "auto" DeepSpeed bucket sizes (hidden^2 elements), as the planner's search
    sizes them: a measured run and its prediction hold the same buffers (DeepSpeed's 5e8
    default would allocate GBs even for the tiny model)."""
    h2 = hidden * hidden
    return {"reduce_bucket_elems": h2, "allgather_bucket_elems": h2, "stage3_prefetch_elems": int(0.9 * h2)}


def knobs_plan(knobs: dict[str, Any], *, dp: int, seq_len: int, model: ModelSpec) -> ExecutionPlan:
    """The `ExecutionPlan` a trainer run or a tuner trial with these knobs executes."""
    return ExecutionPlan(dp=dp, seq_len=seq_len, **(auto_buckets(model.hidden) | run_fields(knobs)))


def config_for_knobs(knobs: dict[str, Any], *, dp: int, seq_len: int, model: ModelSpec,
                     target: Target, recipe: Recipe | None = None) -> dict[str, Any]:
    """THE DeepSpeed config of a run: the trainer (`plan train --sharding zeroN`), the tuner's
    trials and `plan export` all build theirs here, so what is measured is what is exported."""
    return deepspeed_config(knobs_plan(knobs, dp=dp, seq_len=seq_len, model=model),
                            target=target, recipe=recipe, model=model)


def config_text(config: dict[str, Any]) -> str:
    """A config as the file it is written to (trials store this text; exports write it)."""
    return json.dumps(config, indent=2) + "\n"


def _check_plan(plan: ExecutionPlan) -> None:
    if is_fsdp(plan):
        raise PlanError(
            "sharding",
            f"{plan.sharding} is a PyTorch FSDP plan; export it with `plan export fsdp` (over HTTP: "
            "/export/STUDY/fsdp), `plan export accelerate` or `plan export torchrun` (DeepSpeed takes none, zero1, "
            "zero2, zero3)",
        )
    stage = ZERO_STAGE[plan.sharding]
    if plan.offload != "none" and stage == 0:
        raise PlanError("offload", f"offload={plan.offload} needs ZeRO sharding (zero1, zero2 or zero3)")
    if plan.offload == "optimizer+params" and stage != 3:
        raise PlanError("offload", "offload=optimizer+params needs sharding=zero3 (DeepSpeed offloads parameters only in stage 3)")
    if plan.pp > 1 and stage >= 2:
        raise PlanError("pp", f"DeepSpeed pipeline parallelism supports ZeRO stage 0 or 1, not {plan.sharding}")
    if stage != 3:
        for field, on in (("zeropp_qwz", plan.zeropp_qwz), ("zeropp_hpz_partition_size", plan.zeropp_hpz_partition_size > 1),
                          ("zeropp_qgz", plan.zeropp_qgz)):
            if on:
                raise PlanError(field, f"ZeRO++ changes ZeRO-3's collectives: needs sharding zero3, not {plan.sharding}")
    if plan.precision == "bf16_pure" and stage == 0:
        raise PlanError("precision", "bf16_pure under DeepSpeed needs ZeRO (bf16 master weights are a ZeRO option)")


def zero_section(plan: ExecutionPlan, target: Target, model: ModelSpec | None) -> dict[str, Any]:
    stage = ZERO_STAGE[plan.sharding]
    zero: dict[str, Any] = {"stage": stage}
    if stage == 0:
        return zero
    pin = target == "gpu"  # pinned host memory needs a GPU driver; on a CPU target it fails
    zero |= {
        # overlap_comm runs reductions on a side CUDA stream; a CPU has none to overlap with
        "overlap_comm": target == "gpu",
        "contiguous_gradients": stage >= 2,
        "reduce_scatter": True,
        "reduce_bucket_size": plan.reduce_bucket_elems,
    }
    if stage in (1, 2):
        zero |= {"allgather_partitions": True, "allgather_bucket_size": plan.allgather_bucket_elems}
    if stage == 3:
        zero |= {
            "stage3_prefetch_bucket_size": plan.stage3_prefetch_elems,
            "stage3_max_live_parameters": plan.stage3_max_live_params,
            "stage3_max_reuse_distance": plan.stage3_max_live_params,
            "stage3_gather_16bit_weights_on_model_save": True,
        }
        zero |= zeropp_keys(plan)
        if model is not None:
            # HF transformers' "auto" rule: keep tensors below 10*hidden elements unsharded
            zero["stage3_param_persistence_threshold"] = 10 * model.hidden
    if plan.offload in ("optimizer", "optimizer+params"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
    if plan.offload == "optimizer+params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
    return zero


def zeropp_keys(plan: ExecutionPlan) -> dict[str, Any]:
    """ZeRO++'s keys of `zero_optimization` (DeepSpeed runtime/zero/config.py DeepSpeedZeroConfig;
    the ZeRO++ tutorial), written only for the features the plan turns on."""
    keys: dict[str, Any] = {}
    if plan.zeropp_qwz:
        keys["zero_quantized_weights"] = True
    if plan.zeropp_hpz_partition_size > 1:
        keys["zero_hpz_partition_size"] = plan.zeropp_hpz_partition_size
    if plan.zeropp_qgz:
        keys["zero_quantized_gradients"] = True
    return keys


def precision_sections(plan: ExecutionPlan) -> dict[str, Any]:
    if plan.precision == "fp16":
        # dynamic loss scaling (loss_scale 0), DeepSpeed's documented defaults
        return {"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                         "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}}
    if plan.precision == "bf16":
        return {"bf16": {"enabled": True}}
    if plan.precision == "bf16_pure":
        # no fp32 master copy: weights, grads and Adam moments all in bf16
        return {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True,
                         "bf16_optimizer_states": True}}
    return {}


def grad_reduce_keys(plan: ExecutionPlan, profile: StackProfile | None = None) -> dict[str, Any]:
    """The dtype the plan's gradients are reduced in (planner/grad_dtype.py: its grad_reduce_dtype, "default"
    resolved by the stack profile as its timing counts it) in DeepSpeed's keys; none where DeepSpeed's own default,
    the 16-bit compute dtype, is that dtype. `communication_data_type` (fp32/fp16/bf16) is the dtype of the gradient
    reduction (deepspeed runtime/config.py get_communication_data_type; engine.py communication_data_type falls back
    to fp16/bf16), e.g. fp32 for a mixed-precision ZeRO-0 plan, timed as DDP under AMP (4 bytes a gradient); fp32
    under bf16 ZeRO-1 asked for by the plan also accumulates the gradients in fp32 (`data_types.grad_accum_dtype`:
    engine.py _do_optimizer_sanity_check picks the BF16_Optimizer, which keeps fp32 gradients, only for bf16 + fp32
    on stage 1 without offload; stage 0 refuses the mix). An fp32 plan's gradients are fp32 whatever it says."""
    if plan.precision == "fp32":
        return {}
    if plan.grad_reduce_dtype == "default":
        if grad_dtype.reduce_dtype(plan, profile) != "fp32":
            return {}
        return {"communication_data_type": "fp32"}
    if plan.grad_reduce_dtype == "bf16":
        return {"communication_data_type": "fp16" if plan.precision == "fp16" else "bf16"}
    keys: dict[str, Any] = {"communication_data_type": "fp32"}
    if plan.precision == "bf16" and plan.sharding == "zero1" and plan.offload == "none":
        keys["data_types"] = {"grad_accum_dtype": "fp32"}
    return keys


def optimizer_section(plan: ExecutionPlan, target: Target, recipe: Recipe) -> dict[str, Any]:
    if plan.optimizer == "adamw":
        params: dict[str, Any] = {"lr": recipe.lr, "betas": [recipe.beta1, recipe.beta2],
                                  "eps": recipe.eps, "weight_decay": recipe.weight_decay}
        if target == "cpu" and plan.offload == "none":
            # torch's AdamW instead of FusedAdam: no CUDA kernel to JIT-compile on a CPU
            params["torch_adam"] = True
        return {"type": "AdamW", "params": params}
    if plan.optimizer == "adafactor":  # torch.optim.Adafactor (DeepSpeed falls back to torch.optim)
        return {"type": "Adafactor", "params": {"lr": recipe.lr, "weight_decay": recipe.weight_decay}}
    assert plan.optimizer == "sgd", plan.optimizer
    return {"type": "SGD", "params": {"lr": recipe.lr, "momentum": recipe.momentum,
                                      "weight_decay": recipe.weight_decay}}


def scheduler_section(recipe: Recipe) -> dict[str, Any] | None:
    """None (constant learning rate) without warm-up or a step count: DeepSpeed's WarmupLR
    rejects warmup_num_steps=0."""
    if recipe.steps is None and recipe.warmup_steps == 0:
        return None
    if recipe.steps is None:
        return {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": recipe.lr,
                                               "warmup_num_steps": recipe.warmup_steps,
                                               "warmup_type": "linear"}}
    warmup = min(recipe.warmup_steps, recipe.steps)
    return {"type": "WarmupCosineLR", "params": {
        "total_num_steps": recipe.steps, "warmup_num_steps": warmup,
        "warmup_min_ratio": 0.0, "cos_min_ratio": recipe.min_lr_ratio, "warmup_type": "linear"}}


def checkpointing_section(plan: ExecutionPlan) -> dict[str, Any]:
    """DeepSpeed's activation-checkpointing API settings (used by Megatron-style models).

    `partition_activations` splits the saved inputs across tensor-parallel ranks;
    `cpu_checkpointing` (the plan's activation_offload) keeps them in host memory.
    """
    return {
        "partition_activations": plan.tp > 1 or plan.activation_offload,
        "cpu_checkpointing": plan.activation_offload,
        "contiguous_memory_optimization": False,
        "number_checkpoints": None,
        "synchronize_checkpoint_boundary": False,
        "profile": False,
    }
