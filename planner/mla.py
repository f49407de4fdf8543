"""Multi-head latent attention (MLA): DeepSeek-V2/V3's attention with a low-rank compressed K/V (and
query), its exact parameters, forward FLOPs, saved activations and fused-kernel shape (pure).

DeepSeek-AI 2024, "DeepSeek-V2" (arXiv 2405.04434), sec. 2.1, with Hugging Face's DeepseekV2Attention /
DeepseekV3Attention names (modeling_deepseek.py) per linear; n heads, d_h^R = qk_rope_head_dim,
d_h = qk_nope_head_dim, d_c = kv_lora_rank, d_c' = q_lora_rank, d_v = v_head_dim (V3: d_v = d_h = 128):
- c_t^Q = W^DQ h_t                      (eq. 12; q_a_proj, d_c' x hidden, then q_a_layernorm, RMSNorm d_c')
- q_t^C = W^UQ c_t^Q,  q_t^R = RoPE(W^QR c_t^Q)   (eq. 13-14; q_b_proj fuses W^UQ and W^QR:
                                          n (d_h + d_h^R) x d_c'). Without query compression (V2-Lite,
                                          q_lora_rank None) one q_proj: n (d_h + d_h^R) x hidden.
- c_t^KV = W^DKV h_t                    (eq. 9; kv_a_proj_with_mqa fuses W^DKV and W^KR:
- k_t^R = RoPE(W^KR h_t)                (eq. 15;  (d_c + d_h^R) x hidden, then kv_a_layernorm on c^KV, d_c)
- k_t^C = W^UK c_t^KV, v_t^C = W^UV c_t^KV   (eq. 10-11; kv_b_proj fuses W^UK, W^UV: n (d_h + d_v) x d_c)
- k_t,i = [k_t,i^C; k_t^R]  (eq. 16-17: the decoupled RoPE key is shared by the n heads)
- o_t,i = sum_j softmax(q_t,i . k_j,i / sqrt(d_h + d_h^R)) v_j,i^C;  u_t = W^O [o_t,1; ...; o_t,n]
                                        (eq. 18-19; o_proj hidden x n d_v)
Training runs the decompressed form (the absorption of W^UK into W^UQ is an inference trick): the
attention core is a multi-head attention of n heads with query/key head dim d_h + d_h^R and value head
dim d_v, so its forward FLOPs per token are 2 s n (d_h + d_h^R) + 2 s n d_v (full s x s convention of
planner/flops.py).

Tensor parallelism as Megatron-Core runs MLA (megatron/core/models/gpt/gpt_layer_specs.py: linear_q_down_proj
and linear_kv_down_proj are `backend.linear()`, duplicated on every tp rank; the up-projections and
q_proj column-parallel, linear_proj row-parallel): the down-projections are not split by tp.

The fused kernel: FlashAttention-2 needs one head dim for Q, K and V, so V runs padded to d_h + d_h^R
(192 for 128 of value: the executed value FLOPs are 192/128 of the useful ones); cuDNN's fused attention
(Transformer Engine on Hopper) takes d_qk != d_v (cuDNN "Fused Flash Attention" supports
head dim of Q/K and V differing) and runs the useful work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from planner.model import ModelSpec

MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


class Linear(NamedTuple):
    name: str  # Hugging Face module name
    out: int
    inp: int
    split: str  # "dup" (every tp rank), "col" (out / tp), "row" (in / tp)


def is_mla(spec: "ModelSpec") -> bool:
    return spec.kv_lora_rank is not None


def check_spec(spec: "ModelSpec") -> None:
    """One-line errors naming the field (ModelSpec's validator raises them as ValueError)."""
    if not is_mla(spec):
        given = [k for k in MLA_FIELDS if getattr(spec, k) is not None]
        if given:
            raise ValueError(f"{given[0]} needs kv_lora_rank (multi-head latent attention)")
        return
    for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if getattr(spec, k) is None:
            raise ValueError(f"{k} is required with kv_lora_rank (multi-head latent attention)")
    if spec.n_kv_heads not in (None, spec.n_heads):
        raise ValueError(f"n_kv_heads ({spec.n_kv_heads}) must equal n_heads ({spec.n_heads}) with kv_lora_rank: "
                         "MLA decompresses a key and a value per query head")
    if spec.attn_head_dim is not None:
        raise ValueError("attn_head_dim is not used with kv_lora_rank (qk_nope_head_dim + qk_rope_head_dim and "
                         "v_head_dim give the head dims)")
    for field, bad in (("parallel_block", spec.parallel_block), ("qk_norm", spec.qk_norm != "none"),
                       ("bias", spec.bias or bool(spec.qkv_bias))):
        if bad:
            raise ValueError(f"{field} with multi-head latent attention (kv_lora_rank) is not modelled")


def qk_head_dim(spec: "ModelSpec") -> int:
    """Query/key head dim: the compressed part and the decoupled RoPE part (eq. 16-17)."""
    return spec.qk_nope_head_dim + spec.qk_rope_head_dim


def linears(spec: "ModelSpec") -> list[Linear]:
    """The attention linears of one block, in forward order (weights as out x in)."""
    h, n, dqk = spec.hidden, spec.n_heads, qk_head_dim(spec)
    if spec.q_lora_rank:
        q = [Linear("q_a_proj", spec.q_lora_rank, h, "dup"),  # W^DQ, eq. 12
             Linear("q_b_proj", n * dqk, spec.q_lora_rank, "col")]  # W^UQ and W^QR, eq. 13-14
    else:
        q = [Linear("q_proj", n * dqk, h, "col")]  # V2-Lite: W^Q
    return q + [
        Linear("kv_a_proj_with_mqa", spec.kv_lora_rank + spec.qk_rope_head_dim, h, "dup"),  # W^DKV, W^KR: eq. 9, 15
        Linear("kv_b_proj", n * (spec.qk_nope_head_dim + spec.v_head_dim), spec.kv_lora_rank, "col"),  # W^UK, W^UV
        Linear("o_proj", h, n * spec.v_head_dim, "row"),  # W^O, eq. 19
    ]


def attention_param_shapes(spec: "ModelSpec") -> list[tuple[int, ...]]:
    """Attention parameters of one block: the linears and the two latent RMSNorms."""
    norms = [(spec.q_lora_rank,)] if spec.q_lora_rank else []
    return [(lin.out, lin.inp) for lin in linears(spec)] + norms + [(spec.kv_lora_rank,)]


def projection_forward_flops_per_token(spec: "ModelSpec") -> int:
    """2 x out x in of every attention linear (the whole model's, before any tp split)."""
    return sum(2 * lin.out * lin.inp for lin in linears(spec))


def core_width(spec: "ModelSpec") -> float:
    """The width w of the core's 4 s w forward FLOPs per token (planner/flops.py's MHA form 4 s q_dim):
    QK^T over n (d_h + d_h^R), attention x V over n d_v, i.e. w = n (d_qk + d_v) / 2."""
    return spec.n_heads * (qk_head_dim(spec) + spec.v_head_dim) / 2.0


def kv_dim(spec: "ModelSpec") -> int:
    """Mean of the decompressed K and V widths per token: K + V = 2 kv_dim (what context parallelism
    exchanges)."""
    return spec.n_heads * (qk_head_dim(spec) + spec.v_head_dim) // 2


def _per_gpu(lin: Linear, t) -> np.ndarray:
    return 2.0 * lin.out * lin.inp / (1.0 if lin.split == "dup" else t)


def input_projection_gemm(spec: "ModelSpec", tokens, tp) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs per token on one GPU, GEMM size in GFLOP) of the query and K/V projections, charged as one
    group (planner/flops.block_gemms' "qkv" slot) at the FLOP-weighted geometric mean of their sizes."""
    t = np.asarray(tp, dtype=np.float64)
    m = np.asarray(tokens, dtype=np.float64)
    ins = [lin for lin in linears(spec) if lin.name != "o_proj"]
    per = [_per_gpu(lin, t) for lin in ins]
    total = sum(per)
    log_size = sum(p * np.log(np.maximum(m * p / 1e9, 1e-12)) for p in per) / total
    return total, np.exp(log_size)


def output_projection_dims(spec: "ModelSpec") -> tuple[int, int]:
    """(N, K) of o_proj before the tp split of K."""
    return spec.hidden, spec.n_heads * spec.v_head_dim


def input_projection_dims(spec: "ModelSpec", tp) -> tuple[np.ndarray, np.ndarray]:
    """(N, K) on one GPU of the input projection with the most FLOPs (the group's shape for
    planner/gemm_shape.py)."""
    t = np.asarray(tp, dtype=np.float64)
    lin = max((x for x in linears(spec) if x.name != "o_proj"), key=lambda x: x.out * x.inp)
    n = lin.out / (t if lin.split == "col" else 1.0)
    return n, np.full(np.shape(t), float(lin.inp))


def saved_elements_per_token(spec: "ModelSpec", tp, sp_div) -> np.ndarray:
    """Elements one block's attention keeps for backward per token, beyond its input norm (in place of
    MHA's q, k, v and attention output, planner/memory.py): the latent RMSNorms' inputs c^Q, c^KV (the
    down-projections' outputs, on the sequence shard with sequence parallelism) and their normed outputs
    (the up-projections' inputs, whole), the core's inputs Q and K (n d_qk each, RoPE applied) and V
    (n d_v), and its output (o_proj's input, n d_v), split by tp."""
    t = np.asarray(tp, dtype=np.float64)
    latent = (spec.q_lora_rank or 0) + spec.kv_lora_rank
    down = latent + spec.qk_rope_head_dim  # c^Q, [c^KV; k^R] as written by the down-projections
    core = spec.n_heads * (2 * qk_head_dim(spec) + 2 * spec.v_head_dim) / t
    return down / sp_div + latent + core


def latent_norm_stats_per_token(spec: "ModelSpec") -> int:
    """RMSNorms of the latents: one fp32 rstd per token each."""
    return 2 if spec.q_lora_rank else 1


def kernel_work_factor(spec: "ModelSpec", cudnn) -> np.ndarray:
    """Useful share of the fused attention kernel's work: FlashAttention-2 runs V padded to the query/key
    head dim (d_qk + d_v useful of 2 d_qk executed); cuDNN takes d_v as it is (1)."""
    dqk = qk_head_dim(spec)
    padded = (dqk + spec.v_head_dim) / (2.0 * max(dqk, spec.v_head_dim))
    return np.where(np.asarray(cudnn) > 0, 1.0, padded)


def describe(spec: "ModelSpec") -> str:
    q = f"q rank {spec.q_lora_rank}, " if spec.q_lora_rank else ""
    return (f", MLA ({q}kv rank {spec.kv_lora_rank}, head dims qk {spec.qk_nope_head_dim}+{spec.qk_rope_head_dim} "
            f"v {spec.v_head_dim})")
