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
  gradient, a gathered module's copy) are not alive at the peak, except the logits' gradient
  at the loss's backward, next to every saved activation, before any block is rebuilt; and the
  loss's saved logits are freed by the time the last block is rebuilt (`backward_live_bytes`);
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


# The memory model's error: MAPE of its prediction against the 49 measured peaks of
# validation/data/published_dev.csv (`plan validate validation/data/published_dev.csv`, round 28: 6.9%).
MEMORY_ERROR_PCT = 6.9


def is_tight(need_bytes, capacity_bytes, error_pct: float = MEMORY_ERROR_PCT) -> np.ndarray:
    """Plans that fit by less than the memory model's error: what must fit, grown by that error, exceeds
    the capacity (a coin toss whether they run)."""
    return np.asarray(need_bytes) * (1 + error_pct / 100) > np.asarray(capacity_bytes)


def step_only_bytes(spec: ModelSpec, layout: Layout, system: System, main_fp32=False,
                    core_buckets=0.0) -> tuple[np.ndarray, np.ndarray]:
    """(the fp32 gradient partition `memory.grads_bytes` counts, the step's own peak with the
    flattened 16-bit partition it is cast from); 0 where the fp32 copy lives on the host (offload)
    or is not made (DDP, FSDP, pure bf16; a stack whose fp32 main grads are resident, `main_fp32`:
    planner/main_grads.py). DeepSpeed's ZeRO-1/2 in fp32 flattens the partition's gradients into a new
    fp32 tensor at the step as well (deepspeed 0.19.8 runtime/zero/stage_1_and_2.py step: flatten /
    flatten_dense_tensors_aligned, lines 3112-3118, then .to(fp32) a no-op): a step peak of 4P/N, nothing resident;
    not Megatron-Core's distributed optimizer (`core_buckets`: it steps on views of its grad buffer)."""
    from planner.main_grads import buffer_on, core_bucket_views
    from planner.memory import _is_mixed, compute_dtype_bytes, params_per_gpu, shard_degree

    part = params_per_gpu(spec, layout) / shard_degree(layout, system)
    s = layout.sharding
    on_gpu = layout.offload == OFFLOAD["none"]
    zero12 = ((s == SHARD["zero1"]) | (s == SHARD["zero2"])) & _is_mixed(layout) & ~buffer_on(layout, main_fp32)
    zero3 = (s == SHARD["zero3"]) & (layout.precision != PREC["bf16_pure"])
    fp32 = np.where(on_gpu & (zero12 | zero3), 4.0 * part, 0.0)
    flattened = np.where(fp32 > 0, compute_dtype_bytes(layout) * part, 0.0)
    zero12_fp32 = (((s == SHARD["zero1"]) | (s == SHARD["zero2"])) & (layout.precision == PREC["fp32"])
                   & ~core_bucket_views(layout, core_buckets))
    flat_fp32 = np.where(on_gpu & zero12_fp32, 4.0 * part, 0.0)  # the step's own copy, counted in no resident term
    return fp32, fp32 + flattened + flat_fp32


def zero1_reduced_grads_bytes(spec: ModelSpec, layout: Layout, system: System, main_fp32=False,
                              core_buckets=0.0) -> np.ndarray:
    """The 16-bit gradients DeepSpeed's ZeRO-1 holds through backward but frees before the step: all but the
    rank's partition, c(P - P/N). Without hooks (stage 1, no overlap_comm) the gradients stay in param.grad until
    the boundary's reduce_gradients, which frees those outside the partition as their bucket is reduced (deepspeed
    0.19.8 runtime/zero/stage_1_and_2.py reduce_gradients, lines 958-976; step frees params_not_in_partition, line
    3103). Not Megatron-Core's distributed optimizer (`core_buckets`, `main_fp32`: its gradient buffer stays)."""
    from planner.main_grads import buffer_on, core_bucket_views
    from planner.memory import compute_dtype_bytes, params_per_gpu, shard_degree

    p = params_per_gpu(spec, layout)
    deepspeed_zero1 = ((layout.sharding == SHARD["zero1"]) & (layout.offload == OFFLOAD["none"])
                       & ~buffer_on(layout, main_fp32) & ~core_bucket_views(layout, core_buckets))
    return np.where(deepspeed_zero1, compute_dtype_bytes(layout) * (p - p / shard_degree(layout, system)), 0.0)


def backward_live_bytes(spec: ModelSpec, layout: Layout, activations, logits_grad_cached, prof,
                        block_saved_less=0.0) -> np.ndarray:
    """Activation bytes alive at once in backward, from `memory.activation_bytes`' sum.

    The logits' gradient (as far as the reserve holds it: `logits_grad_cached`) is alive at the
    loss's backward next to every saved activation. Without pipeline stages the loss's saved
    logits, their gradient and the final norm's tensors are freed before the last block is
    rebuilt (autograd frees a node's saved tensors once its backward has run), so with recompute
    the rebuilt block and the loss's backward are not alive together: max, not sum. With
    pipeline stages the busiest stage is not the one with the loss: the logits' gradient beyond
    the rebuilt block is added, as alive at once. The rebuilt block keeps what a kept block keeps:
    `block_saved_less` (what the stack's recipe keeps less, as `memory.activation_bytes` subtracts).
    """
    from planner.memory import compute_dtype_bytes, layer_activation_bytes

    sb = (layout.seq_len / layout.cp * layout.micro_batch).astype(np.float64)
    ck = layout.activation_checkpointing
    recompute = (ck == CKPT["full"]) | (ck == CKPT["blocks"])
    block = layer_activation_bytes(spec, layout, prof["eager_softmax_fp32"], prof["swiglu_saved_sbf"])
    rebuilt = np.where(recompute, block - block_saved_less, 0.0)
    logits_saved = prof["loss_saved_bytes_per_logit"] * sb * spec.vocab_padded / layout.tp
    sp_div = np.where(layout.sequence_parallel == 1, layout.tp, 1)
    final = sb * spec.hidden * compute_dtype_bytes(layout) * 2 / sp_div  # final norm input + output
    loss_phase = final + logits_saved + logits_grad_cached
    one_stage = activations - rebuilt - logits_saved - final + np.maximum(loss_phase, rebuilt)
    staged = activations + np.maximum(0.0, logits_grad_cached - rebuilt)
    return np.where(layout.pp == 1, one_stage, staged)


def required_bytes(spec: ModelSpec, layout: Layout, system: System, terms: dict[str, np.ndarray],
                   cached_transient_bytes, prof: dict[str, np.ndarray], block_saved_less=0.0,
                   gathered_extra_bytes=0.0) -> np.ndarray:
    """Bytes alive at once at the step's peak, once the allocator has flushed its cache.

    `terms`: memory_arrays' terms with their `total_bytes`; `cached_transient_bytes`: the part of
    `fragmentation_bytes` that is freed transients (0 with a fixed fragmentation margin, which
    then stands for them); `prof`: the stack profiles' fields per candidate; `block_saved_less`: as
    for `memory.activation_bytes`; `gathered_extra_bytes`: what an MoE plan's ZeRO-3 gathered module holds beyond the
    view's (planner/moe_memory.py zero3_gathered_extra_bytes), released before the step like it.
    """
    cached = np.asarray(cached_transient_bytes, dtype=np.float64)
    sb = (layout.seq_len / layout.cp * layout.micro_batch).astype(np.float64)
    logits_grad = prof["loss_grad_bytes_per_logit"] * sb * spec.vocab_padded / layout.tp
    activations = np.asarray(terms["activations_bytes"], dtype=np.float64)
    live = backward_live_bytes(spec, layout, activations, np.minimum(cached, logits_grad), prof, block_saved_less)
    fp32_grads, step_peak = step_only_bytes(spec, layout, system, prof["main_grads_fp32"],
                                              prof["grad_bucket_params"])
    gathered = gathered_bytes(spec, layout) + np.asarray(gathered_extra_bytes, dtype=np.float64)
    # backward-only: ZeRO-3's gathered modules, DeepSpeed ZeRO-1's gradients outside the rank's partition
    backward = gathered + zero1_reduced_grads_bytes(spec, layout, system, prof["main_grads_fp32"],
                                                    prof["grad_bucket_params"])
    resident = np.asarray(terms["total_bytes"], dtype=np.float64) - cached - fp32_grads - activations - backward
    return resident + np.maximum(live + backward, step_peak)


def gathered_bytes(spec: ModelSpec, layout: Layout) -> np.ndarray:
    """ZeRO-3's gathered module and its 16-bit gradients (counted in `memory.weights_bytes` and
    `grads_bytes`): alive in forward and backward only, released before the optimizer step."""
    from planner.memory import _unit_params, compute_dtype_bytes

    zero3 = layout.sharding == SHARD["zero3"]
    return np.where(zero3, 2.0 * compute_dtype_bytes(layout) * _unit_params(spec, layout), 0.0)
