"""DeepSeek-V2-Lite, DeepSeek-V2 and DeepSeek-V3 shapes typed in from their config.json files (shared by the
MLA / DeepSeek tests; the presets catalog/models/deepseek-*.toml hold the same values).

- V3 (deepseek-ai/DeepSeek-V3 config.json, as quoted in full in a vllm-ascend issue thread): hidden_size
  7168, intermediate_size 18432, 61 layers, 128 heads (num_key_value_heads 128), q_lora_rank 1536,
  kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, n_routed_experts 256,
  num_experts_per_tok 8, n_shared_experts 1, moe_intermediate_size 2048, first_k_dense_replace 3,
  moe_layer_freq 1, n_group 8, topk_group 4, num_nextn_predict_layers 1, vocab_size 129280, untied;
  "671B total parameters with 37B activated for each token" (arXiv 2412.19437, abstract).
- V2 (deepseek-ai/DeepSeek-V2 config.json, copied in full in llm_memory_calculator's sample): hidden 5120,
  intermediate 12288, 60 layers, 128 heads, q_lora_rank 1536, kv_lora_rank 512, 128/64/128 head dims,
  160 routed experts of 1536, top-6, 2 shared, first_k_dense_replace 1, n_group 8, topk_group 3,
  vocab 102400; "236B total parameters, of which 21B are activated for each token" (arXiv 2405.04434).
- V2-Lite (deepseek-ai/DeepSeek-V2-Lite config.json, the same values as DeepSeek-Coder-V2-Lite's and the
  DeepSeek-V3 repository's inference/configs/config_16B.json): hidden 2048, intermediate 10944, 27 layers,
  16 heads, q_lora_rank null (one q_proj), kv_lora_rank 512, 128/64/128, 64 routed experts of 1408,
  top-6, 2 shared, first_k_dense_replace 1, vocab 102400; "15.7B total parameters, of which 2.4B are
  activated for each token" (arXiv 2405.04434, Appendix B).
"""

from planner.model import LLAMA_BLOCK, ModelSpec

_MLA = dict(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
# rope_scaling: YaRN x40, mscale = mscale_all_dim = 0.707 (V2, V2-Lite) or 1.0 (V3)
_YARN_V2 = dict(rope_scaling="yarn", rope_scaling_factor=40.0, yarn_mscale=0.707, yarn_mscale_all_dim=0.707)
_YARN_V3 = dict(rope_scaling="yarn", rope_scaling_factor=40.0, yarn_mscale=1.0, yarn_mscale_all_dim=1.0)

DEEPSEEK_V2_LITE = ModelSpec(
    **_YARN_V2,
    name="deepseek-v2-lite", family="deepseek_v2", n_layers=27, hidden=2048, n_heads=16, ffn_hidden=10944,
    vocab=102400, max_positions=163840, train_seq_len=4096, **LLAMA_BLOCK, **_MLA, moe_experts=64, moe_top_k=6, moe_ffn_hidden=1408,
    moe_shared_experts=2, moe_first_dense_layers=1)

DEEPSEEK_V2 = ModelSpec(
    **_YARN_V2,
    name="deepseek-v2", family="deepseek_v2", n_layers=60, hidden=5120, n_heads=128, ffn_hidden=12288, vocab=102400,
    max_positions=163840, train_seq_len=4096, **LLAMA_BLOCK, q_lora_rank=1536, **_MLA, moe_experts=160, moe_top_k=6,
    moe_ffn_hidden=1536, moe_shared_experts=2, moe_first_dense_layers=1)

DEEPSEEK_V3 = ModelSpec(
    **_YARN_V3,
    name="deepseek-v3", family="deepseek_v3", n_layers=61, hidden=7168, n_heads=128, ffn_hidden=18432, vocab=129280,
    max_positions=163840, train_seq_len=4096, **LLAMA_BLOCK, q_lora_rank=1536, **_MLA, moe_experts=256, moe_top_k=8,
    moe_ffn_hidden=2048, moe_shared_experts=1, moe_first_dense_layers=3, mtp_layers=1)

# (spec, published total, published activated)
PUBLISHED = [(DEEPSEEK_V2_LITE, 15.7e9, 2.4e9), (DEEPSEEK_V2, 236e9, 21e9), (DEEPSEEK_V3, 671e9, 37e9)]
