"""DeepSeek-V3's memory-saving training recipe as planner options (pure, vectorised): what a block no
longer keeps for backward, the smaller optimizer moments and what the extra recompute costs.

DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv 2412.19437):
- `Settings.recompute_norms_mla_up`, sec. 3.2.3 "Recomputation of RMSNorm and MLA Up-Projection. We
  recompute all RMSNorm operations and MLA up-projections during back-propagation, thereby eliminating
  the need to persistently store their output activations": a block keeps no norm output (the attention
  and MLP inputs, 2 sbh) and, with MLA (planner/mla.py), neither the normed latents nor the
  decompressed Q, K, V; it keeps the latents c^Q, [c^KV; k^R] and the core's output. The up-projections
  (q_b_proj, kv_b_proj) run again in backward: their forward GEMM FLOPs once more.
- `Settings.fp8_activation_cache` (plans in fp8 only), sec. 3.3 "the FP8 Wgrad GEMM allows activations
  to be stored in FP8 for use in the backward pass" and sec. 3.3.2 "Low-Precision Activation":
  (1) "Inputs of the Linear after the attention operator ... a customized E5M6 data format" (12 bits,
  1.5 B); (2) "Inputs of the SwiGLU operator in MoE ... we cache the inputs of the SwiGLU operator and
  recompute its output in the backward pass. These activations are also stored in FP8": a SwiGLU MLP
  keeps 2 sbf bytes (gate and up outputs, FP8) of the sbf elements planner/memory.py counts (the stack's
  swiglu_saved_sbf: 4 under autograd, its inputs, silu's output and the down-projection's input); the norm outputs (linear inputs) in FP8 where not
  recomputed. FP8 tensors carry one fp32 scale per 1x128 tile (sec. 3.3.1). The routed copies of an MoE
  layer received in FP8 (sec. 3.3.2, "quantize the activation before MoE up-projections into FP8 and
  then apply dispatch components") are kept as received: planner/moe_memory.py.
- `Settings.optimizer_moments_bf16`, sec. 3.3.2 "Low-Precision Optimizer States. We adopt the BF16 data
  format instead of FP32 to track the first and second moments in the AdamW optimizer ... However, the
  master weights (stored by the optimizer) and gradients (used for batch size accumulation) are still
  retained in FP32": AdamW's moments 2 x 2 B instead of 2 x 4 B; masters and gradients as they were.
"""

from __future__ import annotations

import numpy as np

from planner import mla, parallel_block
from planner.layout import CKPT, OPTIM, PREC, Layout

FP8_BYTES = 1.0
E5M6_BYTES = 1.5  # 1 sign + 5 exponent + 6 mantissa bits
TILE_SCALE_BYTES = 4.0 / 128  # one fp32 scale per 1x128 tile of activations (sec. 3.3.1)


def _norm_outputs(spec) -> int:
    """s*b*h tensors of a block that are norm outputs (planner/parallel_block.norm_side_tensors less the
    norm inputs: 2 of 4 in a sequential block, the shared input once in a parallel one)."""
    return parallel_block.norm_side_tensors(spec) - (1 if spec.parallel_block else 2)


def fp8_cached(layout: Layout, settings) -> np.ndarray:
    """Plans whose linear inputs are cached in FP8: the option on and the plan in fp8."""
    return np.asarray(bool(getattr(settings, "fp8_activation_cache", False)) & (layout.precision == PREC["fp8"]))


def block_bytes_saved(spec, layout: Layout, settings, swiglu_sbf=4.0) -> np.ndarray:
    """Bytes per micro batch that one block (of the dense or active view) keeps less than
    planner/memory.layer_activation_bytes counts, under the options of this module; `swiglu_sbf`: the
    SwiGLU tensors it counts (the stack's swiglu_saved_sbf)."""
    from planner.memory import compute_dtype_bytes

    t = np.asarray(layout.tp, dtype=np.float64)
    sb = np.asarray(layout.seq_len / layout.cp * layout.micro_batch, dtype=np.float64)
    a = compute_dtype_bytes(layout).astype(np.float64)
    sp_div = np.where(layout.sequence_parallel == 1, t, 1.0)
    recompute = bool(getattr(settings, "recompute_norms_mla_up", False))
    fp8 = fp8_cached(layout, settings)
    fp8_el = FP8_BYTES + TILE_SCALE_BYTES
    norm_out = _norm_outputs(spec) * sb * spec.hidden / sp_div  # elements
    saved = np.zeros(np.broadcast(t, sb, a).shape)
    if recompute:
        saved = saved + norm_out * a
        if mla.is_mla(spec):  # normed latents, Q, K (n d_qk each) and V (n d_v): mla.saved_elements_per_token
            latent = (spec.q_lora_rank or 0) + spec.kv_lora_rank
            qkv = spec.n_heads * (2 * mla.qk_head_dim(spec) + spec.v_head_dim) / t
            saved = saved + sb * (latent + qkv) * a
    else:
        saved = saved + fp8 * norm_out * (a - fp8_el)
    out_width = spec.n_heads * spec.v_head_dim if mla.is_mla(spec) else spec.hidden  # o_proj's input
    saved = saved + fp8 * sb * out_width / t * np.maximum(a - E5M6_BYTES, 0.0)
    if spec.mlp == "swiglu":  # swiglu_sbf sbf elements counted; 2 sbf kept in FP8
        saved = saved + fp8 * sb * spec.ffn / t * np.maximum(swiglu_sbf * a - 2.0 * fp8_el, 0.0)
    return saved


def optimizer_factor(spec, layout: Layout, settings, amp=False) -> np.ndarray:
    """memory.optimizer_bytes' AdamW states + fp32 master per parameter with BF16 moments, over the
    same with FP32 moments (1 where the option is off or the moments are already 16-bit)."""
    from planner.memory import _is_mixed, master_bytes_per_param, optimizer_state_bytes_per_param

    if not getattr(settings, "optimizer_moments_bf16", False):
        return np.ones(np.shape(layout.tp))
    states = optimizer_state_bytes_per_param(spec, layout)
    master = master_bytes_per_param(layout, amp)  # (amp: torch DDP under autocast, no separate master)
    adamw_fp32 = (layout.optimizer == OPTIM["adamw"]) & _is_mixed(layout)
    return np.where(adamw_fp32, (states / 2.0 + master) / (states + master), 1.0)


def recompute_gemm_share(spec, layout: Layout, settings) -> np.ndarray:
    """Forward block-GEMM time a block runs once more in backward, as a share of its forward GEMM
    time: the MLA up-projections (at the block's mean GEMM rate), where the block is not recomputed
    whole anyway (full / blocks checkpointing) nor by per-op AC."""
    if not getattr(settings, "recompute_norms_mla_up", False) or not mla.is_mla(spec):
        return np.zeros(np.shape(layout.tp))
    from planner import flops

    t = np.asarray(layout.tp, dtype=np.float64)
    up = sum(2.0 * lin.out * lin.inp for lin in mla.linears(spec) if lin.name in ("q_b_proj", "kv_b_proj")) / t
    block = sum(per_token for per_token, _ in flops.block_gemms(spec, np.ones(np.shape(t)), layout.tp))
    ck = layout.activation_checkpointing
    not_rebuilt = np.select([ck == CKPT["full"], ck == CKPT["blocks"], ck == CKPT["op"]],
                            [0.0, 1.0 - layout.checkpoint_fraction, 0.0], default=1.0)
    return not_rebuilt * up / block


__all__ = ["block_bytes_saved", "fp8_cached", "optimizer_factor", "recompute_gemm_share"]
