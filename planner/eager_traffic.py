"""HBM traffic of eager attention's element-wise kernels over the s x s score matrix (used by
planner/throughput.py).

Megatron's fused scale-mask-softmax (a 16-bit softmax) is one kernel: the planner keeps the
activation count of Korthikanti et al. 2022 (5 B per score at 16 bit) as its traffic per pass,
forward and twice in backward like every element-wise kernel.

Hugging Face's eager attention (the stack profile's `eager_softmax_fp32`) runs it as separate
kernels, each reading and writing the whole score matrix, e.g. BLOOM (transformers
modeling_bloom.py, BloomAttention.forward):

    attention_scores = matmul_result.view(...)                       # 16-bit scores (the GEMM's output)
    if input_dtype == torch.float16: attention_scores = attention_scores.to(torch.float)
    attn_weights = torch.masked_fill(attention_scores, attention_mask, finfo.min)
    attention_probs = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(input_dtype)

Bytes per score, c the compute dtype's bytes (fp16: the fp32 upcast makes the mask work in fp32;
bf16 and fp32 keep their dtype, and softmax(dtype=float32) casts a bf16 input):
  forward:  mask (read + write, m bytes each) + softmax (read m, write 4) + cast back (read 4,
            write c, none in fp32) [+ fp16's upcast: read 2, write 4]
  backward: cast back's grad (read c, write 4) + softmax's backward (read its fp32 output and the
            grad, write 4) + mask's backward (read + write 4) [+ the upcast's grad: read 4, write 2]
A recomputed block (activation checkpointing) runs the forward kernels again. BLOOM's and Llama's
attention dropout is 0: no dropout kernel.
"""

from __future__ import annotations

import numpy as np

# Korthikanti et al. 2022 eq. 2: softmax output (2 B) + dropout output (2 B) + mask (1 B) per score
FUSED_BYTES_PER_SCORE = 5.0
FUSED_PASSES = 3.0  # forward + 2 in backward, as planner/throughput.py's ELEMENTWISE_PASSES


def hf_bytes_per_score(dtype_bytes, fp16) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) HBM bytes per attention score of the unfused fp32-softmax path:
    fp16 28 + 32, bf16 16 + 28, fp32 16 + 20."""
    c = np.asarray(dtype_bytes, dtype=np.float64)
    up = np.asarray(fp16, dtype=bool) * 6.0  # fp16's upcast of the scores (read 2, write 4)
    m = np.where(up > 0, 4.0, c)  # the dtype the mask and the softmax's input are in
    half = c < 4
    fwd = up + 2.0 * m + (m + 4.0) + half * (4.0 + c)
    # cast back's grad, softmax backward (fp32 output + grad read, grad written), the grad cast
    # to a 16-bit softmax input, the mask's backward, fp16's upcast grad
    bwd = half * (c + 4.0) + 12.0 + (m < 4) * (4.0 + m) + 2.0 * m + up
    return fwd, bwd


def seconds_per_token(n_heads, seq_len, tp, dtype_bytes, fp16, softmax_fp32, recompute, hbm_Bps) -> np.ndarray:
    """Seconds per token and block of eager attention's element-wise kernels, forward + backward
    (+ the recomputed forward): each token's query row holds n_heads/tp x seq_len scores."""
    scores = np.asarray(n_heads / np.asarray(tp, dtype=np.float64)) * np.asarray(seq_len, dtype=np.float64)
    c = np.asarray(dtype_bytes, dtype=np.float64)
    fwd, bwd = hf_bytes_per_score(c, fp16)
    unfused = fwd * (1.0 + recompute) + bwd
    fused = FUSED_BYTES_PER_SCORE * c / 2.0 * (FUSED_PASSES + recompute)
    per_score = np.where(np.asarray(softmax_fp32) > 0, unfused, fused)
    return scores * per_score / hbm_Bps
