"""Host time of synchronous kernel launches (jobs run with CUDA_LAUNCH_BLOCKING=1).

Normally the host queues kernels ahead of the GPU and its Python/dispatch time per op hides
behind GPU work. With `CUDA_LAUNCH_BLOCKING=1` every launch returns only when its kernel has
finished, so the host's per-op time (Python, the PyTorch dispatcher, the driver's launch, the
completion wake-up) is added to the GPU time of every kernel. BigScience ran the BLOOM
prequel benchmarks and the BLOOM-176B training on Jean Zay this way, as a workaround for
hangs (train/tr11-176B-ml/chronicles-prequel.md, "dealing with JZ hanging on the large
model": asynchronous launches at 320 GPUs "always hangs"; tr11-176B-ml.slurm: "do not remove
or the training will hang ... export CUDA_LAUNCH_BLOCKING=1").

The cost is a fixed number of launches per block and micro batch, whatever the micro batch
size or the tensor-parallel degree: per GPU its share of the step grows like tp / micro_batch.

    seconds per micro batch = layers x launches(fwd + bwd + recompute) x sync_launch_us x 1e-6

`sync_launch_us` is the stack profile's host microseconds per synchronous launch (fitted by
planner/profile_fit.py, prior below). Runs say so with `System.launch_blocking` (planner/runs.py
reads "CUDA_LAUNCH_BLOCKING=1" from a runs file's notes); without it the term is zero.
"""

from __future__ import annotations

import re

import numpy as np

from hardware.stacks import StackProfile
from planner import flops
from planner.errors import PlanError
from planner.layout import Layout

# Kernel launches of one Megatron GPT block (fused layer norm, fused scale-mask-softmax,
# fused bias-GeLU and bias-dropout-add, as Megatron-DeepSpeed runs it), per micro batch:
# forward: 2 layer norms, 4 linear GEMMs, QK^T (baddbmm with ALiBi) and AV bmm, softmax,
# attention dropout, the context transpose copy, bias-GeLU, 2 bias-dropout-add, 2 TP
# all-reduces, and ~2 small copies/views that materialise: 18.
LAUNCHES_FORWARD = 18.0
# backward: 2 GEMMs per linear (8) and per bmm (4), 4 bias-gradient reductions, 2 layer norms x
# 2 kernels, softmax, 3 dropout masks, GeLU, 2 residual adds, the transpose copy, 2 TP
# all-reduces, ~12 gradient accumulations into the weights' .grad (weights, biases, norms): 42.
LAUNCHES_BACKWARD = 42.0
# Prior of the host time per synchronous launch (the stack profile's default, sourced there).
SYNC_LAUNCH_US_PRIOR = float(StackProfile.model_fields["sync_launch_us"].default)


def launches_per_layer(layout: Layout) -> np.ndarray:
    """Kernel launches per block and micro batch: forward, backward and the recomputed forward."""
    block, _, _ = flops.recompute_share(layout.activation_checkpointing, layout.checkpoint_fraction)
    return LAUNCHES_FORWARD * (1.0 + block) + LAUNCHES_BACKWARD


def raw_s(layout: Layout, layers: np.ndarray, launch_blocking: bool) -> np.ndarray:
    """Per micro batch of the busiest stage, before the profile's factor: layers x launches x 1e-6
    (x sync_launch_us gives seconds); zero unless the job's launches are synchronous."""
    if not launch_blocking:
        return np.zeros(np.shape(layers))
    return np.asarray(layers, dtype=np.float64) * launches_per_layer(layout) * 1e-6


_FLAG = re.compile(r"CUDA_LAUNCH_BLOCKING\s*=\s*1", re.I)


def launch_blocking_of(row: dict, notes: list[str]) -> bool:
    """A runs-file row ran with synchronous launches when its notes say CUDA_LAUNCH_BLOCKING=1
    (an optional `launch_blocking` column, true/false, wins)."""
    cell = (row.get("launch_blocking") or "").strip().lower()
    if cell:
        if cell not in ("true", "false", "1", "0", "yes", "no"):
            raise PlanError("launch_blocking", f"row {row.get('id')}: {cell!r} (allowed: true, false)")
        on = cell in ("true", "1", "yes")
    else:
        on = bool(_FLAG.search(row.get("notes") or ""))
    if on:
        notes.append("CUDA_LAUNCH_BLOCKING=1: synchronous kernel launches (host time per launch added)")
    return on
