"""The sequence keys of a Hugging Face config.json (planner/hf_config.py's readers call these): which layers
run a sliding window and how wide (planner/attn_window.py), and the context a RoPE-scaled model was pretrained
at (ModelSpec.train_seq_len, the default seq_len), its RoPE scaling and base theta. Every error names the file and the key (the reader's `fail`)."""

from __future__ import annotations

from typing import Any

Config = dict[str, Any]


# transformers' config classes: which layers run the sliding window when `layer_types` is absent
_PATTERN_DEFAULT = {"gemma2": 2, "gemma3_text": 6, "cohere2": 4}  # layer i is global where (i+1) % p == 0
_MAX_WINDOW_LAYERS = ("qwen2", "qwen3")  # Qwen2Config: layers i >= max_window_layers slide


def window(r, model_type: str, n_layers: int) -> Config:
    """`sliding_window` and the layers that use it (planner/attn_window.py): `layer_types`
    ("sliding_attention" / "full_attention"), else `sliding_window_pattern` (Gemma 3, Cohere2) or
    the family's alternation (Gemma 2), else Qwen2's max_window_layers, else every layer (Mistral,
    StarCoder2, Phi-3). Qwen2/Qwen3 slide only with use_sliding_window true (their default false)."""
    if r.cfg.get("sliding_window") is None or r.cfg.get("use_sliding_window") is False:
        return {}
    if model_type in _MAX_WINDOW_LAYERS and r.cfg.get("use_sliding_window") is not True:
        return {}
    window = r.get_int("sliding_window")
    types = r.cfg.get("layer_types")
    if types is not None:
        kinds = ("sliding_attention", "full_attention")
        if not isinstance(types, list) or len(types) != n_layers or any(k not in kinds for k in types):
            raise r.fail("layer_types", f"must list {n_layers} of {', '.join(kinds)} (got {types!r})")
        local = types.count("sliding_attention")
    elif "sliding_window_pattern" in r.cfg or model_type in _PATTERN_DEFAULT:
        period = r.get_int("sliding_window_pattern", default=_PATTERN_DEFAULT.get(model_type, 1))
        local = sum(1 for i in range(n_layers) if (i + 1) % period)
    elif model_type in _MAX_WINDOW_LAYERS:
        local = max(n_layers - r.get_int("max_window_layers", default=n_layers), 0)
    else:
        local = n_layers
    return {"attn_window": window, "attn_local_layers": None if local == n_layers else local}


def pretrain_len(r, fields: Config) -> Config:
    """train_seq_len: the context a RoPE-scaled model was pretrained at (rope_scaling's
    original_max_position_embeddings: Llama 3.1/4, YaRN; gpt-oss's initial_context_length) where it is below
    max_positions; nothing otherwise."""
    scaling = r.cfg.get("rope_scaling") if isinstance(r.cfg.get("rope_scaling"), dict) else {}
    key = next((k for k in ("original_max_position_embeddings",) if scaling.get(k) is not None), None)
    value = scaling.get(key) if key else r.cfg.get("initial_context_length")
    if value is None:
        return {}
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise r.fail(key or "initial_context_length", f"must be a positive integer (got {value!r})")
    maximum = fields.get("max_positions") or 2048
    return {"train_seq_len": value} if value < maximum else {}


_SCALINGS = ("yarn", "llama3")


def rope_scaling(r) -> Config:
    """rope_scaling of type yarn or llama3 (its `rope_type`, older files' `type`): the scaling, its factor and
    YaRN's mscale / mscale_all_dim where given (DeepSeek-V2/V3); other types (linear, dynamic, longrope) and
    none: nothing (the export writes plain RoPE)."""
    scaling = r.cfg.get("rope_scaling") if isinstance(r.cfg.get("rope_scaling"), dict) else {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind not in _SCALINGS:
        return {}
    factor = scaling.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
        raise r.fail("rope_scaling.factor", f"must be a positive number (got {factor!r})")
    out: Config = {"rope_scaling": kind, "rope_scaling_factor": float(factor)}
    for key in ("mscale", "mscale_all_dim"):
        value = scaling.get(key)
        if kind == "yarn" and value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise r.fail(f"rope_scaling.{key}", f"must be a number >= 0 (got {value!r})")
            out[f"yarn_{key}"] = float(value)
    return out


def rope_theta(r) -> Config:
    """The RoPE base (ModelSpec.rope_theta): `rope_theta` (Llama, Mistral, Qwen, DeepSeek, gpt-oss, Falcon, OLMo),
    transformers v5's `rope_parameters.rope_theta`, GPT-NeoX's `rotary_emb_base`, MPT's `attn_config.rope_theta`;
    none of them: nothing (the spec's default 10000, the base of transformers' configs that leave it out)."""
    params = r.cfg.get("rope_parameters") if isinstance(r.cfg.get("rope_parameters"), dict) else {}
    attn = r.cfg.get("attn_config") if isinstance(r.cfg.get("attn_config"), dict) else {}
    for key, value in (("rope_theta", r.cfg.get("rope_theta")), ("rope_parameters.rope_theta", params.get("rope_theta")),
                       ("rotary_emb_base", r.cfg.get("rotary_emb_base")), ("attn_config.rope_theta", attn.get("rope_theta"))):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1e12:
            raise r.fail(key, f"must be a number > 0 and <= 1e12 (got {value!r})")
        return {"rope_theta": float(value)}
    return {}
