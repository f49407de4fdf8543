"""Activation-memory terms that depend on how a stack saves tensors (used by planner/memory.py).

- per-op selective activation checkpointing, as torchtitan implements it;
- the activation tensors a pipeline engine keeps per micro batch in flight;
- what eager attention keeps per attention score.
"""

from __future__ import annotations

import numpy as np

from planner.layout import ATTN, Layout
from planner.model import ModelSpec


def _dtype_bytes(layout: Layout) -> np.ndarray:
    from planner.memory import compute_dtype_bytes

    return compute_dtype_bytes(layout)


def op_sac_block_bytes(spec: ModelSpec, layout: Layout) -> np.ndarray:
    """Bytes one block keeps for backward under per-op selective AC, per micro batch.

    torchtitan's "op" policy (torchtitan/parallelisms/parallelize_llama.py `_apply_ac` @9dec370):
    "Saves output of all compute ops, except every second mm", counting matmuls per block; its
    save list holds aten.mm, the SDPA kernels and reduce-scatter. So a block keeps its input
    (the checkpoint's argument), the outputs of the 1st, 3rd, 5th, ... matmul in forward order
    (wq, wk, wv, wo, then w1, w3, w2 for SwiGLU or fc1, fc2 for GELU: wq, wv, w1, w2), and the
    fused attention's output with its fp32 log-sum-exp. Everything else is recomputed.
    Column-parallel outputs are split by tp; row-parallel outputs (wo, w2) and the block input by
    tp only with sequence parallelism (reduce-scatter), as in `memory.layer_activation_bytes`.
    """
    s, b, t = layout.seq_len / layout.cp, layout.micro_batch, layout.tp
    a = _dtype_bytes(layout)
    sb = (s * b).astype(np.float64)
    sp_div = np.where(layout.sequence_parallel == 1, t, 1)
    h, kv, f = spec.hidden, spec.kv_dim, spec.ffn
    col, row = 1.0 / t, 1.0 / sp_div  # per-token width divisors
    mm_outputs = [h * col, kv * col, kv * col, h * row]  # wq, wk, wv, wo
    mm_outputs += [f * col, f * col, h * row] if spec.mlp == "swiglu" else [f * col, h * row]
    saved_mm = sum(mm_outputs[0::2])
    flash = layout.attention != ATTN["eager"]
    attention = np.where(flash, h * col * a + 4.0 * spec.n_heads / t, 0.0)  # output + lse
    return sb * (h * row * a + saved_mm * a + attention)


def pipeline_outputs_bytes(spec: ModelSpec, layout: Layout, outputs_kept) -> np.ndarray:
    """Stage outputs a pipeline engine keeps until each in-flight micro batch's backward, on the
    first stage (the one with the most micro batches in flight).

    DeepSpeed's PipelineEngine stores every forward's output in `pipe_buffers['outputs']` and
    drops it only in `_exec_backward_pass`, with `TrainSchedule.num_pipe_buffers()` =
    min(stages - stage_id, micro_batches) buffers (deepspeed/runtime/pipe/engine.py, schedule.py);
    with activation checkpointing that output is no block's saved input, so it comes on top.
    Megatron-LM pseudo-frees it right after the send (`deallocate_output_tensor`, schedules.py).
    Interleaving keeps one per virtual stage in flight.
    """
    s, b, t = layout.seq_len / layout.cp, layout.micro_batch, layout.tp
    sp_div = np.where(layout.sequence_parallel == 1, t, 1)
    one = (s * b).astype(np.float64) * spec.hidden * _dtype_bytes(layout) / sp_div
    in_flight = np.minimum(layout.pp, layout.grad_accum)
    interleave = np.where(layout.vpp > 1, layout.vpp * (1 + (layout.pp - 1) / (layout.pp * layout.vpp)), 1.0)
    return np.where(layout.pp > 1, outputs_kept * one * in_flight * interleave, 0.0)


def eager_scores_saved_bytes(dtype_bytes, softmax_fp32) -> np.ndarray:
    """Bytes eager attention keeps for backward per attention score (per head, query and key).

    A 16-bit softmax (Megatron's fused scale-mask-softmax) keeps its output: the compute dtype.
    Hugging Face's eager attention runs the softmax in fp32 and casts back, e.g. BLOOM
    (transformers modeling_bloom.py, BloomAttention.forward: `F.softmax(attn_weights, dim=-1,
    dtype=torch.float32).to(input_dtype)`; Llama's eager_attention_forward the same): softmax's
    backward keeps its fp32 output (4 B) and the next bmm the 16-bit probabilities, 6 B in all
    under bf16/fp16 (an attention dropout of 0, BLOOM's and Llama's, keeps no mask). In fp32 the
    cast is a no-op: 4 B.
    """
    c = np.asarray(dtype_bytes, dtype=np.float64)
    return np.where((np.asarray(softmax_fp32) > 0) & (c < 4), c + 4.0, c)
