"""FLOPs of a training step and the achievable matmul throughput.

Every function is vectorised: `seq_len`, `tp`, `micro_batch`, ... may be numpy arrays (one
entry per candidate plan) or scalars. FLOPs count a multiply-add as 2.

Conventions (the ones Megatron-LM and PaLM use, so MFU/HFU compare with published tables):
- attention scores count the full s x s product (no causal halving);
- model FLOPs = 3 x forward (backward = 2 x forward); hardware FLOPs add what activation
  checkpointing recomputes (full: one more forward of the blocks; selective: the attention core).
"""

from __future__ import annotations

import numpy as np

from planner import attn_window, mla, moe, ssm
from planner.layout import CKPT
from planner.model import ModelSpec

# Default matmul efficiency (fraction of dense peak) by GEMM size in GFLOP, used when a GPU in
# the catalog has no curve of its own. Shape of cuBLAS GEMM micro-benchmarks (NVIDIA "Matrix
# Multiplication Background" guide): small GEMMs are latency/wave bound, large ones plateau.
DEFAULT_EFFICIENCY: tuple[tuple[float, float], ...] = (
    (0.01, 0.05), (0.1, 0.18), (1.0, 0.40), (8.0, 0.58), (64.0, 0.68), (512.0, 0.72),
)
# Without a measured curve for the GPU, fused attention reaches this share of the efficiency of a
# dense GEMM of the same size (Dao 2023, FlashAttention-2: 50-73% forward, less backward).
ATTENTION_CORE_FACTOR = 0.75


def _ffn_matrices(spec: ModelSpec) -> int:
    return 3 if spec.mlp == "swiglu" else 2


def layer_forward_flops_per_token(spec: ModelSpec, seq_len) -> np.ndarray:
    """One block's forward FLOPs per token: projections, MLP and the attention core (a hybrid stack:
    the mean over its layers, planner/ssm.py)."""
    if spec.layer_pattern is not None:
        return ssm.layer_forward_flops_per_token(spec, seq_len)
    h, f = spec.hidden, spec.ffn
    mlp = 2 * h * f * _ffn_matrices(spec)
    return attention_projection_flops_per_token(spec) + mlp + attention_core_forward_flops_per_token(spec, seq_len)


def attention_projection_flops_per_token(spec: ModelSpec) -> int:
    """Forward FLOPs per token of a block's attention linears."""
    if mla.is_mla(spec):  # multi-head latent attention's down/up projections (planner/mla.py)
        return mla.projection_forward_flops_per_token(spec)
    h, q, kv = spec.hidden, spec.q_dim, spec.kv_dim
    # Narayanan et al. SC21 eq. (3), with GQA's smaller K/V projections, a query width other
    # than hidden (Gemma: n_heads x head_dim) and SwiGLU's 3 matrices (in the MLP).
    return 2 * h * (q + 2 * kv) + 2 * q * h


def attention_core_forward_flops_per_token(spec: ModelSpec, seq_len) -> np.ndarray:
    # QK^T and attention x V: 2 * 2 * s * q_dim per token (PaLM appendix B's 2 * 2 * s * H * Q:
    # every query head, whatever the number of kv heads); sliding-window layers count the keys
    # their kernel computes in the same convention (planner/attn_window.py; s without a window).
    # MLA: query/key and value head dims differ (planner/mla.py core_width); a hybrid stack: the mean over
    # its layers (attention on a share of them, planner/ssm.py).
    width = mla.core_width(spec) if mla.is_mla(spec) else spec.q_dim
    return 4.0 * attn_window.mean_keys(spec, seq_len) * width * ssm.attention_share(spec)


def logits_forward_flops_per_token(spec: ModelSpec) -> float:
    return 2.0 * spec.hidden * spec.vocab_padded


def model_flops_per_token(spec: ModelSpec, seq_len) -> np.ndarray:
    """Training FLOPs per token without recomputation (the 'model FLOPs' of MFU).

    ~6N plus the attention term; Korthikanti et al. 2022 sec. 6 / PaLM appendix B. A mixture-of-experts
    model counts its ACTIVE parameters (planner/moe.py).
    """
    if spec.layer_pattern is not None:  # Mamba / hybrid layers (and their MoE MLPs): planner/ssm.py
        return ssm.model_flops_per_token(spec, seq_len)
    if spec.moe_experts:
        return moe.model_flops_per_token(spec, seq_len)
    fwd = spec.n_layers * layer_forward_flops_per_token(spec, seq_len)
    return 3.0 * (fwd + logits_forward_flops_per_token(spec))


def recompute_share(checkpointing, fraction=1.0):
    """(block-forward share, attention-core share, linear-GEMM share) recomputed per block.

    full: every block's forward again (Chen et al. 2016; Megatron's factor 4); blocks: a
    fraction of whole blocks (torchtitan `selective_ac_option=k`, fms-fsdp); selective: only the
    attention core (Korthikanti et al. 2022 sec. 5); op: per-op selective AC saves every other
    matmul output and recomputes the rest (torchtitan `_save_list` policy).
    """
    ckpt = np.asarray(checkpointing)
    frac = np.asarray(fraction, dtype=np.float64)
    block = (ckpt == CKPT["full"]) * 1.0 + (ckpt == CKPT["blocks"]) * frac
    attn = (ckpt == CKPT["selective"]) * 1.0
    linear = (ckpt == CKPT["op"]) * 0.5
    return block, attn, linear


def recompute_flops_per_token(spec: ModelSpec, seq_len, checkpointing, fraction=1.0) -> np.ndarray:
    """Extra forward FLOPs per token that activation checkpointing recomputes (an MoE model: its
    active view, planner/moe.py)."""
    spec = moe.dense_view(spec)
    block, attn, linear = recompute_share(checkpointing, fraction)
    core = attention_core_forward_flops_per_token(spec, seq_len)
    full = layer_forward_flops_per_token(spec, seq_len)
    return spec.n_layers * (block * full + attn * core + linear * (full - core))


def hardware_flops_per_token(spec: ModelSpec, seq_len, checkpointing, fraction=1.0) -> np.ndarray:
    """Model FLOPs plus what activation checkpointing recomputes (the 'hardware FLOPs' of HFU);
    `checkpointing` is a Layout code (CKPT) or its name."""
    if isinstance(checkpointing, str):
        checkpointing = CKPT[checkpointing]
    return model_flops_per_token(spec, seq_len) + recompute_flops_per_token(spec, seq_len, checkpointing, fraction)


def efficiency(points: tuple[tuple[float, float], ...] | list, gemm_gflop) -> np.ndarray:
    """Achievable fraction of peak for a GEMM of `gemm_gflop`, linear in log(size), clamped."""
    pts = sorted((float(g), float(f)) for g, f in points) or list(DEFAULT_EFFICIENCY)
    xs = np.log([p[0] for p in pts])
    ys = np.array([p[1] for p in pts])
    return np.interp(np.log(np.maximum(gemm_gflop, 1e-9)), xs, ys)


def block_gemms(spec: ModelSpec, tokens, tp) -> list[tuple[np.ndarray, np.ndarray]]:
    """(FLOPs per token on one GPU, GEMM size in GFLOP) of each forward matmul of a block.

    `tokens` is the GEMM's m dimension (tokens per micro batch); `tp` splits n or k (Megatron
    column/row parallel linears, Shoeybi et al. 2019). A hybrid stack: the FLOPs are the mean over its
    layers (attention and MLP on a share of them; the Mamba mixers' GEMMs: planner/ssm_time.py).
    """
    h, q, kv, f = spec.hidden, spec.q_dim, spec.kv_dim, spec.ffn
    m = np.asarray(tokens, dtype=np.float64)
    t = np.asarray(tp, dtype=np.float64)
    up = f * (_ffn_matrices(spec) - 1)
    shapes = [(q + 2 * kv, h), (h, q), (up, h), (h, f)]  # (n, k) before the tp split: qkv, o, up, down
    a, f, _ = ssm.shares(spec)
    out = []
    for (n, k), share in zip(shapes, (a, a, f, f)):
        per_token = 2.0 * n * k / t * share
        out.append((per_token, m * per_token / 1e9))
    if mla.is_mla(spec):  # the "qkv" slot: MLA's query and K/V projections as one group; o: n v_head_dim wide
        n_o, k_o = mla.output_projection_dims(spec)
        out[:2] = [mla.input_projection_gemm(spec, m, t), (2.0 * n_o * k_o / t, m * 2.0 * n_o * k_o / t / 1e9)]
    return out


def logits_gemm(spec: ModelSpec, tokens, tp) -> tuple[np.ndarray, np.ndarray]:
    per_token = logits_forward_flops_per_token(spec) / np.asarray(tp, dtype=np.float64)
    return per_token, np.asarray(tokens, dtype=np.float64) * per_token / 1e9


def attention_efficiency(points, seq_len, head_dim: int) -> np.ndarray:
    """Fused attention's share of the 16-bit peak at `seq_len` (GPU curve, log interpolation);
    head dim 64 runs ~15% below 128 (Dao 2023, FlashAttention-2, Fig. 4 vs 5)."""
    pts = sorted((float(p[0]), float(p[1])) for p in points)
    xs, ys = np.log([p[0] for p in pts]), np.array([p[1] for p in pts])
    eff = np.interp(np.log(np.maximum(np.asarray(seq_len, dtype=np.float64), 1.0)), xs, ys)
    return eff * float(np.clip(0.7 + 0.3 * head_dim / 128.0, 0.7, 1.0))


def attention_core_gemm(spec: ModelSpec, tokens, seq_len, tp) -> tuple[np.ndarray, np.ndarray]:
    per_token = attention_core_forward_flops_per_token(spec, seq_len) / np.asarray(tp, dtype=np.float64)
    return per_token, np.asarray(tokens, dtype=np.float64) * per_token / 1e9
