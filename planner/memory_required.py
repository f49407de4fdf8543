"""What must fit in GPU memory, next to the reserved peak that planner/memory.py sums.

The terms of `memory.memory_arrays` add up to the caching allocator's reserved peak as a run
with room to spare reports it (nvidia-smi, `max_memory_reserved`): a freed block stays cached
and the step's later buffers come on top. Short of memory the allocator gives its cached
blocks back and retries: "num_alloc_retries: number of failed cudaMalloc calls that result in a
cache flush and retry" (torch.cuda.memory_stats). DeepSpeed ZeRO-3 warns when it happens
("pytorch allocator cache flushes since last step. this happens when there is high memory
pressure and is detrimental to performance", deepspeed/runtime/zero/stage3.py), and seed 003's
ZeRO-3 run of BLOOM-7b1 on 2 A100 ran so ("VRAM hyper-limite: warnings de GPU cache
flushing"). A run fits while the bytes alive at once fit:

- the freed transients the reserve keeps cached (`memory.transient_bytes`: the logits'
  gradient, a gathered module's copy) are not alive at the peak, except the part of the
  logits' gradient beyond the recomputed block: at the loss's backward it is alive next to
  every saved activation, before any block is rebuilt;
- the fp32 gradient partition that DeepSpeed ZeRO builds from the 16-bit gradients lives only
  in the optimizer step (stage_1_and_2.py `step`: `flat_grad_partition.to(fp32)`, `.grad = None`
  after the update; stage3.py `_prepare_fp32_grad_for_sub_group` / `_release_sub_group`), when
  the activations are freed: the step needs max(activations, that partition + the flattened
  16-bit copy it is cast from), not their sum.
"""

from __future__ import annotations

import numpy as np

from planner.layout import CKPT, OFFLOAD, PREC, SHARD, Layout
from planner.model import ModelSpec
from planner.system import System


def step_only_bytes(spec: ModelSpec, layout: Layout, system: System) -> tuple[np.ndarray, np.ndarray]:
    """(the fp32 gradient partition `memory.grads_bytes` counts, the step's own peak with the
    flattened 16-bit partition it is cast from); 0 where the fp32 copy lives on the host (offload)
    or is not made (DDP, FSDP, pure bf16; ZeRO-1/2 train fp32 in place)."""
    from planner.memory import _is_mixed, compute_dtype_bytes, params_per_gpu, shard_degree

    part = params_per_gpu(spec, layout) / shard_degree(layout, system)
    s = layout.sharding
    on_gpu = layout.offload == OFFLOAD["none"]
    zero12 = ((s == SHARD["zero1"]) | (s == SHARD["zero2"])) & _is_mixed(layout)
    zero3 = (s == SHARD["zero3"]) & (layout.precision != PREC["bf16_pure"])
    fp32 = np.where(on_gpu & (zero12 | zero3), 4.0 * part, 0.0)
    flattened = np.where(fp32 > 0, compute_dtype_bytes(layout) * part, 0.0)
    return fp32, fp32 + flattened


def loss_backward_excess_bytes(spec: ModelSpec, layout: Layout, grad_bytes_per_logit) -> np.ndarray:
    """Bytes of the logits' gradient beyond the block rebuilt in backward (all of it without
    recompute): alive together with every saved activation at the loss's backward."""
    from planner.memory import layer_activation_bytes

    sb = (layout.seq_len / layout.cp * layout.micro_batch).astype(np.float64)
    logits_grad = grad_bytes_per_logit * sb * spec.vocab_padded / layout.tp
    ck = layout.activation_checkpointing
    rebuilt = np.where((ck == CKPT["full"]) | (ck == CKPT["blocks"]), layer_activation_bytes(spec, layout), 0.0)
    return np.maximum(0.0, logits_grad - rebuilt)


def required_bytes(spec: ModelSpec, layout: Layout, system: System, terms: dict[str, np.ndarray],
                   cached_transient_bytes, grad_bytes_per_logit) -> np.ndarray:
    """Bytes alive at once at the step's peak, once the allocator has flushed its cache.

    `terms`: memory_arrays' terms with their `total_bytes`; `cached_transient_bytes`: the part of
    `fragmentation_bytes` that is freed transients (0 with a fixed fragmentation margin).
    """
    cached = np.asarray(cached_transient_bytes, dtype=np.float64)
    live_transient = np.minimum(cached, loss_backward_excess_bytes(spec, layout, grad_bytes_per_logit))
    fp32_grads, step_peak = step_only_bytes(spec, layout, system)
    backward_only = np.asarray(terms["activations_bytes"], dtype=np.float64) + gathered_bytes(spec, layout)
    resident = np.asarray(terms["total_bytes"], dtype=np.float64) - cached - fp32_grads - backward_only
    return resident + np.maximum(backward_only + live_transient, step_peak)


def gathered_bytes(spec: ModelSpec, layout: Layout) -> np.ndarray:
    """ZeRO-3's gathered module and its 16-bit gradients (counted in `memory.weights_bytes` and
    `grads_bytes`): alive in forward and backward only, released before the optimizer step."""
    from planner.memory import _unit_params, compute_dtype_bytes

    zero3 = layout.sharding == SHARD["zero3"]
    return np.where(zero3, 2.0 * compute_dtype_bytes(layout) * _unit_params(spec, layout), 0.0)
