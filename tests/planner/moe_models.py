"""Mixture-of-experts shapes typed in from their Hugging Face config.json files (shared by the MoE tests).

- Mixtral-8x7B: mistralai/Mixtral-8x7B-v0.1 config.json (hidden_size 4096, intermediate_size 14336,
  32 layers, 32 heads, 8 kv heads, num_local_experts 8, num_experts_per_tok 2, vocab 32000, untied);
  "46.7B total parameters but only uses 12.9B parameters per token" (Mistral AI, "Mixtral of
  experts", announcement of 11 Dec 2023).
- OLMoE-1B-7B: allenai/OLMoE-1B-7B-0924 config.json (hidden 2048, intermediate_size 1024, 16 layers,
  16 heads, num_experts 64, num_experts_per_tok 8, vocab 50304, untied, q/k RMSNorm over the full
  width); 6.9B total / 1.3B active (Muennighoff et al. 2024, OLMoE, arXiv 2409.02060, Table 1).
- Qwen3-30B-A3B: Qwen/Qwen3-30B-A3B config.json (hidden 2048, moe_intermediate_size 768, 48 layers,
  32 heads, 4 kv heads, head_dim 128, num_experts 128, num_experts_per_tok 8, decoder_sparse_step 1,
  mlp_only_layers [], vocab 151936, untied, per-head q/k RMSNorm); "30.5B in total and 3.3B
  activated" (the model card).
"""

from planner.model import LLAMA_BLOCK, ModelSpec

MIXTRAL_8X7B = ModelSpec(
    name="mixtral-8x7b", family="mixtral", n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336,
    vocab=32000, max_positions=32768, **LLAMA_BLOCK, moe_experts=8, moe_top_k=2, moe_ffn_hidden=14336)

OLMOE_1B_7B = ModelSpec(
    name="olmoe-1b-7b", family="olmoe", n_layers=16, hidden=2048, n_heads=16, ffn_hidden=1024, vocab=50304,
    max_positions=4096, **LLAMA_BLOCK, qk_norm="full", moe_experts=64, moe_top_k=8, moe_ffn_hidden=1024,
    moe_norm_topk_prob=False)

QWEN3_30B_A3B = ModelSpec(
    name="qwen3-30b-a3b", family="qwen3_moe", n_layers=48, hidden=2048, n_heads=32, n_kv_heads=4,
    attn_head_dim=128, ffn_hidden=6144, vocab=151936, max_positions=40960, **LLAMA_BLOCK, qk_norm="per_head",
    moe_experts=128, moe_top_k=8, moe_ffn_hidden=768)

# (spec, published total, published active, the digits they are published to)
PUBLISHED = [(MIXTRAL_8X7B, 46.7e9, 12.9e9), (OLMOE_1B_7B, 6.9e9, 1.3e9), (QWEN3_30B_A3B, 30.5e9, 3.3e9)]
