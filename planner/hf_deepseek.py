"""DeepSeek-V2 / DeepSeek-V3 Hugging Face configs (model_type deepseek_v2, deepseek_v3) -> ModelSpec's
multi-head latent attention (planner/mla.py), mixture-of-experts (planner/moe.py) and multi-token
prediction (planner/mtp.py) fields, on top of the standard keys planner/hf_config.py reads (hidden_size,
num_hidden_layers, num_attention_heads, intermediate_size = the dense layers' MLP, vocab_size, rms_norm_eps,
silu: SwiGLU, tie_word_embeddings).

Keys (DeepseekV2Config / DeepseekV3Config and modeling_deepseek.py of the released checkpoints):
- MLA: q_lora_rank (null, or 0 in DeepSeek's own inference configs: one q_proj, V2-Lite), kv_lora_rank,
  qk_nope_head_dim, qk_rope_head_dim, v_head_dim; any head_dim key is ignored (the MLA keys give the head
  dims); num_key_value_heads must equal num_attention_heads.
- MoE: n_routed_experts (null: a dense model), num_experts_per_tok, moe_intermediate_size (one routed
  expert; the shared experts run as one MLP of n_shared_experts x moe_intermediate_size: the same
  parameters and FLOPs as n_shared_experts experts), first_k_dense_replace; layer i is MoE when
  `i >= first_k_dense_replace and i % moe_layer_freq == 0` (DeepseekV2DecoderLayer): only moe_layer_freq
  1, the released value, is read (ModelSpec counts (i + 1) % freq: other values are refused).
- Routing: n_group / topk_group (group-limited routing, V2 sec. 2.2.3 / V3's node-limited routing) and
  topk_method, scoring_func, routed_scaling_factor choose WHICH experts a token runs, not how many: they
  change neither the parameters nor the FLOPs, and are not read. V3's per-expert score-correction bias
  (noaux_tc: n_routed_experts values per MoE layer) is not counted (planner/moe.py).
- num_nextn_predict_layers: V3's multi-token prediction modules, mtp_layers (apart from n_params and the
  model FLOPs: planner/mtp.py).
"""

from __future__ import annotations

from typing import Any

Config = dict[str, Any]
READ_TYPES = ("deepseek_v2", "deepseek_v3")


def _optional_int(r, key: str) -> int | None:
    """A key that may be null or 0 for "none"."""
    if r.cfg.get(key) in (None, 0):
        return None
    return r.get_int(key)


def deepseek_fields(r, fields: Config) -> Config:
    """The MLA, MoE and MTP fields of a DeepSeek config `_standard` already read into `fields`."""
    heads = fields["n_heads"]
    if fields.get("n_kv_heads") != heads:
        raise r.fail("num_key_value_heads", f"{fields.get('n_kv_heads')} must equal num_attention_heads {heads} "
                                            "(multi-head latent attention decompresses a K/V per head)")
    out: Config = {
        "attn_head_dim": None, "q_lora_rank": _optional_int(r, "q_lora_rank"), "kv_lora_rank": r.get_int("kv_lora_rank"),
        "qk_nope_head_dim": r.get_int("qk_nope_head_dim"), "qk_rope_head_dim": r.get_int("qk_rope_head_dim"),
        "v_head_dim": r.get_int("v_head_dim"), "mtp_layers": int(r.cfg.get("num_nextn_predict_layers") or 0),
    }
    if out["mtp_layers"]:
        r.get_int("num_nextn_predict_layers")  # a bad value fails naming the key
    experts = _optional_int(r, "n_routed_experts")
    if experts is None:
        return out
    top_k = r.get_int("num_experts_per_tok")
    if top_k > experts:
        raise r.fail("num_experts_per_tok", f"{top_k} exceeds n_routed_experts {experts}")
    if r.get_int("moe_layer_freq", default=1) != 1:
        raise r.fail("moe_layer_freq", f"{r.cfg['moe_layer_freq']} is not modelled (DeepSeek counts MoE layers "
                                       "i % freq == 0; the released configs use 1)")
    first = r.cfg.get("first_k_dense_replace") or 0
    if first:
        first = r.get_int("first_k_dense_replace")
    shared = _optional_int(r, "n_shared_experts") or 0
    out.update(moe_experts=experts, moe_top_k=top_k, moe_ffn_hidden=r.get_int("moe_intermediate_size"),
               moe_shared_experts=shared, moe_first_dense_layers=first)
    return out
