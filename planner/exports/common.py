"""What every export shares: the training recipe (optimizer hyper-parameters, schedule) and
the target device kind (pinned host memory only exists where a GPU is the target)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from planner.errors import unknown
from planner.scenario import ExecutionPlan, Frozen
from planner.system import System

Target = Literal["gpu", "cpu"]
TARGETS: tuple[str, ...] = Target.__args__  # type: ignore[attr-defined]
# The stack that runs a set of knobs (`plan train`, the tuner's trials): the bundled trainer.
RUN_STACK = "bundled"


def run_fields(knobs: dict) -> dict:
    """The ExecutionPlan fields of a trainer run's or a tuner trial's knobs (dp and seq_len are
    given apart), labelled with the stack that runs them unless the knobs name one."""
    fields = {k: v for k, v in knobs.items() if k in ExecutionPlan.model_fields and k not in ("dp", "seq_len")}
    return {"stack": RUN_STACK} | fields


class Recipe(Frozen):
    """Optimizer and schedule settings the planner does not choose (they do not change the
    plan's memory or speed); defaults are the GPT-3 / Llama recipe."""

    lr: float = Field(default=3e-4, gt=0)
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    weight_decay: float = Field(default=0.1, ge=0)
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.95, ge=0, lt=1)
    eps: float = Field(default=1e-8, gt=0)
    momentum: float = Field(default=0.9, ge=0, lt=1)  # sgd only
    grad_clip: float = Field(default=1.0, ge=0)  # 0: no clipping
    warmup_steps: int = Field(default=2000, ge=0)
    steps: int | None = Field(default=None, gt=0)  # optimizer steps; None: constant after warmup


def target_for(system: System) -> Target:
    """The device kind a system's accelerator is: a catalog entry of vendor 'cpu' is a CPU."""
    return "cpu" if system.gpu.vendor.lower() == "cpu" or system.gpu.id == "cpu" else "gpu"


def check_target(target: str) -> Target:
    if target not in TARGETS:
        raise unknown("target", target, tuple(TARGETS))
    return target  # type: ignore[return-value]


def steps_for_tokens(plan: ExecutionPlan, tokens: float) -> int:
    """Optimizer steps needed to see `tokens` tokens (one step = global_batch * seq_len)."""
    tokens_per_step = plan.global_batch * plan.seq_len
    return max(1, -(-int(tokens) // tokens_per_step))


def is_deepspeed(plan: ExecutionPlan) -> bool:
    return plan.sharding in ("zero1", "zero2", "zero3")


def is_fsdp(plan: ExecutionPlan) -> bool:
    return plan.sharding.startswith("fsdp_")
