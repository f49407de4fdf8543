"""Mixture-of-experts Hugging Face configs -> ModelSpec's moe_* fields (planner/moe.py).

Read (key names from transformers' configuration_*.py and modeling_*.py):
- mixtral (MixtralConfig): num_local_experts, num_experts_per_tok; intermediate_size is one expert's
  width (MixtralBlockSparseTop2MLP w1/w2/w3), every layer MoE, router `gate` hidden x experts, no bias.
- qwen2_moe (Qwen2MoeConfig): num_experts, num_experts_per_tok, moe_intermediate_size (routed expert),
  shared_expert_intermediate_size (Qwen2MoeSparseMoeBlock: ONE shared expert of that width; its
  1 x hidden shared_expert_gate is not counted, planner/moe.py), intermediate_size (the dense layers),
  decoder_sparse_step and mlp_only_layers: layer i is MoE when `i not in mlp_only_layers and
  (i + 1) % decoder_sparse_step == 0` (Qwen2MoeDecoderLayer); q/k/v biases (qkv_bias, default true).
- qwen3_moe (Qwen3MoeConfig): as qwen2_moe without the shared expert, per-head q/k RMSNorm.
- norm_topk_prob (qwen2_moe, qwen3_moe, olmoe; default false): the top-k router weights renormalised
  (moe_norm_topk_prob); mixtral, granitemoe, phimoe and gpt_oss have no such key and renormalise.
- olmoe (OlmoeConfig): num_experts, num_experts_per_tok, intermediate_size = one expert's width,
  q/k RMSNorm over the full q and kv widths (OlmoeAttention q_norm/k_norm).
- granitemoe (GraniteMoeConfig): num_local_experts, num_experts_per_tok, intermediate_size = one
  expert's width (ParallelExperts input_linear 2 x intermediate_size); the *_multiplier and
  logits_scaling keys scale activations and hold no parameters.
- phimoe (PhimoeConfig): num_local_experts, num_experts_per_tok, intermediate_size; LayerNorm with
  bias; refused while attention_bias or lm_head_bias is true (biases on q/k/v/o and the head with
  bias-free experts: ModelSpec's `bias` puts them on every linear or none).
- gpt_oss (GptOssConfig): num_local_experts, num_experts_per_tok, intermediate_size = one expert's width
  (GptOssExperts gate_up_proj 2 x intermediate_size, down_proj); biases on q/k/v/o (attention_bias) AND on
  the experts (gate_up_proj_bias, down_proj_bias), so `bias` on every linear is the model; the router's
  per-expert bias and each head's attention sink (GptOssAttention.sinks: n_heads per layer) are not counted
  (under 2e-6 of the 20B); its alternating 128-token sliding window comes from layer_types.
Every other MoE family (DeepSeek-V2/V3's multi-head latent attention, DBRX, Jamba, Arctic, JetMoE,
MiniMax, Llama 4, GraniteMoE-shared, ...) is refused in one line naming model_type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Config = dict[str, Any]
READ_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe", "phimoe", "gpt_oss")
# (experts key, expert width key) per family; top-k is num_experts_per_tok for all of them
_KEYS = {"mixtral": ("num_local_experts", "intermediate_size"), "granitemoe": ("num_local_experts", "intermediate_size"),
         "phimoe": ("num_local_experts", "intermediate_size"), "olmoe": ("num_experts", "intermediate_size"),
         "gpt_oss": ("num_local_experts", "intermediate_size"),
         "qwen2_moe": ("num_experts", "moe_intermediate_size"), "qwen3_moe": ("num_experts", "moe_intermediate_size")}
# families whose router reads norm_topk_prob (default False in Qwen2MoeConfig, Qwen3MoeConfig, OlmoeConfig): the top-k
# softmax weights renormalised to sum to 1 or not; Mixtral, GraniteMoE (softmax over the top-k logits) and gpt-oss
# (the same) always renormalise, PhiMoE's sparsemixer is taken as they are
_NORM_KEY = ("qwen2_moe", "qwen3_moe", "olmoe")


def moe_fields(r, model_type: str, fields: Config) -> Config:
    """The moe_* fields of a config `_standard` already read into `fields` (errors name the key)."""
    if fields.get("bias") and model_type != "gpt_oss":  # gpt_oss: its experts carry biases too
        raise r.fail("attention_bias", f"true with bias-free experts ({model_type}) is not modelled")
    if model_type == "phimoe" and r.get_bool("lm_head_bias", False):
        raise r.fail("lm_head_bias", "true (a bias on the output head) is not modelled")
    if model_type in ("qwen2_moe", "qwen3_moe") and r.cfg.get("use_sliding_window") is True:
        raise r.fail("use_sliding_window", f"true on a {model_type} model is not modelled")
    experts_key, width_key = _KEYS[model_type]
    experts, top_k = r.get_int(experts_key), r.get_int("num_experts_per_tok")
    if top_k > experts:
        raise r.fail("num_experts_per_tok", f"{top_k} exceeds {experts_key} {experts}")
    out: Config = {"moe_experts": experts, "moe_top_k": top_k, "moe_ffn_hidden": r.get_int(width_key)}
    if model_type == "gpt_oss":  # GptOssAttention.sinks: a learnable logit per head in every layer
        out["attn_sinks"] = True
    if model_type in _NORM_KEY:  # the others always renormalise (their modeling code has no switch)
        out["moe_norm_topk_prob"] = r.get_bool("norm_topk_prob", False)
    if model_type == "qwen2_moe":
        out["qkv_bias"] = r.get_bool("qkv_bias", True)  # Qwen2MoeAttention: q/k/v biases, o without
        shared = r.cfg.get("shared_expert_intermediate_size")
        if shared:
            out.update(moe_shared_experts=1, moe_shared_ffn_hidden=r.get_int("shared_expert_intermediate_size"))
    if model_type in ("qwen2_moe", "qwen3_moe"):
        out.update(_sparse_layers(r, fields["n_layers"]))
    return out


def _sparse_layers(r, n_layers: int) -> Config:
    """decoder_sparse_step and mlp_only_layers as moe_layer_freq and moe_first_dense_layers, or
    refused where the dense layers are not a prefix of the step's pattern."""
    step = r.get_int("decoder_sparse_step", default=1)
    dense = r.cfg.get("mlp_only_layers") or []
    if not isinstance(dense, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in dense):
        raise r.fail("mlp_only_layers", f"must be a list of layer indices (got {dense!r})")
    i = np.arange(n_layers)
    hf = ~np.isin(i, dense) & ((i + 1) % step == 0)
    if not hf.any():
        raise r.fail("mlp_only_layers", f"{dense} with decoder_sparse_step {step} leaves no MoE layer")
    first = int(np.argmax(hf))
    if not np.array_equal(hf, (i >= first) & ((i + 1) % step == 0)):
        raise r.fail("mlp_only_layers", f"{dense} is not expressible (dense layers must be the first ones: "
                                        "moe_first_dense_layers with decoder_sparse_step as moe_layer_freq)")
    return {"moe_layer_freq": step, "moe_first_dense_layers": 0 if first == step - 1 else first}
