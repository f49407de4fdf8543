"""An `ExecutionPlan` as a Hugging Face accelerate config (what `accelerate launch
--config_file` reads): FSDP2 plugin for fsdp_* plans, DeepSpeed plugin pointing at the
exported JSON for zero* plans, plain DDP for sharding=none.

Key names are accelerate's config-file keys (accelerate/commands/config/config_args.py and
the `fsdp_*` launch arguments); the tests load the file with accelerate's own classes.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from planner.errors import PlanError
from planner.exports.common import Target, check_target, is_deepspeed, is_fsdp
from planner.exports.cp_settings import accelerate_keys
from planner.exports.fsdp_settings import accelerate_fsdp_section, fsdp_settings
from planner.rendezvous import TORCH_DEFAULT_PORT, shell_port_line
from planner.scenario import ExecutionPlan
from planner.system import System

MIXED_PRECISION = {"fp32": "no", "fp16": "fp16", "bf16": "bf16", "bf16_pure": "bf16"}
DEFAULT_PORT = TORCH_DEFAULT_PORT  # accelerate's own default when no port is given


def accelerate_config(
    plan: ExecutionPlan,
    system: System,
    *,
    target: Target = "gpu",
    deepspeed_config_file: str = "ds_config.json",
    block_cls: str = "Block",
    main_process_port: int = DEFAULT_PORT,
    fsdp: dict[str, Any] | None = None,
    moe_layer_cls: str | None = None,
) -> dict[str, Any]:
    """The accelerate ClusterConfig dict for `plan` on `system` (nodes x gpus_per_node).

    An FSDP plan's section translates the shared FSDP settings (planner/exports/fsdp_settings.py):
    `fsdp`, the settings a tuner trial ran, or the ones built for `plan` here. `moe_layer_cls`: the MoE block class
    a DeepSpeed plan fetches as a ZeRO-3 leaf module (planner/exports/moe_leaf.py), written as accelerate's
    deepspeed_moe_layer_cls_names."""
    target = check_target(target)
    if plan.pp > 1:
        raise PlanError("pp", "accelerate has no pipeline parallelism; use pp=1 or a Megatron launcher")
    nodes = _nodes(plan, system)
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "num_machines": nodes,
        "num_processes": plan.gpus,  # accelerate counts processes over all machines
        "machine_rank": 0,
        "main_process_port": main_process_port,
        "rdzv_backend": "c10d" if nodes > 1 else "static",
        "same_network": True,
        "main_training_function": "main",
        "use_cpu": target == "cpu",
    }
    if is_deepspeed(plan):
        config["distributed_type"] = "DEEPSPEED"
        # Everything else (batch sizes, ZeRO, offload, precision) lives in the JSON file;
        # accelerate refuses a mixed_precision key next to a deepspeed_config_file.
        config["deepspeed_config"] = {
            "deepspeed_config_file": deepspeed_config_file,
            "zero3_init_flag": plan.sharding == "zero3",
        }
        if moe_layer_cls:  # accelerate's DeepSpeedPlugin.set_moe_leaf_modules: set_z3_leaf_modules on that class
            config["deepspeed_config"]["deepspeed_moe_layer_cls_names"] = moe_layer_cls
    elif is_fsdp(plan):
        config["distributed_type"] = "FSDP"
        config["mixed_precision"] = MIXED_PRECISION[plan.precision]
        settings = fsdp or fsdp_settings(plan, target=target, nodes=nodes, block_cls=block_cls)
        config["fsdp_config"] = accelerate_fsdp_section(settings)
        mesh = settings["mesh"]
        if "replicate" in mesh:
            # HSDP: shard inside a node, replicate across nodes (a 2-D device mesh)
            config["parallelism_config"] = {
                "parallelism_config_dp_replicate_size": mesh["replicate"],
                "parallelism_config_dp_shard_size": mesh["shard"],
                "parallelism_config_tp_size": plan.tp,
            }
    else:
        if plan.offload != "none":
            raise PlanError("offload", "offload needs sharding (zero1-3 or fsdp_*); DDP keeps everything on the GPU")
        config["distributed_type"] = "MULTI_CPU" if target == "cpu" else "MULTI_GPU"
        config["mixed_precision"] = MIXED_PRECISION[plan.precision]
    if plan.tp > 1 and "parallelism_config" not in config:
        if not is_fsdp(plan):
            raise PlanError("tp", "accelerate runs tensor parallelism only with FSDP2 (sharding=fsdp_*)")
        config["parallelism_config"] = {"parallelism_config_dp_shard_size": plan.dp,
                                        "parallelism_config_tp_size": plan.tp}
    cp = accelerate_keys(plan, fsdp=is_fsdp(plan), deepspeed=is_deepspeed(plan))
    if cp:
        mesh = {"parallelism_config_dp_shard_size": plan.dp, "parallelism_config_tp_size": plan.tp} if is_fsdp(plan) else {}
        config["parallelism_config"] = config.get("parallelism_config", mesh) | cp
    return config


def _nodes(plan: ExecutionPlan, system: System) -> int:
    per_node = min(system.gpus_per_node, plan.gpus)
    if plan.gpus % per_node:
        raise PlanError("gpus", f"{plan.gpus} GPUs do not fill nodes of {system.gpus_per_node}")
    return plan.gpus // per_node


def port_comment(file_name: str = "accelerate.yaml") -> list[str]:
    """The YAML's opening comment: main_process_port is accelerate's fixed default, and two SLURM jobs sharing a
    first node both took it; the shell line derives one from the job as `plan train` under srun does
    (planner/rendezvous.py), keeping a MASTER_PORT the user exported. accelerate's --main_process_port flag
    overrides the file's key (accelerate/commands/launch.py: config values fill only the flags left unset)."""
    return [
        f"# main_process_port {DEFAULT_PORT} is accelerate's default: two jobs whose first node is the same would both",
        "# take it. Under SLURM derive the port from the job (as `plan train` under srun does; a MASTER_PORT you",
        "# exported is kept) and pass it, which overrides this file's key:",
        f"#   {shell_port_line()}",
        f'#   accelerate launch --config_file {shlex.quote(file_name)} --main_process_port "$MASTER_PORT" ...',
    ]


def accelerate_yaml(config: dict[str, Any], file_name: str = "accelerate.yaml") -> str:
    """The YAML accelerate reads, opening with the rendezvous-port comment."""
    return "\n".join(port_comment(file_name)) + "\n" + to_yaml(config)


# ---- a small YAML writer (block style; enough for flat/nested dicts of scalars) ----------
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def to_yaml(data: dict[str, Any], indent: int = 0) -> str:
    lines: list[str] = []
    for key, value in data.items():
        pad = " " * indent
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:" + (" {}" if not value else ""))
            if value:
                lines.append(to_yaml(value, indent + 2).rstrip("\n"))
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}")
    return "\n".join(lines) + "\n"


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED:
        return text
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar
