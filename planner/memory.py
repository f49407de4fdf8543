"""Memory model: bytes per GPU (and host bytes per node) of an execution plan.

Pure functions over (ModelSpec, Layout, System, Settings). Layout fields may be numpy arrays
(many plans at once) or 0-d arrays (one plan); every function returns the same shape.

Model states follow the ZeRO paper's accounting (Rajbhandari et al. 2020, sec. 3: 2 bytes
16-bit params + 2 bytes 16-bit grads + K=12 bytes fp32 master/momentum/variance) extended the way
DeepSpeed's own estimators count them (`estimate_zero2_model_states_mem_needs`: 2P + 18P/N, i.e.
also 4 bytes of fp32 gradient partition). Activations follow Korthikanti et al. 2022
("Reducing Activation Recomputation in Large Transformer Models", sec. 4) tensor by tensor.
"""

from __future__ import annotations

import numpy as np

from planner import main_grads, mla, parallel_block, ssm, stage_split
from planner.comm_buffers import comm_buffer_bytes, ddp_bucket_copy_bytes  # noqa: F401 (comm_buffer_bytes: re-exported)
from planner.activation_terms import eager_scores_saved_bytes, op_sac_block_bytes, pipeline_outputs_bytes
from planner.layout import CKPT, OFFLOAD, OPTIM, PREC, SHARD, ATTN, Layout
from planner.model import ModelSpec
from planner.shard_units import unit_params as _unit_params
from planner.settings import Settings
from planner.system import System

GIB = 2**30


# ---------------------------------------------------------------------------------------
# bytes per element
def compute_dtype_bytes(layout: Layout) -> np.ndarray:
    """Bytes of the 16-bit (or fp32) working copy of params and activations."""
    return np.where(layout.precision == PREC["fp32"], 4, 2)


def _is_mixed(layout: Layout) -> np.ndarray:
    """fp16/bf16 mixed precision: 16-bit compute, fp32 master weights (Micikevicius et al. 2018);
    fp8 training keeps the same states (fp8 copies are transient casts of the 16-bit ones)."""
    p = layout.precision
    return (p == PREC["fp16"]) | (p == PREC["bf16"]) | (p == PREC["fp8"])


def stage_layers(spec: ModelSpec, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(heaviest, lightest) number of blocks on a pipeline stage (planner/stage_split.py: pp need
    not divide n_layers; the first and last stages may be given their own counts)."""
    sp = stage_split.of_layout(spec.n_layers, layout)
    return sp.heaviest, np.minimum(np.minimum(sp.first, sp.last), sp.heaviest)


# ---------------------------------------------------------------------------------------
# parameter counts per GPU
def params_per_gpu(spec: ModelSpec, layout: Layout) -> np.ndarray:
    """Parameters one GPU holds before data-parallel sharding: its pipeline stage, split by tp.

    The first stage (embeddings + L/pp layers) is the largest; tensor parallelism splits every
    matrix, embedding included (vocab-parallel, Shoeybi et al. 2019); the replicated norms are
    small and counted as split too.
    """
    sp = stage_split.of_layout(spec.n_layers, layout)
    first_stage_extra = spec.vocab_padded * spec.hidden
    if spec.position == "learned":
        first_stage_extra += spec.max_positions * spec.hidden
    staged = np.maximum(np.maximum(sp.middle, sp.last) * spec.params_per_layer,
                        sp.first * spec.params_per_layer + first_stage_extra)
    single = spec.n_layers * spec.params_per_layer + spec.embedding_params
    return np.where(layout.pp == 1, single, staged) / layout.tp


def shard_degree(layout: Layout, system: System) -> np.ndarray:
    """Ranks that share one copy of the sharded model states.

    ZeRO and FSDP shard over the whole data-parallel group, context-parallel ranks included
    (torchtitan's dp_shard x cp mesh); FSDP hybrid shards inside a node and replicates across
    nodes (PyTorch HYBRID_SHARD / 2-D device mesh).
    """
    dp = (layout.dp * layout.cp).astype(np.int64)
    per_node = np.maximum(1, system.gpus_per_node // (layout.tp * layout.pp)).astype(np.int64)
    hybrid = np.gcd(dp, per_node)
    sharded = np.where(layout.sharding == SHARD["fsdp_hybrid"], hybrid, dp)
    return np.where(layout.sharding == SHARD["none"], 1, sharded)


# ---------------------------------------------------------------------------------------
# model states
def optimizer_state_bytes_per_param(spec: ModelSpec, layout: Layout) -> np.ndarray:
    """Optimizer state bytes per parameter, master weights excluded.

    AdamW: momentum + variance (Loshchilov & Hutter 2019), fp32 = 8 B, or 4 B in pure bf16.
    SGD: momentum, 4 B (2 in pure bf16). Adafactor (Shazeer & Stern 2018): factored second
    moment, 4*(rows+cols) per matrix and 4*n per vector, no momentum.
    """
    pure = layout.precision == PREC["bf16_pure"]
    adam = np.where(pure, 4.0, 8.0)
    sgd = np.where(pure, 2.0, 4.0)
    adafactor = _adafactor_bytes_per_param(spec)
    return np.select(
        [layout.optimizer == OPTIM["adamw"], layout.optimizer == OPTIM["sgd"]],
        [adam, sgd],
        default=adafactor,
    )


def _adafactor_bytes_per_param(spec: ModelSpec) -> float:
    def state(shapes: list[tuple[int, ...]]) -> int:
        return sum(4 * (s[0] + s[1]) if len(s) == 2 else 4 * s[0] for s in shapes)

    total = state(spec.layer_param_shapes()) * spec.n_layers + state(spec.other_param_shapes())
    return total / spec.n_params


def master_bytes_per_param(layout: Layout, amp=False) -> np.ndarray:
    """fp32 master copy kept by the optimizer, apart from the parameters themselves.

    Mixed precision keeps 16-bit params and an fp32 master in the optimizer (Micikevicius et al.
    2018): DeepSpeed ZeRO (which also keeps a separate fp32 clone of the partition when training
    in fp32), and DDP counted as Megatron-LM / Apex O2 and the ZeRO paper's baseline do (16 B per
    param: 2 params + 2 grads + 12 optimizer). FSDP stores fp32 shards that are their own
    master (counted in weights); pure bf16 keeps none; nor does torch DDP under autocast (`amp`,
    planner/main_grads.py amp_ddp: its fp32 parameters, counted in weights, are the master).
    """
    ds = layout.is_deepspeed & (layout.precision != PREC["bf16_pure"])
    ddp = (layout.sharding == SHARD["none"]) & _is_mixed(layout) & ~np.asarray(amp, dtype=bool)
    return np.where(ds | ddp, 4.0, 0.0)


def weights_bytes(spec: ModelSpec, layout: Layout, system: System, p=None, n=None, amp=False) -> np.ndarray:
    """Parameter bytes resident on one GPU (working copies; fp32 masters count as optimizer).

    - none (DDP): params in the compute dtype (2 B; 4 B in fp32); the fp32 master under mixed
      precision is counted with the optimizer (Megatron-LM / Apex O2 layout). torch DDP under
      autocast (`amp`, planner/main_grads.py amp_ddp) keeps fp32 params, 4 B, their own master
      (autocast's 16-bit copies are per-op transients).
    - ZeRO-1/2: 16-bit params replicated (2 B; fp32 training: 4 B).
    - ZeRO-3: 16-bit partition 2P/N plus the largest gathered module (DeepSpeed's estimator
      counts 4 B per largest-layer param for params + grads, here 2 B + 2 B in grads).
    - FSDP: the sharded parameters are stored in fp32 for mixed precision (MixedPrecisionPolicy
      casts on all-gather), plus the unsharded 16-bit units in flight (current + prefetched);
      SHARD_GRAD_OP keeps all unsharded params from forward to backward.
    - optimizer+params offload: parameter partitions live in host memory; only gathered
      modules are on the GPU.
    `p`, `n`: parameters per GPU and their shard degree, where not the model's (MoE experts: moe_memory.py).
    """
    p = params_per_gpu(spec, layout) if p is None else p
    n = shard_degree(layout, system) if n is None else n
    c = compute_dtype_bytes(layout)
    unit = _unit_params(spec, layout)
    mixed = _is_mixed(layout)
    param_offload = layout.offload == OFFLOAD["optimizer+params"]
    s = layout.sharding

    ddp = np.where(amp, 4.0, c) * p
    zero12 = c * p
    zero3 = np.where(param_offload, 0.0, c * p / n) + c * unit
    fsdp_store = np.where(mixed, 4.0, c)  # sharded storage dtype
    fsdp_units = 2 * c * unit  # current + prefetched unit
    fsdp_full = np.where(param_offload, 0.0, fsdp_store * p / n) + fsdp_units
    fsdp_sgo = np.where(param_offload, 0.0, fsdp_store * p / n) + c * p
    return np.select(
        [s == SHARD["none"], (s == SHARD["zero1"]) | (s == SHARD["zero2"]), s == SHARD["zero3"],
         s == SHARD["fsdp_shard_grad_op"]],
        [ddp, zero12, zero3, fsdp_sgo],
        default=fsdp_full,
    )


def grads_bytes(spec: ModelSpec, layout: Layout, system: System, p=None, n=None, main_fp32=False, amp=False) -> np.ndarray:
    """Gradient bytes on one GPU.

    - none (DDP): grads in the params' dtype, full size: fp32 under torch DDP with autocast (`amp`,
      planner/main_grads.py amp_ddp), the 4 bytes planner/dp_comm.py all-reduces.
    - ZeRO-1: full 16-bit grads + the fp32 gradient partition 4P/N (DeepSpeed's "4 grads_32bit").
    - ZeRO-2: 16-bit partition 2P/N + fp32 partition 4P/N (as DeepSpeed's estimator counts).
    - ZeRO-3: the reduced partition in the compute dtype + the fp32 copy the optimizer step
      makes of it (measured on DeepSpeed 0.19; DeepSpeed's estimator omits the 2P/N of the
      16-bit partition) + the gathered module's 16-bit grads.
    - With optimizer offload the fp32 partition lives on the host and the 16-bit partition is
      copied out as it is reduced (DeepSpeed's estimate: 2P on GPU for ZeRO-2).
    - FSDP: sharded grads in the storage dtype (fp32 under mixed precision) + one unsharded
      unit of 16-bit grads before its reduce-scatter.
    - `main_fp32` (the stack's main_grads_fp32): the fp32 main-gradient buffer of the whole stage,
      4P, and no other copy (planner/main_grads.py: Megatron-Core).
    `p`, `n`: as for weights_bytes.
    """
    p = params_per_gpu(spec, layout) if p is None else p
    n = shard_degree(layout, system) if n is None else n
    c = compute_dtype_bytes(layout)
    unit = _unit_params(spec, layout)
    mixed = _is_mixed(layout)
    offload = layout.offload != OFFLOAD["none"]
    # the fp32 gradient partition the optimizer steps on (mixed precision only; in fp32 the
    # reduced grads already are fp32, in pure bf16 there is no fp32 copy)
    fp32_part = np.where(offload | ~mixed, 0.0, 4.0 * p / n)
    part16 = np.where(offload, 0.0, c * p / n)  # the reduced partition in the compute dtype
    s = layout.sharding

    ddp = np.where(amp, 4.0, c) * p
    zero1 = c * p + fp32_part
    zero2 = part16 + fp32_part
    # ZeRO-3. Measured on the bundled trainer (DeepSpeed 0.19, fp32): the reduced partition stays in
    # `grad_partitions_flat_buffer` (compute dtype, allocated once) and the optimizer step
    # flattens it into a new fp32 tensor (`_prepare_fp32_grad_for_sub_group`, a copy even in
    # fp32): both are held at the step.
    step_copy = np.where(offload | (layout.precision == PREC["bf16_pure"]), 0.0, 4.0 * p / n)
    zero3 = part16 + step_copy + c * unit
    fsdp_store = np.where(mixed, 4.0, c)
    fsdp = np.where(offload, 0.0, fsdp_store * p / n) + c * unit
    out = np.select(
        [s == SHARD["none"], s == SHARD["zero1"], s == SHARD["zero2"], s == SHARD["zero3"]],
        [ddp, zero1, zero2, zero3],
        default=fsdp,
    )
    return np.where(main_grads.buffer_on(layout, main_fp32), 4.0 * p, out)


def optimizer_bytes(spec: ModelSpec, layout: Layout, system: System, p=None, n=None, amp=False) -> np.ndarray:
    """Optimizer states + fp32 master weights on one GPU (0 when offloaded to the host); `p`, `n`, `amp`: as
    for weights_bytes."""
    p = params_per_gpu(spec, layout) if p is None else p
    n = np.where(layout.shards_optimizer, shard_degree(layout, system) if n is None else n, 1)
    per_param = optimizer_state_bytes_per_param(spec, layout) + master_bytes_per_param(layout, amp)
    on_gpu = layout.offload == OFFLOAD["none"]
    return np.where(on_gpu, per_param * p / n, 0.0)


# ---------------------------------------------------------------------------------------
# activations
def layer_activation_bytes(spec: ModelSpec, layout: Layout, softmax_fp32=0.0, swiglu_sbf=4.0) -> np.ndarray:
    """Bytes one transformer block saves for backward, per micro batch, without recompute.

    Korthikanti et al. 2022 sec. 4.1, tensor by tensor (a dropout-free model; their 34sbh +
    5as^2b counts dropout masks too): norm inputs 2x sbh, attention and MLP inputs 2x sbh,
    q/k/v (GQA: k and v are kv_heads/heads of q), attention output sbh; eager attention keeps
    the softmax probabilities (a s^2 b per head), SDPA/flash keeps the output and the
    log-sum-exp instead (Dao et al. 2022); GELU MLP 2 sbf, SwiGLU `swiglu_sbf` sbf (the stack's
    swiglu_saved_sbf: 4 under autograd, 3 with a fused kernel, hardware/stacks.py). Tensor parallelism
    splits everything inside attention and MLP by t; sequence parallelism also splits the
    norm/residual tensors (Korthikanti eq. 4-5); context parallelism splits the sequence by cp
    (ring attention, Liu et al. 2023). Norms also keep fp32 mean/rstd per token.
    """
    s, b, h, t = layout.seq_len / layout.cp, layout.micro_batch, spec.hidden, layout.tp
    a = compute_dtype_bytes(layout)
    sb = (s * b).astype(np.float64)
    sp_div = np.where(layout.sequence_parallel == 1, t, 1)
    heads = spec.n_heads / t
    n_stats = 1 if spec.norm == "rmsnorm" else 2  # rstd, or mean and rstd
    norm_stats = parallel_block.norms_run(spec) * n_stats * 4 * sb / sp_div
    # 2 norm inputs + 2 norm outputs; a parallel attention+MLP block shares its input
    replicated = parallel_block.norm_side_tensors(spec) * sb * h * a / sp_div + norm_stats
    qkv = sb * (h + 2 * spec.kv_dim) * a / t
    attn_out = sb * h * a / t
    if mla.is_mla(spec):  # multi-head latent attention: latents, decompressed Q/K/V (planner/mla.py)
        qkv = sb * (mla.saved_elements_per_token(spec, t, sp_div) * a + 4.0 * mla.latent_norm_stats_per_token(spec))
        attn_out = 0.0
    core = np.where(layout.attention == ATTN["eager"], _eager_core_bytes(spec, layout, softmax_fp32), heads * sb * 4)
    mlp = sb * spec.ffn * a / t * (swiglu_sbf if spec.mlp == "swiglu" else 2)
    if spec.layer_pattern is not None:  # a hybrid stack's layer mean (planner/ssm_memory.py)
        from planner.ssm_memory import hybrid_layer_bytes

        return hybrid_layer_bytes(spec, layout, sb, a, sp_div, replicated, qkv + attn_out + core, mlp)
    return replicated + qkv + attn_out + core + mlp


def _eager_core_bytes(spec: ModelSpec, layout: Layout, softmax_fp32=0.0) -> np.ndarray:
    """Softmax probabilities of eager attention: local queries x all keys, per head; where the
    stack's softmax runs in fp32 (`softmax_fp32`), its fp32 output too (activation_terms.py)."""
    s = layout.seq_len.astype(np.float64)
    per_score = eager_scores_saved_bytes(compute_dtype_bytes(layout), softmax_fp32)
    return (spec.n_heads / layout.tp) * layout.micro_batch * (s / layout.cp) * s * per_score


def activation_bytes(spec: ModelSpec, layout: Layout, loss_bytes_per_logit=4.0,
                     pipeline_outputs_kept=0.0, softmax_fp32=0.0, block_saved_less=0.0, swiglu_sbf=4.0) -> np.ndarray:
    """Activation bytes on the busiest GPU.

    - full recompute keeps each block's input (sbh, /t with sequence parallelism) and
      rebuilds one block at a time in backward (Chen et al. 2016; Korthikanti sec. 5);
      "blocks" does so for a fraction of the blocks and keeps everything of the others;
    - selective recompute drops the attention core (softmax probabilities, Korthikanti
      sec. 5: the 5as/h term); with flash attention there is little left to drop;
    - per-op selective AC ("op") keeps every other matmul output (activation_terms.py);
    - pipeline parallelism: with 1F1B the first stage holds `pp` micro batches in flight
      (Narayanan et al. 2021), interleaving multiplies by (1 + (p-1)/(p*v)) (Korthikanti eq. 6);
      with uneven stages the second stage (one more block, pp-1 in flight) may be the busiest;
    - the output layer: what the cross-entropy loss keeps of the s*b*V/t logits (the stack's
      `loss_saved_bytes_per_logit`: an fp32 softmax, Megatron's vocab-parallel loss and
      torchtitan's `.float()`, or 16-bit), on the last stage (the first when pp = 1);
    - the stage outputs a pipeline engine keeps per micro batch in flight (activation_terms.py).
    """
    s, b, h, t = layout.seq_len / layout.cp, layout.micro_batch, spec.hidden, layout.tp
    a = compute_dtype_bytes(layout)
    sb = (s * b).astype(np.float64)
    sp_div = np.where(layout.sequence_parallel == 1, t, 1)
    per_layer = layer_activation_bytes(spec, layout, softmax_fp32, swiglu_sbf) - block_saved_less
    eager = np.where(layout.attention == ATTN["eager"], _eager_core_bytes(spec, layout, softmax_fp32), 0.0)
    eager = eager * ssm.attention_share(spec)  # a hybrid stack: its attention layers' share (planner/ssm.py)
    layer_input = sb * h * a / sp_div
    ck = layout.activation_checkpointing
    frac = np.where(ck == CKPT["blocks"], layout.checkpoint_fraction, 1.0)
    # DeepSpeed cpu_checkpointing: the checkpointed block inputs wait in host memory
    ckpt_input = np.where(layout.activation_offload == 1, 0.0, layer_input)
    per_block = np.select(
        [ck == CKPT["none"], ck == CKPT["selective"], ck == CKPT["op"], ck == CKPT["blocks"]],
        [per_layer, per_layer - eager, op_sac_block_bytes(spec, layout),
         (1.0 - frac) * per_layer + frac * ckpt_input],
        default=ckpt_input,
    )
    # recomputing a block rebuilds one block of one micro batch at a time during backward
    working = np.where((ck == CKPT["full"]) | (ck == CKPT["blocks"]), per_layer, 0.0)
    sp = stage_split.of_layout(spec.n_layers, layout)
    in_flight = np.where(layout.pp > 1, np.minimum(layout.pp, layout.grad_accum), 1)
    interleave = np.where(layout.vpp > 1, 1 + (layout.pp - 1) / (layout.pp * layout.vpp), 1.0)
    # the first stage: its blocks for each micro batch in flight and, interleaved, (p-1)/p more of
    # its first chunk per micro batch (Megatron's warm-up runs 2(p-1) + (v-1)p forwards, chunk 0
    # first: with equal chunks, Korthikanti eq. 6's 1 + (p-1)/(p v)); the second stage (the
    # heaviest middle one here) has one micro batch less in flight
    first_held = in_flight * (sp.first + (layout.vpp > 1) * (layout.pp - 1) / layout.pp * sp.first_head)
    held = np.maximum(first_held, sp.middle * np.maximum(in_flight - 1, 1) * interleave)
    first_stage = per_block * held + working
    first_stage = first_stage + pipeline_outputs_bytes(spec, layout, pipeline_outputs_kept)
    logits = sb * spec.vocab_padded / t * loss_bytes_per_logit
    final = sb * h * a * 2 / sp_div  # final norm input + output
    last_stage = per_block * sp.last + working + logits + final
    return np.where(layout.pp == 1, first_stage + logits + final, np.maximum(first_stage, last_stage))


def transient_bytes(spec: ModelSpec, layout: Layout, grad_bytes_per_logit=4.0) -> np.ndarray:
    """The largest short-lived buffers of a step that the caching allocator keeps reserved:
    the gradient of the logits (s*b*V/t next to what the loss kept; fp32, or none where a
    fused loss writes it in place) and the 16-bit working copy of the largest gathered or
    recomputed module."""
    sb = (layout.seq_len / layout.cp * layout.micro_batch).astype(np.float64)
    logits_grad = grad_bytes_per_logit * sb * spec.vocab_padded / layout.tp
    return logits_grad + compute_dtype_bytes(layout) * _unit_params(spec, layout)


# ---------------------------------------------------------------------------------------
# buffers, overhead, total
def memory_arrays(spec: ModelSpec, layout: Layout, system: System, settings: Settings) -> dict[str, np.ndarray]:
    """Every memory term for every plan in `layout` (bytes), plus totals and capacities. A mixture-of-
    experts model: the terms of its active view plus its experts' (planner/moe_memory.py)."""
    from planner import fp8_saved, memory_savings as ms, moe, moe_memory, zeropp  # ms: DeepSeek-V3's options

    moe_spec, spec = spec, moe.dense_view(spec)
    shape = np.shape(layout.tp)
    capacity = system.gpu.hbm_gib * GIB
    from planner.fp8 import weight_cache_bytes as fp8_weight_cache_bytes
    from planner.context_parallel import buffer_bytes as cp_buffer_bytes  # it builds on this module
    from planner.memory_required import required_bytes
    from planner.settings import stack_profiles
    from planner.stacks import per_candidate

    prof = per_candidate(stack_profiles(settings), layout)
    # the fp32 main-gradient buffer where the profile keeps one or Megatron-Core's DDP reduces in fp32
    prof = {**prof, "main_grads_fp32": main_grads.resident_fp32(layout, prof, system.grad_reduce_bytes)}
    cached = np.zeros(shape)  # freed transients the allocator keeps (planner/memory_required.py)
    if settings.fragmentation_margin is not None:
        reserve = np.full(shape, settings.fragmentation_margin * capacity)
    else:  # the stack's caching-allocator model
        cached = prof["allocator_transient_factor"] * transient_bytes(spec, layout, prof["loss_grad_bytes_per_logit"])
        reserve = prof["allocator_fraction"] * capacity + cached
    saved_less = (ms.block_bytes_saved(spec, layout, settings, prof["swiglu_saved_sbf"])
                  + fp8_saved.block_bytes_less(spec, layout, settings, moe_spec is spec))
    amp = main_grads.amp_ddp(layout, prof["grad_bucket_params"])  # torch DDP under autocast: fp32 params and grads
    out = {
        "weights_bytes": weights_bytes(spec, layout, system, amp=amp) + fp8_weight_cache_bytes(spec, layout, settings)
        + zeropp.secondary_partition_bytes(spec, layout, compute_dtype_bytes(layout)),
        "grads_bytes": grads_bytes(spec, layout, system, main_fp32=prof["main_grads_fp32"], amp=amp),
        "optimizer_bytes": optimizer_bytes(spec, layout, system, amp=amp),
        "activations_bytes": activation_bytes(spec, layout, prof["loss_saved_bytes_per_logit"],
                                              prof["pipeline_outputs_kept"], prof["eager_softmax_fp32"],
                                              saved_less, prof["swiglu_saved_sbf"]),
        "comm_buffers_bytes": comm_buffer_bytes(spec, layout, prof["main_grads_fp32"], prof["grad_bucket_params"])
        + cp_buffer_bytes(spec, layout, system.gpus_per_node)
        + zeropp.buffer_bytes(layout),
        "runtime_bytes": np.full(shape, settings.runtime_overhead_gib * GIB),
        "fragmentation_bytes": np.broadcast_to(reserve, shape).astype(np.float64),
    }
    if moe_spec is not spec:
        out = moe_memory.with_experts(moe_spec, spec, layout, system, out, settings)
    out["comm_buffers_bytes"] = out["comm_buffers_bytes"] + ddp_bucket_copy_bytes(
        layout, out["grads_bytes"], prof["ddp_bucket_view"], prof["main_grads_fp32"], prof["grad_bucket_params"])
    out["optimizer_bytes"] = out["optimizer_bytes"] * ms.optimizer_factor(spec, layout, settings, amp)
    out["total_bytes"] = sum(np.asarray(v, dtype=np.float64) for v in out.values())
    gathered_extra = 0.0 if moe_spec is spec else moe_memory.zero3_gathered_extra_bytes(moe_spec, spec, layout)
    out["required_bytes"] = required_bytes(spec, layout, system, out, cached, prof, saved_less, gathered_extra)
    out["capacity_bytes"] = np.full(shape, capacity)
    from planner.host_memory import with_host  # it builds on this module
    return with_host(out, moe_spec, spec, layout, system, settings)
