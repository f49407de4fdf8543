"""A plan's context parallelism (cp, cp_impl) in each framework's own settings, or a clear refusal
where the framework has no such implementation (planner/context_parallel.py describes them).

- Megatron-LM / Megatron-Core: `--context-parallel-size N --cp-comm-type p2p|a2a|allgather|a2a+p2p`,
  a2a+p2p with `--hierarchical-context-parallel-sizes INNER OUTER` (Megatron-Core
  transformer_config `cp_comm_type`, `hierarchical_context_parallel_sizes`).
- DeepSpeed: Ulysses only, the top-level `sequence_parallel_size` (DeepSpeed's config reads it to
  size its data-parallel world: deepspeed/runtime/config.py; ZeRO divides the gradients by it).
- accelerate: FSDP2 with torch context parallelism (`parallelism_config_cp_size`,
  `parallelism_config_cp_comm_strategy` allgather | alltoall: torch's rotate methods, alltoall
  passing the K/V shards round = ring), or DeepSpeed Ulysses (`parallelism_config_sp_size`,
  `parallelism_config_sp_backend: deepspeed`; accelerate ParallelismConfig).
"""

from __future__ import annotations

from typing import Any

from planner.context_parallel import inner_degree
from planner.errors import PlanError
from planner.layout import Layout
from planner.scenario import ExecutionPlan

MEGATRON_COMM_TYPE = {"ring": "p2p", "ulysses": "a2a", "allgather": "allgather", "a2a+p2p": "a2a+p2p"}
TORCH_ROTATE = {"ring": "alltoall", "allgather": "allgather"}


def megatron_args(plan: ExecutionPlan, gpus_per_node: int) -> list[str]:
    """Megatron-LM flags of the plan's context parallelism (none with cp 1)."""
    if plan.cp <= 1:
        return []
    args = ["--context-parallel-size", str(plan.cp), "--cp-comm-type", MEGATRON_COMM_TYPE[plan.cp_impl]]
    if plan.cp_impl == "a2a+p2p":
        inner = int(inner_degree(Layout.from_plan(plan), gpus_per_node)[0])
        args += ["--hierarchical-context-parallel-sizes", str(inner), str(plan.cp // inner)]
    return args


def deepspeed_keys(plan: ExecutionPlan) -> dict[str, Any]:
    """Top-level DeepSpeed config keys of the plan's context parallelism ({} with cp 1)."""
    if plan.cp <= 1:
        return {}
    if plan.cp_impl != "ulysses":
        raise PlanError("cp_impl", f"DeepSpeed runs context parallelism as Ulysses only (sequence_parallel_size); "
                        f"{plan.cp_impl} needs Megatron-Core (--cp-comm-type {MEGATRON_COMM_TYPE[plan.cp_impl]}) or "
                        "torch context_parallel (allowed here: ulysses)")
    return {"sequence_parallel_size": plan.cp}


def accelerate_keys(plan: ExecutionPlan, *, fsdp: bool, deepspeed: bool) -> dict[str, Any]:
    """accelerate `parallelism_config` keys of the plan's context parallelism ({} with cp 1)."""
    if plan.cp <= 1:
        return {}
    if plan.cp_impl == "ulysses":
        if not deepspeed:
            raise PlanError("cp_impl", "accelerate runs Ulysses sequence parallelism with DeepSpeed only "
                            "(sharding zero1/zero2/zero3); with FSDP2 use cp_impl ring or allgather")
        return {"parallelism_config_sp_size": plan.cp, "parallelism_config_sp_backend": "deepspeed"}
    if plan.cp_impl not in TORCH_ROTATE:
        raise PlanError("cp_impl", f"accelerate has no {plan.cp_impl} context parallelism (allowed: ring, allgather "
                        "with FSDP2; ulysses with DeepSpeed)")
    if not fsdp:
        raise PlanError("cp", f"accelerate runs {plan.cp_impl} context parallelism with FSDP2 only "
                        "(sharding fsdp_*)")
    return {"parallelism_config_cp_size": plan.cp, "parallelism_config_cp_comm_strategy": TORCH_ROTATE[plan.cp_impl]}
