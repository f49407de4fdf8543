"""Where a stack keeps an fp32 main-gradient buffer of the whole stage (its profile's main_grads_fp32).

Megatron-Core under bf16 (and fp8, whose parameters are bf16): megatron/training/arguments.py turns
accumulate_allreduce_grads_in_fp32 on ("bfloat16 requires gradient accumulation and all-reduce to be
done in fp32"); its DistributedDataParallel holds the gradients of every parameter of the stage in one
contiguous fp32 buffer, whose buckets are reduce-scattered in place (param_and_grad_buffer.py), and the
distributed optimizer steps on its own shard of that buffer: 2 + 4 + 12/d bytes a parameter with the
fp32 master weights and Adam moments (Megatron-LM docs/source/api-guide/dist_optimizer.md, "bf16
parameters, fp32 gradients: 18 | 6 + 12/d"), where DeepSpeed's ZeRO-1 holds 2P of 16-bit gradients, an
fp32 partition 4P/d made at the step and its own bucket buffers (4 + 16/d). planner/memory.py
grads_bytes and comm_buffer_bytes, planner/memory_required.py step_only_bytes apply it.
"""

from __future__ import annotations

import numpy as np

from planner.layout import GRAD_REDUCE, OFFLOAD, PREC, SHARD, Layout


def fp32_asked(layout: Layout, main_fp32) -> np.ndarray:
    """The plans that keep and reduce fp32 gradients: the plan's grad_reduce_dtype where it names one (fp32 /
    bf16), else the stack profile's main_grads_fp32 (`main_fp32`, per candidate). Megatron-LM
    validate_args: under --bf16, accumulate_allreduce_grads_in_fp32 = True unless --grad-reduce-in-bf16
    (NVIDIA/Megatron-LM@000c4ac megatron/training/arguments.py)."""
    knob = np.asarray(getattr(layout, "grad_reduce_dtype", GRAD_REDUCE["default"]))
    return np.where(knob == GRAD_REDUCE["default"], np.asarray(main_fp32) > 0, knob == GRAD_REDUCE["fp32"])


def buffer_on(layout: Layout, main_fp32) -> np.ndarray:
    """The plans whose gradients are an fp32 main-gradient buffer: DDP or ZeRO-1 (the distributed optimizer), no
    offload, where the plan asks for fp32 gradients (`fp32_asked`), in bf16/fp8 — and in fp16 where fp32 is asked
    for explicitly (the knob) or the plan is timed as an fp32 reduction on Megatron-Core's DDP (`main_fp32` 2,
    `resident_fp32`): Megatron-Core allocates its grad buffer in fp32 whenever grad_reduce_in_fp32 is on, whatever
    the 16-bit dtype (param_and_grad_buffer.py grad_dtype), which under --fp16 takes
    --accumulate-allreduce-grads-in-fp32 (the export writes it); a profile's main_grads_fp32 is Megatron-LM's bf16
    default and leaves fp16 in 16 bit (dist_optimizer.md: "fp16 parameters, fp16 gradients: 4 + 16/d")."""
    p = layout.precision
    knob = np.asarray(getattr(layout, "grad_reduce_dtype", GRAD_REDUCE["default"]))
    fp16_fp32 = (p == PREC["fp16"]) & ((knob == GRAD_REDUCE["fp32"]) | (np.asarray(main_fp32) >= 2))
    precision = (p == PREC["bf16"]) | (p == PREC["fp8"]) | fp16_fp32
    ddp_or_zero1 = (layout.sharding == SHARD["none"]) | (layout.sharding == SHARD["zero1"])
    return fp32_asked(layout, main_fp32) & precision & ddp_or_zero1 & (layout.offload == OFFLOAD["none"])


def resident_fp32(layout: Layout, prof: dict, stated_bytes=None) -> np.ndarray:
    """`main_fp32` per candidate as the memory model reads it (buffer_on): 1 the profile's main_grads_fp32, 2 a stack with
    Megatron-Core's own DDP (its buckets, `grad_bucket_params` > 0) under plain data parallelism whose gradients
    the timing reduces in 4 bytes (planner/dp_comm.py grad_bytes; `stated_bytes`: the run's framework fact). There
    the grad buffer IS the fp32 buffer that reduction runs on: Megatron-LM under --bf16 turns
    accumulate_allreduce_grads_in_fp32 on (megatron/training/arguments.py validate_args), and the Megatron export
    writes that flag for these plans (planner/exports/megatron_args.py grad_reduce_args): 2 bytes a parameter more
    than a 16-bit buffer (dist_optimizer.md: "bf16 parameters, fp32 gradients: 18" bytes a parameter)."""
    from planner import dp_comm

    wire = dp_comm.grad_bytes(layout, stated_bytes, prof["fsdp_reduce_fp32"])
    core_ddp = (np.asarray(prof["grad_bucket_params"]) > 0) & (layout.sharding == SHARD["none"])
    # 2: fp32 in any 16-bit precision (the timed reduction); 1: the profile's bf16 default; 0: none
    return np.where(core_ddp & (np.asarray(wire) >= 4.0), 2.0, (np.asarray(prof["main_grads_fp32"]) > 0) * 1.0)


def core_bucket_views(layout: Layout, core_buckets) -> np.ndarray:
    """The plans whose DDP buckets are views of one contiguous gradient buffer in any dtype: a stack
    with Megatron-Core's own buckets (`core_buckets`: its profile's grad_bucket_params > 0) under DDP
    or the distributed optimizer. megatron/core/distributed/param_and_grad_buffer.py allocates the
    stage's gradients as one `grad_data` tensor (grad_dtype: fp32 or, grad_reduce_in_fp32 off, the
    param dtype) and each bucket's grads are a view into it, reduce-scattered in place; with the
    distributed optimizer the all-gathered params land in the contiguous `param_data` buffer the model
    uses. No staging buffers, unlike DeepSpeed's overlap_comm (4.5 x bucket sizes) or torch DDP."""
    ddp_or_zero1 = (layout.sharding == SHARD["none"]) | (layout.sharding == SHARD["zero1"])
    return (np.asarray(core_buckets) > 0) & ddp_or_zero1 & (layout.offload == OFFLOAD["none"])


def amp_ddp(layout: Layout, core_buckets) -> np.ndarray:
    """The plans that run torch DDP under autocast: fp16/bf16 mixed precision, sharding none, on a stack without
    Megatron-Core's own DDP (`core_buckets`: its profile's grad_bucket_params, 0), so the model's parameters stay
    fp32 and autocast casts them per op ("autocast ... should wrap only the forward pass"; the model is created in
    the default float32 dtype, torch.amp docs "Automatic Mixed Precision examples"): each gradient has its
    parameter's dtype, fp32 (AccumulateGrad), and torch DDP's Reducer buckets and all-reduces them in that dtype
    (torch/csrc/distributed/c10d/reducer.cpp: bucket.gradients takes the parameters' options), the 4 bytes
    planner/dp_comm.py grad_bytes counts. The fp32 parameters are the optimizer's own: no separate master copy
    (4 + 4 bytes a parameter and the optimizer states, where Megatron-LM / Apex O2 keep 2 + 2 + a 4-byte master)."""
    p = layout.precision
    mixed16 = (p == PREC["fp16"]) | (p == PREC["bf16"])
    return (layout.sharding == SHARD["none"]) & mixed16 & ~(np.asarray(core_buckets) > 0)

