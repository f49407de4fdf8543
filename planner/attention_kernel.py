"""Which fused attention kernel a stack runs, and its speed (data: catalog/gpus/*.toml).

The GPU's `attention_efficiency` curve is FlashAttention-2 (PyTorch SDPA's flash backend).
Transformer Engine's DotProductAttention picks cuDNN's fused attention over FlashAttention on
Hopper ("Disabling FlashAttention to give FusedAttention preference on Hopper+ for performance
reasons", transformer_engine/pytorch/attention.py get_attention_backend), which runs ~1.6x
FlashAttention-2 there (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608, Fig. 5-6). A stack
profile with `cudnn_attention = true` uses the GPU's `cudnn_attention_efficiency` curve where the
catalog has one (Hopper), else the FlashAttention-2 curve.

Passes. Every curve is a forward+backward rate in FlashAttention's benchmark convention
(Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py: `f = 4*batch*seqlen**2*nheads*headdim
// (2 if causal else 1)`, fwd_bwd = 3.5 * f): the fused backward recomputes QK^T and the softmax and runs 5
matmuls to the forward's 2 (Dao 2023, FlashAttention-2, Algorithm 2), i.e. 2.5 forwards. A fused kernel's
step therefore takes 3.5 forwards at the curve's rate; eager attention's backward is 2 GEMMs per forward
GEMM (3 forwards), as a linear layer's. Model FLOPs (MFU) keep the 3x convention (planner/flops.py).
"""

from __future__ import annotations

import math

import numpy as np

from hardware.models import GPU
from planner.layout import ATTN

# forward + backward of a fused attention kernel, in forwards (flash-attention benchmark_flash_attention.py: fwd_bwd = 3.5 * f)
FUSED_FWD_BWD_PASSES = 3.5
EAGER_FWD_BWD_PASSES = 3.0  # unfused scores: backward = 2 GEMMs per forward GEMM
# FA2 paper sec. 4: FA2 is 1.3-2.5x faster than FlashAttention in Triton (fwd + bwd); the geometric middle
TRITON_FA2_RANGE = (1.3, 2.5)
TRITON_SLOWDOWN = math.sqrt(TRITON_FA2_RANGE[0] * TRITON_FA2_RANGE[1])


def curves(gpu: GPU) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(FlashAttention-2 curve, cuDNN curve) as (seq_len, fraction) points; the cuDNN one falls
    back to FlashAttention-2 on GPUs without cuDNN data."""
    fa2 = [(p.seq_len, p.fraction) for p in gpu.attention_efficiency]
    cudnn = [(p.seq_len, p.fraction) for p in gpu.cudnn_attention_efficiency] or fa2
    return fa2, cudnn


def uses_cudnn(attention, cudnn) -> np.ndarray:
    """Whether a candidate runs cuDNN's kernel: `cudnn` named, or `flash` on a stack whose profile says
    cudnn_attention (`cudnn`, per candidate); flash2 and triton never do."""
    attention = np.asarray(attention)
    return (attention == ATTN["cudnn"]) | ((attention == ATTN["flash"]) & (np.asarray(cudnn) > 0))


def efficiency(gpu: GPU, seq_len, head_dim: int, cudnn, attention=ATTN["flash"]) -> np.ndarray:
    """Share of the 16-bit peak of the fused attention kernel a candidate runs (`cudnn`: the profile's
    cudnn_attention, `attention`: the plan's kernel code, both per candidate), before `slowdown`."""
    from planner.flops import attention_efficiency

    fa2, cud = curves(gpu)
    return np.where(uses_cudnn(attention, cudnn), attention_efficiency(cud, seq_len, head_dim),
                    attention_efficiency(fa2, seq_len, head_dim))


def slowdown(attention) -> np.ndarray:
    """Time factor of the plan's fused kernel over the curve it is charged at: TRITON_SLOWDOWN for
    FlashAttention in Triton, 1 for the others."""
    return np.where(np.asarray(attention) == ATTN["triton"], TRITON_SLOWDOWN, 1.0)


def passes(eager, recomputed) -> np.ndarray:
    """Forward-equivalents of attention-core time per step: forward + backward (3.5 fused, 3 eager) plus
    the forwards activation checkpointing repeats (`recomputed`), each at the curve's forward+backward rate."""
    return np.where(np.asarray(eager, dtype=bool), EAGER_FWD_BWD_PASSES, FUSED_FWD_BWD_PASSES) + recomputed
