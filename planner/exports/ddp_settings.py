"""torch DDP's gradient bucket copy (planner/comm_buffers.py ddp_bucket_copy_bytes) in each export format: a plan with
sharding none over dp > 1 counts a second copy of its gradients where its stack profile's ddp_bucket_view is false
(torch's default gradient_as_bucket_view=False), none where it is true. No export format can switch it:

- accelerate: its config file has no DDP arguments (accelerate/commands/config/config_args.py); the views take code,
  `Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(gradient_as_bucket_view=True)])` (accelerate 1.15.0
  utils/dataclasses.py, default False). The HF Trainer builds that handler itself from TrainingArguments'
  ddp_find_unused_parameters / ddp_bucket_cap_mb / ddp_broadcast_buffers and has no field for the views
  (huggingface/transformers@2cda12c src/transformers/trainer.py `_wrap_model`).
- torchrun / slurm launch the bundled trainer, whose DDP passes gradient_as_bucket_view=True (trainer/backends/ddp.py).
- megatron: Megatron-Core's own DDP, gradients as views of its contiguous buffer (param_and_grad_buffer.py).
- deepspeed (ZeRO stage 0) and fsdp (it refuses sharding none) run no torch DDP: nothing to say.

So each file runs what its software does, and a note says where that differs from what the plan counted (and, for
accelerate, how to get the views in code).
"""

from __future__ import annotations

import numpy as np

from hardware.stacks import StackProfile
from planner import grad_dtype
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan
from planner.system import System

# the software a format launches keeps DDP's gradients as bucket views (True) or a second copy (False)
RUNS_VIEWS = {"accelerate": False, "torchrun": True, "slurm": True, "megatron": True}
_SOFTWARE = {"torchrun": "the bundled trainer (gradient_as_bucket_view=True, trainer/backends/ddp.py)",
             "slurm": "the bundled trainer (gradient_as_bucket_view=True, trainer/backends/ddp.py)",
             "megatron": "Megatron-Core's DDP (gradients are views of its contiguous buffer)"}
_CODE = "Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(gradient_as_bucket_view=True)])"


def copy_bytes(plan: ExecutionPlan, profile: StackProfile, model: ModelSpec | None, system: System) -> float:
    """The bytes of gradients a DDP bucket copy of `plan` holds on one GPU (its gradients, as memory.py counts them),
    whether or not the plan's stack copies; 0 where no model is known."""
    if model is None:
        return 0.0
    from hardware.catalog import load_catalog
    from planner import memory
    from planner.layout import Layout
    from planner.settings import Settings

    stacks = load_catalog().stacks | {plan.stack: profile}
    out = memory.memory_arrays(model, Layout.from_plan(plan), system, Settings(stacks=stacks))
    return float(np.asarray(out["grads_bytes"]).reshape(-1)[0])


def copy_counted(plan: ExecutionPlan, profile: StackProfile) -> bool:
    """Whether the plan's memory counts DDP's bucket copy (planner/comm_buffers.py, with the plan's stack profile)."""
    from planner.comm_buffers import ddp_bucket_copy_bytes
    from planner.layout import Layout

    copy = ddp_bucket_copy_bytes(Layout.from_plan(plan), 1.0, float(profile.ddp_bucket_view),
                                 float(profile.main_grads_fp32), profile.grad_bucket_params)
    return bool(np.asarray(copy).reshape(-1)[0] > 0)


def note(fmt: str, plan: ExecutionPlan, profile: StackProfile | None, model: ModelSpec | None,
         system: System) -> str | None:
    """What `fmt`'s software does with DDP's gradient buckets where it is not what `plan` counted, or (accelerate)
    how to get the views; None where nothing differs or the plan runs no DDP."""
    if fmt not in RUNS_VIEWS or plan.sharding != "none" or plan.dp <= 1:
        return None
    prof = profile or grad_dtype.profile_of(plan)
    counted = copy_counted(plan, prof)
    # the copy's size: the plan's gradients where it counted them, else those accelerate's DDP holds (the hf profile's:
    # fp32 under autocast, where a Megatron-Core plan counted 16-bit ones)
    runner = prof if counted else grad_dtype.profile_of(plan.model_copy(update={"stack": "hf"}))
    nbytes = copy_bytes(plan.model_copy(update={"stack": runner.id}), runner, model, system)
    size = f" of {nbytes / 2**30:.1f} GiB a GPU" if nbytes > 0 else ""
    if fmt == "accelerate":
        if counted:
            return (f"DDP: accelerate's config file has no DDP arguments, so DDP keeps torch's default "
                    f"gradient_as_bucket_view=False, a second copy of the gradients in its buckets{size}, which this "
                    f"plan counts (stack {plan.stack}: ddp_bucket_view false); to drop it, build {_CODE} in your "
                    "script (the HF Trainer's TrainingArguments has no field for it)")
        return (f"DDP: this plan was sized with DDP's gradients as views of its buckets (stack {plan.stack}: "
                f"ddp_bucket_view true), which accelerate's config file cannot set: build {_CODE} in your script, or "
                f"DDP keeps a second copy of the gradients{size} the plan did not count (--stack hf counts it)")
    if counted and RUNS_VIEWS[fmt]:
        return (f"DDP: this plan counted a second copy of the gradients{size} in torch DDP's buckets (stack "
                f"{plan.stack}: ddp_bucket_view false); {_SOFTWARE[fmt]} holds no such copy")
    return None
