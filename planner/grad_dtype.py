"""THE dtype a plan's gradients are reduced in, as its timing counts them: planner/dp_comm.py grad_bytes over
the plan's stack profile (`fsdp_reduce_fp32`), with its grad_reduce_dtype "default" resolved there. Every export
writes this one (FSDP2's MixedPrecisionPolicy.reduce_dtype, DeepSpeed's communication_data_type, Megatron-LM's
gradient flags), so that no file runs a reduction other than the one the plan was timed with."""

from __future__ import annotations

from typing import Literal

import numpy as np

from hardware.stacks import StackProfile
from planner.scenario import ExecutionPlan

ReduceDtype = Literal["fp32", "bf16", "fp16"]


def profile_of(plan: ExecutionPlan, stacks: dict[str, StackProfile] | None = None) -> StackProfile:
    """The profile of the plan's stack: from `stacks` (a catalog's), else the built-in catalog's (the prior
    where it has none, as planner/stacks.py profile_table)."""
    if stacks is None:
        from hardware.catalog import load_catalog

        stacks = load_catalog().stacks
    return stacks.get(plan.stack) or StackProfile(id=plan.stack, name=plan.stack)


def reduce_dtype(plan: ExecutionPlan, profile: StackProfile | None = None) -> ReduceDtype:
    """fp32 where the planner counts 4 bytes a gradient on the wire, else the plan's 16-bit compute dtype (fp16
    under fp16, bf16 otherwise). `profile`: the stack profile the plan was timed with (None: profile_of)."""
    from planner import dp_comm
    from planner.layout import Layout

    prof = profile or profile_of(plan)
    nbytes = dp_comm.grad_bytes(Layout.from_plan(plan), None, np.asarray([float(prof.fsdp_reduce_fp32)]))
    if float(np.asarray(nbytes).reshape(-1)[0]) >= 4.0:
        return "fp32"
    return "fp16" if plan.precision == "fp16" else "bf16"
