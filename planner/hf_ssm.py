"""Hugging Face configs of state-space and hybrid models -> ModelSpec fields (planner/ssm.py).

Read (transformers' config classes and modeling code):
- mamba, falcon_mamba (MambaConfig / FalconMambaConfig: hidden_size, num_hidden_layers, state_size,
  intermediate_size, conv_kernel, time_step_rank "auto" = ceil(hidden / 16), use_bias, use_conv_bias;
  Falcon-Mamba's B/C/dt RMSNorms carry no weights);
- mamba2 (Mamba2Config: num_heads x head_dim = expand x hidden_size, n_groups, state_size);
- jamba (JambaConfig: a Mamba-1 or attention mixer and an MLP per layer; attention where
  i % attn_layer_period == attn_layer_offset, MoE where i % expert_layer_period == expert_layer_offset;
  mamba_d_state, mamba_d_conv, mamba_expand, mamba_dt_rank; JambaMambaMixer's dt/B/C RMSNorms);
- nemotron_h (NemotronHConfig: hybrid_override_pattern of M, *, -; mamba_num_heads x mamba_head_dim,
  n_groups, ssm_state_size, conv_kernel; relu^2 MLP).
Refused by name: Zamba/Zamba2 (attention blocks shared across layers, with per-call LoRA adapters: no
layer pattern of distinct layers expresses them), Nemotron-H MoE patterns (E), and other recurrent or
state-space families (Bamba, Granite-4 hybrids, Falcon-H1, RWKV, ...).
"""

from __future__ import annotations

import math
from typing import Any

Config = dict[str, Any]

READ_TYPES = ("mamba", "falcon_mamba", "mamba2", "jamba", "nemotron_h")
REFUSED = {
    "zamba": "shared attention blocks reused across layers",
    "zamba2": "shared attention blocks reused across layers with per-call LoRA adapters",
    "bamba": "not read (its layers_block_type hybrid is not mapped)",
    "granitemoehybrid": "not read (Granite-4 hybrid Mamba-2 / MoE)",
    "falcon_h1": "parallel attention and Mamba-2 heads in one layer",
    "plamo2": "not read", "lfm2": "short convolutions, not Mamba", "qwen3_next": "gated DeltaNet linear attention",
    "recurrent_gemma": "RG-LRU recurrence, not Mamba", "rwkv": "RWKV recurrence", "rwkv5": "RWKV recurrence",
    "rwkv6": "RWKV recurrence", "rwkv7": "RWKV recurrence", "xlstm": "xLSTM recurrence",
}
_SSM_KEYS = ("ssm_state_size", "mamba_d_state", "state_size", "mamba_d_ssm", "hybrid_override_pattern")


def read(r, model_type: str, standard) -> Config | None:
    """The ModelSpec fields of a state-space / hybrid config (None: not one); `standard` reads a
    family's attention and MLP keys (planner/hf_config.py `_standard`)."""
    if model_type in REFUSED:
        raise r.fail("model_type", f"{model_type!r} is not modelled ({REFUSED[model_type]}); read state-space "
                                   f"types: {', '.join(READ_TYPES)}")
    if model_type not in READ_TYPES:
        key = next((k for k in _SSM_KEYS if k in r.cfg), None)
        if key is not None:
            raise r.fail(key, f"a state-space / hybrid config of model_type {model_type!r} is not modelled "
                              f"(read: {', '.join(READ_TYPES)})")
        return None
    return {"mamba": _mamba1, "falcon_mamba": _mamba1, "mamba2": _mamba2, "jamba": _jamba,
            "nemotron_h": _nemotron_h}[model_type](r, model_type, standard)


def _no_proj_bias(r, key: str) -> None:
    if r.get_bool(key, False):
        raise r.fail(key, "true: Mamba in/out projection biases are not modelled")
    if not r.get_bool("use_conv_bias" if "use_conv_bias" in r.cfg else "mamba_conv_bias", True):
        raise r.fail("use_conv_bias", "false: a conv1d without bias is not modelled")


def _dt_rank(r, key: str, hidden: int) -> int:
    value = r.cfg.get(key, "auto")
    return math.ceil(hidden / 16) if value in ("auto", None) else r.get_int(key)


def _pure(r, model_type: str, hidden: int, layers: int, tied_default: bool) -> Config:
    return dict(family=model_type, n_layers=layers, hidden=hidden, n_heads=1, vocab=r.get_int("vocab_size"),
                max_positions=r.get_int("max_position_embeddings", default=2048), norm="rmsnorm", position="none",
                tied_embeddings=r.get_bool("tie_word_embeddings", tied_default), bias=False, layer_pattern="M" * layers)


def _mamba1(r, model_type: str, standard) -> Config:
    hidden, layers = r.get_int("hidden_size", "d_model"), r.get_int("num_hidden_layers", "n_layer")
    _no_proj_bias(r, "use_bias")
    return dict(_pure(r, model_type, hidden, layers, True), ssm_version=1,
                ssm_state_size=r.get_int("state_size", default=16),
                ssm_inner=r.get_int("intermediate_size", default=2 * hidden),
                ssm_conv_kernel=r.get_int("conv_kernel", default=4), ssm_dt_rank=_dt_rank(r, "time_step_rank", hidden))


def _mamba2(r, model_type: str, standard) -> Config:
    hidden, layers = r.get_int("hidden_size", "d_model"), r.get_int("num_hidden_layers", "n_layer")
    _no_proj_bias(r, "use_bias")
    inner = r.get_int("expand", default=2) * hidden
    heads, head_dim = r.get_int("num_heads", default=inner // 64), r.get_int("head_dim", default=64)
    if heads * head_dim != inner:
        raise r.fail("num_heads", f"{heads} x head_dim {head_dim} != expand x hidden_size = {inner}")
    return dict(_pure(r, model_type, hidden, layers, True), ssm_version=2,
                ssm_state_size=r.get_int("state_size", default=128), ssm_inner=inner, ssm_head_dim=head_dim,
                ssm_groups=r.get_int("n_groups", default=1), ssm_conv_kernel=r.get_int("conv_kernel", default=4))


def _hybrid_base(r, standard) -> Config:
    fields = standard(r)
    fields.update(norm="rmsnorm", position="rope", norms_per_layer=2, parallel_block=False)
    return fields


def _jamba(r, model_type: str, standard) -> Config:
    fields = _hybrid_base(r, standard)
    fields["position"] = "none"  # Jamba's attention layers use no position encoding (Lieber et al. 2024, arXiv:2403.19887: no explicit positional information)
    hidden, layers = fields["hidden"], fields["n_layers"]
    _no_proj_bias(r, "mamba_proj_bias")
    period, offset = r.get_int("attn_layer_period", default=8), r.cfg.get("attn_layer_offset", 4)
    mixers = ["*" if i % period == offset else "M" for i in range(layers)]
    fields.update(n_layers=2 * layers, layer_pattern="".join(m + "-" for m in mixers), ssm_version=1,
                  ssm_state_size=r.get_int("mamba_d_state", default=16),
                  ssm_inner=r.get_int("mamba_expand", default=2) * hidden,
                  ssm_conv_kernel=r.get_int("mamba_d_conv", default=4),
                  ssm_dt_rank=_dt_rank(r, "mamba_dt_rank", hidden), ssm_dt_bc_norms=True)
    experts = r.get_int("num_experts", default=1)
    if experts > 1:
        e_period, e_offset = r.get_int("expert_layer_period", default=2), r.cfg.get("expert_layer_offset", 1)
        if (e_offset + 1) % e_period:  # sub-layer 2i+1 is MoE where (2i+2) % (2 period) == 0
            raise r.fail("expert_layer_offset", f"{e_offset} with expert_layer_period {e_period}: only MoE layers at "
                                                "i % period == period - 1 are expressed")
        fields.update(moe_experts=experts, moe_top_k=r.get_int("num_experts_per_tok", default=2),
                      moe_layer_freq=2 * e_period)
    return fields


def _nemotron_h(r, model_type: str, standard) -> Config:
    fields = _hybrid_base(r, standard)
    pattern = r.cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern:
        raise r.fail("hybrid_override_pattern", f"missing or not a string (got {pattern!r})")
    if "E" in pattern:
        raise r.fail("hybrid_override_pattern", "MoE layers (E: Nemotron-H MoE / Nemotron 3) are not read; "
                                                "dense patterns of M, *, - are")
    _no_proj_bias(r, "mamba_proj_bias" if "mamba_proj_bias" in r.cfg else "use_bias")
    head_dim = r.get_int("attention_head_dim", "head_dim", default=fields["hidden"] // fields["n_heads"])
    heads, m_head = r.get_int("mamba_num_heads"), r.get_int("mamba_head_dim", default=64)
    fields.update(layer_pattern=pattern, attn_head_dim=None if head_dim * fields["n_heads"] == fields["hidden"]
                  else head_dim, ssm_version=2, ssm_state_size=r.get_int("ssm_state_size", default=128),
                  ssm_inner=heads * m_head, ssm_head_dim=m_head, ssm_groups=r.get_int("n_groups", "mamba_n_groups",
                                                                                        default=1),
                  ssm_conv_kernel=r.get_int("conv_kernel", default=4))
    return fields
