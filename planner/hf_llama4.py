"""Llama 4 configs (Scout, Maverick) -> ModelSpec fields: the text model.

Keys and defaults as transformers' configuration_llama4.py (Llama4TextConfig) and modeling_llama4.py:
- `llama4` (Llama4Config, the multimodal checkpoint) nests the text model under `text_config`; its vision
  encoder and projector are not planned (a text-only run does not train them): the note says so.
- MoE (Llama4TextMoe): `num_local_experts` routed experts of width `intermediate_size`
  (Llama4TextExperts gate_up_proj 2 x intermediate_size, down_proj), `num_experts_per_tok` of them per
  token (top-1), a router hidden x experts without bias, and ONE shared expert of `intermediate_size`
  (Llama4TextMLP). Layers in `moe_layers` (default: every `interleave_moe_layer_step`-th, 0-based
  range(step - 1, n, step)) are MoE; the others are dense MLPs of `intermediate_size_mlp`.
- Attention: grouped-query, head_dim 128, no biases; `use_qk_norm` is an L2 norm without weights
  (Llama4TextL2Norm: no parameters). Layers with RoPE (`no_rope_layers[i]` = 1; default every layer but
  each 4th, `no_rope_layer_interval` 4) run chunked attention of `attention_chunk_size` tokens
  (planner/attn_window.py); the NoPE layers attend to the whole sequence.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Config = dict[str, Any]
READ_TYPES = ("llama4", "llama4_text")
VISION_NOTE = "Llama 4's vision encoder and projector (vision_config) are not planned: the text model only"


def text_reader(r, model_type: str):
    """The reader of the text model: `text_config` of a multimodal `llama4` file, else the file itself."""
    if model_type != "llama4":
        return r
    text = r.section("text_config")
    if not text.cfg:
        raise r.fail("text_config", "missing (a llama4 config nests its text model there)")
    kind = str(text.cfg.get("model_type") or "llama4_text").lower()
    if kind != "llama4_text":
        raise r.fail("text_config", f"model_type {kind!r} (allowed: llama4_text)")
    return text


def fields(r, standard, rules) -> Config:
    """ModelSpec fields of a Llama4TextConfig (`standard`: hf_config._standard, `rules`: its Rules)."""
    out = standard(r, rules)
    n = out["n_layers"]
    if r.get_bool("attention_bias", False):
        raise r.fail("attention_bias", "true is not modelled on Llama 4 (its experts carry no biases)")
    out["qk_norm"] = "none"  # Llama4TextL2Norm: x / ||x||, no weight
    width = r.get_int("intermediate_size", default=8192)
    experts = r.get_int("num_local_experts", default=16)
    top_k = r.get_int("num_experts_per_tok", default=1)
    if top_k > experts:
        raise r.fail("num_experts_per_tok", f"{top_k} exceeds num_local_experts {experts}")
    out.update(ffn_hidden=r.get_int("intermediate_size_mlp", default=16384), moe_experts=experts, moe_top_k=top_k,
               moe_ffn_hidden=width, moe_shared_experts=1, moe_shared_ffn_hidden=width)
    out.update(_moe_layers(r, n))
    out.update(_chunks(r, n))
    return out


def _moe_layers(r, n: int) -> Config:
    step = r.get_int("interleave_moe_layer_step", default=1)
    listed = r.cfg.get("moe_layers")
    layers = list(range(step - 1, n, step)) if listed is None else listed
    if not isinstance(layers, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n
                                           for i in layers) or not layers:
        raise r.fail("moe_layers", f"must list layer indices 0..{n - 1} (got {listed!r})")
    i = np.arange(n)
    mask = np.isin(i, layers)
    for freq in range(1, n + 1):
        on = (i + 1) % freq == 0
        first = int(np.argmax(mask))
        if np.array_equal(mask, on & (i >= first)):
            return {"moe_layer_freq": freq, "moe_first_dense_layers": 0 if first == freq - 1 else first}
    raise r.fail("moe_layers", f"{layers} is not expressible (every N-th layer after the first dense ones)")


def _chunks(r, n: int) -> Config:
    chunk = r.cfg.get("attention_chunk_size", 8192)
    if chunk is None:
        return {}
    chunk = r.get_int("attention_chunk_size")
    rope = r.cfg.get("no_rope_layers")
    if not rope:
        interval = r.get_int("no_rope_layer_interval", default=4)
        rope = [int((i + 1) % interval != 0) for i in range(n)]
    if not isinstance(rope, list) or len(rope) != n or any(v not in (0, 1) for v in rope):
        raise r.fail("no_rope_layers", f"must list {n} of 0/1 (got {rope!r})")
    local = int(sum(rope))
    if local == 0:
        return {}
    return {"attn_window": chunk, "attn_chunked": True, "attn_local_layers": None if local == n else local}
