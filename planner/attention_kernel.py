"""Which fused attention kernel a stack runs, and its speed (data: catalog/gpus/*.toml).

The GPU's `attention_efficiency` curve is FlashAttention-2 (PyTorch SDPA's flash backend).
Transformer Engine's DotProductAttention picks cuDNN's fused attention over FlashAttention on
Hopper ("Disabling FlashAttention to give FusedAttention preference on Hopper+ for performance
reasons", transformer_engine/pytorch/attention.py get_attention_backend), which runs ~1.6x
FlashAttention-2 there (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608, Fig. 5-6). A stack
profile with `cudnn_attention = true` uses the GPU's `cudnn_attention_efficiency` curve where the
catalog has one (Hopper), else the FlashAttention-2 curve.
"""

from __future__ import annotations

import numpy as np

from hardware.models import GPU


def curves(gpu: GPU) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(FlashAttention-2 curve, cuDNN curve) as (seq_len, fraction) points; the cuDNN one falls
    back to FlashAttention-2 on GPUs without cuDNN data."""
    fa2 = [(p.seq_len, p.fraction) for p in gpu.attention_efficiency]
    cudnn = [(p.seq_len, p.fraction) for p in gpu.cudnn_attention_efficiency] or fa2
    return fa2, cudnn


def efficiency(gpu: GPU, seq_len, head_dim: int, cudnn) -> np.ndarray:
    """Share of the 16-bit peak of the fused attention a candidate's stack runs (`cudnn`: the
    profile's cudnn_attention, per candidate)."""
    from planner.flops import attention_efficiency

    fa2, cud = curves(gpu)
    return np.where(np.asarray(cudnn) > 0, attention_efficiency(cud, seq_len, head_dim),
                    attention_efficiency(fa2, seq_len, head_dim))
