"""Precision of a Hugging Face DDP run that states none, from the fact that it ran.

The HF Trainer (and accelerate) run mixed precision as torch.autocast over fp32 parameters: DDP then
holds fp32 weights (4 B/param), fp32 gradients (4 B) and, by default, a second fp32 copy of the
gradients in its all-reduce buckets (4 B: PyTorch DDP's `gradient_as_bucket_view=False`, whose
documentation says a view "can reduce peak memory usage, where the saved memory size will be equal
to the total gradients size"), plus the optimizer state. When that alone, with the activations and
runtime the planner counts for the plan, exceeds the GPU, a run that ran cannot have used it: its
weights were 16 bit (the model loaded with torch_dtype bfloat16/float16, as Adafactor is used for,
or an O2-style master copy kept by the optimizer), and its gradients cross the network in 16 bit.
The planner expresses that as `bf16_pure` (seed 003: bloom-7b1 DDP with Adafactor on A100 80GB).
"""

from __future__ import annotations

import numpy as np

from planner.layout import Layout
from planner.memory import memory_arrays, optimizer_state_bytes_per_param
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan
from planner.settings import Settings
from planner.system import System

# fp32 weights + fp32 gradients + DDP's fp32 bucket copy of the gradients, bytes per parameter (the copy
# planner/comm_buffers.py ddp_bucket_copy_bytes counts for the hf profile, ddp_bucket_view = false)
AMP_DDP_BYTES_PER_PARAM = 12.0


def amp_ddp_bytes(spec: ModelSpec, plan: ExecutionPlan, system: System) -> float:
    """Bytes one GPU needs to run `plan` (DDP) as torch.autocast over fp32 parameters."""
    layout = Layout.from_plan(plan)
    state = (AMP_DDP_BYTES_PER_PARAM + float(np.asarray(optimizer_state_bytes_per_param(spec, layout)).reshape(-1)[0]))
    mem = memory_arrays(spec, layout, system, Settings())
    rest = sum(float(np.asarray(mem[k]).reshape(-1)[0]) for k in ("activations_bytes", "runtime_bytes"))
    return state * spec.n_params + rest


def pure_if_amp_cannot_fit(row: dict, plan: ExecutionPlan, spec: ModelSpec, system: System,
                           notes: list[str]) -> ExecutionPlan:
    """`plan` with bf16_pure where the row states no precision, runs DDP on the hf stack, ran, and
    could not have fitted as AMP over fp32 weights; else `plan` unchanged."""
    stated = (row.get("precision") or "").strip()
    ran = (row.get("outcome") or "ok").strip().lower() in ("", "ok")
    if stated or not ran or plan.stack != "hf" or plan.sharding != "none" or plan.precision != "bf16":
        return plan
    need = amp_ddp_bytes(spec, plan, system)
    capacity = system.gpu.hbm_gib * 2**30
    if need <= capacity:
        return plan
    notes.append(f"precision not stated: bf16_pure (DDP under AMP needs {need / 2**30:.0f} GiB of fp32 weights, "
                 f"grads and buckets on a {system.gpu.hbm_gib:g} GiB GPU; the run ran, so its weights were 16 bit)")
    return plan.model_copy(update={"precision": "bf16_pure"})
