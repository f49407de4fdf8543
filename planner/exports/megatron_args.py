"""A plan as Megatron-LM / Megatron-Core `pretrain_gpt.py` arguments (megatron/training/arguments.py):
the parallel layout, the uneven pipeline split, the batch and the recompute settings. The model
and data arguments are the user's own script's."""

from __future__ import annotations

from planner.errors import PlanError
from planner.scenario import ExecutionPlan

_RECOMPUTE = {"none": [], "selective": ["--recompute-granularity", "selective"],
              "full": ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]}
_PRECISION = {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp32": [], "fp8": ["--bf16", "--fp8-format", "hybrid"]}


def megatron_args(plan: ExecutionPlan) -> list[str]:
    """The arguments, one flag and its value after the other. A plan Megatron cannot run (ZeRO-2/3,
    FSDP, offload, per-op recompute) is an error naming the knob."""
    if plan.sharding not in ("none", "zero1"):
        raise PlanError("sharding", f"{plan.sharding} is not Megatron's (allowed: none, zero1 as "
                        "--use-distributed-optimizer)")
    if plan.offload != "none":
        raise PlanError("offload", "Megatron-LM does not offload to the host here (allowed: none)")
    if plan.activation_checkpointing not in _RECOMPUTE:
        raise PlanError("activation_checkpointing", f"{plan.activation_checkpointing} has no Megatron flag "
                        f"(allowed: {', '.join(_RECOMPUTE)})")
    if plan.precision not in _PRECISION:
        raise PlanError("precision", f"{plan.precision} has no Megatron flag (allowed: {', '.join(_PRECISION)})")
    args = ["--tensor-model-parallel-size", str(plan.tp), "--pipeline-model-parallel-size", str(plan.pp)]
    if plan.vpp > 1:  # Megatron-Core's spelling that also takes uneven splits
        args += ["--num-virtual-stages-per-pipeline-rank", str(plan.vpp)]
    if plan.first_stage_layers:
        args += ["--decoder-first-pipeline-num-layers", str(plan.first_stage_layers)]
    if plan.last_stage_layers:
        args += ["--decoder-last-pipeline-num-layers", str(plan.last_stage_layers)]
    if plan.embedding_in_split:
        args.append("--account-for-embedding-in-pipeline-split")
    if plan.loss_in_split:
        args.append("--account-for-loss-in-pipeline-split")
    if plan.cp > 1:
        args += ["--context-parallel-size", str(plan.cp)]
    if plan.sequence_parallel:
        args.append("--sequence-parallel")
    if plan.sharding == "zero1":
        args.append("--use-distributed-optimizer")
    if plan.async_tp:
        args.append("--tp-comm-overlap")
    args += ["--micro-batch-size", str(plan.micro_batch), "--global-batch-size", str(plan.global_batch),
             "--seq-length", str(plan.seq_len)]
    args += _RECOMPUTE[plan.activation_checkpointing] + _PRECISION[plan.precision]
    if plan.attention == "flash":
        args.append("--use-flash-attn")
    return args


def render(args: list[str]) -> str:
    """One flag per line (shell continuation), values after their flag."""
    lines, i = [], 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            lines.append(f"{args[i]} {args[i + 1]}")
            i += 2
        else:
            lines.append(args[i])
            i += 1
    return " \\\n    ".join(lines) + "\n"
