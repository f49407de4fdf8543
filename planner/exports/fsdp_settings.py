"""THE FSDP2 settings of a run: the trainer's FSDP backend (`plan train --sharding fsdp_*`),
the tuner's FSDP trials (stored on each trial as `fsdp_config_json`) and `plan export
fsdp|accelerate` all build theirs here, so what is measured is what is exported.

The settings are a JSON document in torch FSDP2 terms (`fully_shard` arguments), no torch
import: sharding strategy and `reshard_after_forward`, the device mesh, the
`MixedPrecisionPolicy` dtypes, the `CPUOffloadPolicy`, activation checkpointing and the wrap
policy (one `fully_shard` per transformer block, then the root). accelerate's `fsdp_config`
section is a translation of this document (`accelerate_fsdp_section`).
"""

from __future__ import annotations

from typing import Any

from hardware.stacks import StackProfile
from planner import grad_dtype
from planner.errors import PlanError
from planner.exports.common import Target, check_target, is_fsdp, run_fields
from planner.scenario import ExecutionPlan

FSDP_FILE = "fsdp_config.json"
STRATEGY = {"fsdp_full_shard": "FULL_SHARD", "fsdp_shard_grad_op": "SHARD_GRAD_OP", "fsdp_hybrid": "HYBRID_SHARD"}
# torch dtype names (`getattr(torch, name)`); None: the policy leaves that dtype alone
PARAM_DTYPE = {"fp32": None, "fp16": "float16", "bf16": "bfloat16", "bf16_pure": None}
BLOCK_CLS = "Block"  # the bundled trainer's transformer block (trainer/model.py)


def fsdp_settings(plan: ExecutionPlan, *, target: Target = "gpu", nodes: int = 1,
                  block_cls: str = BLOCK_CLS, profile: StackProfile | None = None) -> dict[str, Any]:
    """The FSDP2 settings of `plan` over `plan.dp` data-parallel ranks on `nodes` nodes; `profile`: the stack
    profile the plan was timed with (None: the built-in catalog's for plan.stack), whose reduction dtype it writes."""
    target = check_target(target)
    if not is_fsdp(plan):
        # an FSDP study's space holds "none" (plain data parallel): its winner may shard nothing
        plain = (": it shards nothing (plain data parallel, as DDP runs it) and needs no FSDP settings; the "
                 "deepspeed export writes it as ZeRO stage 0") if plan.sharding == "none" else ""
        raise PlanError("sharding", f"{plan.sharding} is not an FSDP plan (FSDP settings take fsdp_full_shard, "
                        f"fsdp_shard_grad_op, fsdp_hybrid){plain}")
    if plan.offload == "optimizer":
        raise PlanError("offload", "FSDP offloads parameters, gradients and optimizer state together: "
                        "use offload=optimizer+params or none")
    offload = plan.offload == "optimizer+params"
    return {
        "fsdp_version": 2,
        "sharding_strategy": STRATEGY[plan.sharding],
        # FULL_SHARD / HYBRID_SHARD free the gathered parameters after forward (ZeRO-3-like);
        # SHARD_GRAD_OP keeps them until backward (ZeRO-2-like)
        "reshard_after_forward": plan.sharding != "fsdp_shard_grad_op",
        "mesh": _mesh(plan, nodes),
        "mixed_precision": {"param_dtype": PARAM_DTYPE[plan.precision], "reduce_dtype": _reduce_dtype(plan, profile)},
        # bf16_pure: the parameters themselves are bf16 (no fp32 master copy)
        "model_dtype": "bfloat16" if plan.precision == "bf16_pure" else "float32",
        "grad_scaler": plan.precision == "fp16",
        # pinned host memory needs an accelerator driver; on a CPU target it fails
        "offload_policy": {"offload_params": offload, "pin_memory": offload and target == "gpu"},
        "activation_checkpointing": plan.activation_checkpointing,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "transformer_layer_cls_to_wrap": block_cls,
        # the plan travels with its settings: a reader (and the trainer) knows every knob
        "plan": plan.model_dump(mode="json"),
    }


def _reduce_dtype(plan: ExecutionPlan, profile: StackProfile | None) -> str | None:
    """MixedPrecisionPolicy.reduce_dtype: float32 where the plan's timing reduces fp32 gradients (planner/grad_dtype.py:
    the plan's grad_reduce_dtype, "default" resolved by its stack profile's fsdp_reduce_fp32: the bundled trainer and
    torchtitan reduce in fp32, llm-foundry's PURE mixed precision in bf16); None otherwise (torch: "if reduce_dtype is
    None ... uses param_dtype", torch/distributed/fsdp/_fully_shard/_fsdp_api.py); an fp32 plan's gradients stay fp32."""
    if plan.precision == "fp32":
        return None
    return "float32" if grad_dtype.reduce_dtype(plan, profile) == "fp32" else None


def settings_for_knobs(knobs: dict[str, Any], *, dp: int, seq_len: int, target: Target,
                       nodes: int = 1) -> dict[str, Any]:
    """THE FSDP settings of a trainer run or a tuner trial with these knobs."""
    return fsdp_settings(ExecutionPlan(dp=dp, seq_len=seq_len, **run_fields(knobs)), target=target, nodes=nodes)


def _mesh(plan: ExecutionPlan, nodes: int) -> dict[str, int]:
    if plan.sharding != "fsdp_hybrid":
        return {"shard": plan.dp}
    # replicate across nodes, shard within a node; on one node the ranks split in two groups
    replicate = nodes if nodes > 1 else 2
    if plan.dp % replicate or plan.dp < 2:
        raise PlanError("sharding", f"fsdp_hybrid needs a data-parallel size divisible by {replicate} (got {plan.dp})")
    return {"replicate": replicate, "shard": plan.dp // replicate}


def knobs_of(settings: dict[str, Any]) -> dict[str, Any]:
    """The planner knobs a settings document runs (what `plan` carries, then what the FSDP
    sections themselves say, which win)."""
    plan = dict(settings.get("plan") or {})
    strategy = {v: k for k, v in STRATEGY.items()}.get(settings.get("sharding_strategy", ""))
    if strategy is None:
        raise PlanError("fsdp_config", f"sharding_strategy {settings.get('sharding_strategy')!r} "
                        f"(allowed: {', '.join(STRATEGY.values())})")
    mp = settings.get("mixed_precision") or {}
    precision = {"float16": "fp16", "bfloat16": "bf16"}.get(mp.get("param_dtype") or "", "fp32")
    if precision == "fp32" and settings.get("model_dtype") == "bfloat16":
        precision = "bf16_pure"
    offload = "optimizer+params" if (settings.get("offload_policy") or {}).get("offload_params") else "none"
    return plan | {"sharding": strategy, "precision": precision, "offload": offload,
                   "activation_checkpointing": settings.get("activation_checkpointing", "none")}


def accelerate_fsdp_section(settings: dict[str, Any]) -> dict[str, Any]:
    """accelerate's `fsdp_config` keys for these settings (accelerate checkpoints whole
    blocks: selective checkpointing is written as on)."""
    return {
        "fsdp_version": settings["fsdp_version"],
        "fsdp_reshard_after_forward": settings["reshard_after_forward"],
        "fsdp_auto_wrap_policy": settings["auto_wrap_policy"],
        "fsdp_transformer_layer_cls_to_wrap": settings["transformer_layer_cls_to_wrap"],
        "fsdp_activation_checkpointing": settings["activation_checkpointing"] != "none",
        "fsdp_offload_params": settings["offload_policy"]["offload_params"],
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_sync_module_states": True,
    }
