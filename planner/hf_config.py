"""A local Hugging Face `config.json` -> `ModelSpec` (shapes only; no transformers import).

Families (by `model_type`): llama / mistral (GQA, SwiGLU, RMSNorm, rope; untied unless
tie_word_embeddings), gpt2, bloom (alibi, embedding LayerNorm, tied), gpt_neox (parallel
attention counts the same; untied), mpt (alibi, no_bias, d_model/n_layers/expansion_ratio),
olmo (transformers' OlmoConfig: non-parametric LayerNorm) and OLMo's own hf_olmo format
(d_model/n_layers/mlp_ratio, layer_norm_with_affine).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.errors import PlanError
from planner.model import ModelSpec, round_up

Config = dict[str, Any]


class _Reader:
    """Typed access to one config's keys; every error names the file and the key."""

    def __init__(self, path: Path, cfg: Config):
        self.path, self.cfg = path, cfg

    def fail(self, key: str, message: str) -> PlanError:
        return PlanError("model", f"{self.path}: key {key!r}: {message}")

    def get_int(self, *keys: str, default: int | None = None) -> int:
        for key in keys:
            value = self.cfg.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
                raise self.fail(key, f"must be an integer (got {value!r})")
            if value <= 0:
                raise self.fail(key, f"must be positive (got {value!r})")
            return int(value)
        if default is None:
            raise self.fail(keys[0], "missing")
        return default

    def get_bool(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false (got {value!r})")
        return value

    def section(self, key: str) -> "_Reader":
        value = self.cfg.get(key) or {}
        if not isinstance(value, dict):
            raise self.fail(key, f"must be an object (got {value!r})")
        return _Reader(self.path, value)


def load_hf_config(path: str | Path) -> ModelSpec:
    """Read a config.json (or a folder holding one) and build its `ModelSpec`."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlanError("model", f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PlanError("model", f"{path}: cannot be read ({e})") from None
    except json.JSONDecodeError as e:
        raise PlanError("model", f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(cfg, dict):
        raise PlanError("model", f"{path}: must hold a JSON object")
    default_name = path.parent.name if path.name == "config.json" else path.stem
    return spec_from_config(cfg, source=path, default_name=default_name)


def spec_from_config(cfg: Config, *, source: str | Path = "config.json", default_name: str = "custom") -> ModelSpec:
    """The `ModelSpec` of a config.json body already read (a file's, or one sent inline)."""
    path = Path(source)
    r = _Reader(path, cfg)
    model_type = cfg.get("model_type")
    builder = _FAMILIES.get(str(model_type).lower())
    if builder is None:
        raise r.fail("model_type", f"unsupported {model_type!r} (supported: {', '.join(sorted(_FAMILIES))})")
    fields = builder(r)
    name = cfg.get("_name_or_path") or default_name
    try:
        return ModelSpec(name=str(name), source=str(path), **fields)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        raise PlanError("model", f"{path}: {field}: {first['msg']}") from None


def _vocab(vocab: int, rows: int | None) -> dict[str, int]:
    """Token vocabulary and embedding rows: rows > vocab is expressed as a padding multiple."""
    if rows is None or rows == vocab:
        return {"vocab": vocab, "vocab_multiple": 1}
    if rows > vocab and rows % 128 == 0 and round_up(vocab, 128) == rows:
        return {"vocab": vocab, "vocab_multiple": 128}
    return {"vocab": rows, "vocab_multiple": 1}


def _llama(r: _Reader) -> Config:
    attn_bias, mlp_bias = r.get_bool("attention_bias", False), r.get_bool("mlp_bias", False)
    if attn_bias != mlp_bias:
        raise r.fail("attention_bias", f"{attn_bias} with mlp_bias {mlp_bias} is not supported")
    hidden, heads = r.get_int("hidden_size"), r.get_int("num_attention_heads")
    head_dim = r.get_int("head_dim", default=hidden // heads)
    if head_dim * heads != hidden:
        raise r.fail("head_dim", f"{head_dim} x {heads} heads != hidden_size {hidden}: not supported")
    act = r.cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise r.fail("hidden_act", f"{act!r} is not supported (SwiGLU needs silu)")
    return dict(
        family=str(r.cfg["model_type"]), n_layers=r.get_int("num_hidden_layers"), hidden=hidden,
        n_heads=heads, n_kv_heads=r.get_int("num_key_value_heads", default=heads),
        ffn_hidden=r.get_int("intermediate_size"), **_vocab(r.get_int("vocab_size"), None),
        max_positions=r.get_int("max_position_embeddings", default=2048), mlp="swiglu",
        norm="rmsnorm", position="rope", tied_embeddings=r.get_bool("tie_word_embeddings", False),
        bias=attn_bias,
    )


def _gpt2(r: _Reader) -> Config:
    hidden = r.get_int("n_embd", "hidden_size")
    return dict(
        family="gpt2", n_layers=r.get_int("n_layer", "num_hidden_layers"), hidden=hidden,
        n_heads=r.get_int("n_head", "num_attention_heads"), ffn_hidden=r.get_int("n_inner", default=4 * hidden),
        **_vocab(r.get_int("vocab_size"), None), max_positions=r.get_int("n_positions", "n_ctx"),
        tied_embeddings=r.get_bool("tie_word_embeddings", True),
    )


def _bloom(r: _Reader) -> Config:
    hidden = r.get_int("hidden_size", "n_embed")
    return dict(
        family="bloom", n_layers=r.get_int("n_layer", "num_hidden_layers"), hidden=hidden,
        n_heads=r.get_int("n_head", "num_attention_heads"), **_vocab(r.get_int("vocab_size"), None),
        max_positions=r.get_int("seq_length", default=2048), position="alibi", embedding_norm=True,
        tied_embeddings=r.get_bool("tie_word_embeddings", True),
    )


def _gpt_neox(r: _Reader) -> Config:
    # use_parallel_residual changes the data flow, not the parameters.
    bias = r.get_bool("attention_bias", True)
    if not bias:
        raise r.fail("attention_bias", "false is not supported (the MLP keeps its biases)")
    return dict(
        family="gpt_neox", n_layers=r.get_int("num_hidden_layers"), hidden=r.get_int("hidden_size"),
        n_heads=r.get_int("num_attention_heads"), ffn_hidden=r.get_int("intermediate_size"),
        **_vocab(r.get_int("vocab_size"), None), max_positions=r.get_int("max_position_embeddings", default=2048),
        position="rope", tied_embeddings=r.get_bool("tie_word_embeddings", False),
    )


def _mpt(r: _Reader) -> Config:
    attn, ffn = r.section("attn_config"), r.section("ffn_config")
    hidden, heads = r.get_int("d_model"), r.get_int("n_heads")
    ratio = r.cfg.get("expansion_ratio", 4)
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or ratio <= 0:
        raise r.fail("expansion_ratio", f"must be a positive number (got {ratio!r})")
    ffn_type = ffn.cfg.get("ffn_type", "mptmlp")
    if ffn_type not in ("mptmlp", "mptglu"):
        raise r.fail("ffn_config.ffn_type", f"{ffn_type!r} is not supported (mptmlp, mptglu)")
    alibi, rope = attn.get_bool("alibi", False), attn.get_bool("rope", False)
    kv = attn.get_int("kv_n_heads", default=heads) if attn.cfg.get("attn_type") == "grouped_query_attention" else heads
    no_bias = r.get_bool("no_bias", False)
    return dict(
        family="mpt", n_layers=r.get_int("n_layers"), hidden=hidden, n_heads=heads, n_kv_heads=kv,
        ffn_hidden=ffn.get_int("ffn_hidden_size", default=int(ratio * hidden)),
        **_vocab(r.get_int("vocab_size"), None), max_positions=r.get_int("max_seq_len", default=2048),
        mlp="swiglu" if ffn_type == "mptglu" else "gelu",
        position="alibi" if alibi else ("rope" if rope else "learned"),
        tied_embeddings=r.get_bool("tie_word_embeddings", True), bias=not no_bias, norm_bias=not no_bias,
    )


def _olmo(r: _Reader) -> Config:
    if "d_model" in r.cfg:  # OLMo's own format (model_type "hf_olmo" or "olmo")
        return _olmo_native(r)
    fields = _llama(r)  # transformers' OlmoConfig: llama-shaped, LayerNorm without parameters
    return {**fields, "family": "olmo", "norm": "nonparametric"}


def _olmo_native(r: _Reader) -> Config:
    hidden, heads = r.get_int("d_model"), r.get_int("n_heads")
    act = r.cfg.get("activation_type", "swiglu")
    glu = act == "swiglu"
    mlp_total = r.get_int("mlp_hidden_size", default=r.get_int("mlp_ratio", default=4) * hidden)
    norm_type = r.cfg.get("layer_norm_type", "default")
    affine = r.get_bool("layer_norm_with_affine", True)
    include_bias = r.get_bool("include_bias", False)
    norm_bias = r.get_bool("bias_for_layer_norm", include_bias)
    if norm_type == "rms" and affine and norm_bias:
        raise r.fail("bias_for_layer_norm", "an RMSNorm with a bias is not supported")
    norm = "nonparametric" if not affine else ("rmsnorm" if norm_type == "rms" else "layernorm")
    position = "alibi" if r.get_bool("alibi", False) else ("rope" if r.get_bool("rope", False) else "learned")
    return dict(
        family="olmo", n_layers=r.get_int("n_layers"), hidden=hidden, n_heads=heads,
        n_kv_heads=r.get_int("n_kv_heads", "effective_n_kv_heads", default=heads),
        ffn_hidden=mlp_total // 2 if glu else mlp_total,
        **_vocab(r.get_int("vocab_size"), r.get_int("embedding_size", default=r.get_int("vocab_size"))),
        max_positions=r.get_int("max_sequence_length", default=2048), mlp="swiglu" if glu else "gelu",
        norm=norm, norm_bias=norm_bias, position=position, bias=include_bias,
        tied_embeddings=r.get_bool("weight_tying", True),
    )


_FAMILIES: dict[str, Callable[[_Reader], Config]] = {
    "llama": _llama, "mistral": _llama, "gpt2": _gpt2, "bloom": _bloom, "gpt_neox": _gpt_neox,
    "mpt": _mpt, "olmo": _olmo, "hf_olmo": _olmo,
}
