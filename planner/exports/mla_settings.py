"""Multi-head latent attention (DeepSeek-V2/V3) and the multi-token-prediction module as Megatron-LM flags.

Checked in NVIDIA/Megatron-LM megatron/training/arguments.py (the 2025 file read for moe_settings.py):
`--multi-latent-attention` (store_true, _add_network_size_args) and `_add_mla_args`: --q-lora-rank
(default None: one query projection, as DeepSeek-V2-Lite), --kv-lora-rank (default 32), --qk-head-dim
("Dimension of the head in the QK projection. q_head_dim = qk_head_dim + qk_pos_emb_head_dim", i.e. the
non-RoPE part, Hugging Face's qk_nope_head_dim), --qk-pos-emb-head-dim (HF qk_rope_head_dim),
--v-head-dim; --mtp-num-layers ("Number of Multi-Token Prediction (MTP) Layers"). Every width is written
since Megatron's defaults (kv 32, qk 128, rope 64, v 128) are not a model's. --qk-layernorm: under MLA
Megatron-Core puts it on the compressed query and K/V latents, DeepSeek's q_a_layernorm and
kv_a_layernorm (planner/mla.py counts them; public DeepSeek-V3 Megatron recipes pass it).
"""

from __future__ import annotations

from planner.model import ModelSpec


def megatron_args(model: ModelSpec) -> list[str]:
    """The MLA/MTP flags (none for standard attention)."""
    if model.kv_lora_rank is None:
        return []
    args = ["--multi-latent-attention"]
    if model.q_lora_rank is not None:
        args += ["--q-lora-rank", str(model.q_lora_rank)]
    args += ["--kv-lora-rank", str(model.kv_lora_rank), "--qk-head-dim", str(model.qk_nope_head_dim),
             "--qk-pos-emb-head-dim", str(model.qk_rope_head_dim), "--v-head-dim", str(model.v_head_dim),
             "--qk-layernorm"]
    if model.mtp_layers:
        args += ["--mtp-num-layers", str(model.mtp_layers)]
    return args
