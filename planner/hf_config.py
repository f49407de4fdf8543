"""A local Hugging Face `config.json` -> `ModelSpec` (shapes only; no transformers import).

Any decoder-only config reads from its standard keys (hidden_size, num_hidden_layers,
num_attention_heads, num_key_value_heads, head_dim, intermediate_size, hidden_act, vocab_size,
tie_word_embeddings, attention_bias/mlp_bias), with `RULES` only where a family departs from
them: Qwen2's q/k/v biases, Gemma's GeGLU, head_dim 256 and post-norms, Gemma 3 / Qwen3 q/k
norms, StarCoder2's LayerNorm and use_bias, the config classes' tying defaults. Families with
their own keys have their own readers: gpt2, bloom (alibi, embedding LayerNorm), gpt_neox
(use_parallel_residual), gptj (parallel block), mpt (d_model/expansion_ratio, no_bias), falcon
(multi-query, parallel attention, new decoder architecture), olmo / hf_olmo (non-parametric
LayerNorm); phi (Phi-1/2) and cohere read from the standard keys with a parallel block.
Mixture-of-experts configs of Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, GraniteMoE, PhiMoE and gpt-oss read their
expert keys in planner/hf_moe.py, Llama 4 (Scout, Maverick: MoE, chunked attention) in planner/hf_llama4.py, DeepSeek-V2/V3 their latent attention, expert and MTP keys in
planner/hf_deepseek.py; Mamba, Mamba-2, Falcon-Mamba, Jamba and Nemotron-H in planner/hf_ssm.py; other MoE
and state-space families, other multi-head latent attention and encoder models are refused in one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner import hf_context, hf_deepseek, hf_llama4, hf_moe, hf_ssm
from planner.errors import PlanError
from planner.model import ModelSpec, round_up

Config = dict[str, Any]


class _Reader:
    """Typed access to one config's keys; every error names the file and the key."""

    def __init__(self, path: Path, cfg: Config, where: str = ""):
        self.path, self.cfg, self.where = path, cfg, where  # where: the nested object's path ("text_config.")

    def fail(self, key: str, message: str) -> PlanError:
        return PlanError("model", f"{self.path}: key {self.where + key!r}: {message}")

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
        return _Reader(self.path, value, f"{self.where}{key}.")


def load_hf_config(path: str | Path, name: str | None = None, source: str | None = None) -> ModelSpec:
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
    if name is None and not cfg.get("_name_or_path"):  # ./config.json: its folder's name, not ""
        name = (path.absolute().parent.name if path.name == "config.json" else path.stem) or path.name
    return spec_from_config(cfg, path, name=name, source=source)


def spec_from_config(cfg: Config, path: str | Path = "config.json", name: str | None = None,
                     source: str | None = None) -> ModelSpec:
    """The `ModelSpec` of a config.json body already read (a file's, or one sent inline);
    errors name `path` and the key."""
    path = Path(path)
    r = _Reader(path, cfg)
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise r.fail("model_type", f"missing or not a string (got {model_type!r})")
    model_type = model_type.lower()
    fields = hf_ssm.read(r, model_type, _standard)  # state-space / hybrid stacks (None: not one)
    if model_type in hf_llama4.READ_TYPES:  # Llama 4: MoE + chunked attention (planner/hf_llama4.py)
        if model_type == "llama4":
            source = f"{source or path} ({hf_llama4.VISION_NOTE})"
        fields = hf_llama4.fields(hf_llama4.text_reader(r, model_type), _standard, Rules(gated=True))
    elif fields is None:
        _refuse_unmodelled(r, model_type)
        builder = _FAMILIES.get(model_type, _standard)
        fields = builder(r)
        if model_type in hf_moe.READ_TYPES:
            fields.update(hf_moe.moe_fields(r, model_type, fields))
        if model_type in hf_deepseek.READ_TYPES:  # MLA, MoE and MTP keys (planner/hf_deepseek.py)
            fields.update(hf_deepseek.deepseek_fields(r, fields))
        fields.update(hf_context.window(r, model_type, fields["n_layers"]))
    text = hf_llama4.text_reader(r, model_type) if model_type == "llama4" else r
    fields.update(hf_context.pretrain_len(text, fields))
    if fields.get("position") == "rope":
        fields.update(hf_context.rope_scaling(text) | hf_context.rope_theta(text))
    name = name or cfg.get("_name_or_path") or (path.parent.name if path.name == "config.json" else path.stem) or path.name
    try:
        return ModelSpec(name=str(name), source=source or str(path), **fields)
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


@dataclass(frozen=True)
class Rules:
    """Where a family departs from the standard keys (transformers' config class and modeling code)."""

    gated: bool | None = None  # None: from the activation (silu/swish: gated, as LLaMA)
    tied_default: bool = False  # tie_word_embeddings when the file omits it (its config class's default)
    qkv_bias: bool | None = None  # fixed by the modeling code, whatever the config says
    norms_per_layer: int = 2
    qk_norm: str = "none"
    norm: str | None = None  # None: from the epsilon key (rms_norm_eps: RMSNorm)
    bias_key: str = "attention_bias"  # the key that puts biases on every linear layer
    bias: bool | None = None  # biases fixed by the modeling code (Phi: on every linear), whatever the config says
    norm_bias: bool = True  # Cohere's LayerNorm has a weight only
    parallel_block: bool = False  # attention and MLP on the same input, summed (planner/parallel_block.py)


# Families not listed read with Rules() from the standard keys.
RULES: dict[str, Rules] = {
    "llama": Rules(gated=True), "mistral": Rules(gated=True), "phi3": Rules(gated=True),  # phi3: fused gate_up
    "qwen2": Rules(gated=True, qkv_bias=True),  # Qwen2Attention: q/k/v with biases, o without
    "qwen3": Rules(gated=True, qk_norm="per_head"),
    "gemma": Rules(gated=True, tied_default=True),  # GeGLU, head_dim 256 != hidden / heads
    "gemma2": Rules(gated=True, tied_default=True, norms_per_layer=4),  # pre- and post-norms
    "gemma3_text": Rules(gated=True, tied_default=True, norms_per_layer=4, qk_norm="per_head"),
    "olmo2": Rules(gated=True, qk_norm="full"),  # post-norms only, q/k RMSNorm over the full width
    "starcoder2": Rules(gated=False, tied_default=True, bias_key="use_bias", norm="layernorm"),
    # parallel blocks on one input LayerNorm (transformers' PhiDecoderLayer, CohereDecoderLayer)
    "phi": Rules(gated=False, bias=True, norms_per_layer=1, norm="layernorm", parallel_block=True),
    "cohere": Rules(gated=True, tied_default=True, norms_per_layer=1, norm="layernorm", norm_bias=False,
                    parallel_block=True),
    "cohere2": Rules(gated=True, tied_default=True, norms_per_layer=1, norm="layernorm", norm_bias=False,
                     parallel_block=True),  # Cohere2DecoderLayer: Cohere's block with local/global layers
    # mixture-of-experts families (their expert keys: planner/hf_moe.py)
    "mixtral": Rules(gated=True), "olmoe": Rules(gated=True, qk_norm="full"), "granitemoe": Rules(gated=True),
    "qwen2_moe": Rules(gated=True, qkv_bias=True), "qwen3_moe": Rules(gated=True, qk_norm="per_head"),
    "phimoe": Rules(gated=True, norm="layernorm"),  # PhimoeDecoderLayer: nn.LayerNorm with bias
    "gpt_oss": Rules(gated=True),  # GptOssExperts: clamped SwiGLU (gate_up_proj), biases per attention_bias
    "deepseek_v2": Rules(gated=True), "deepseek_v3": Rules(gated=True),  # + MLA keys: planner/hf_deepseek.py
    # Nemotron-4 / Minitron (transformers' NemotronMLP: up_proj, relu2, down_proj: not gated;
    # NemotronLayerNorm1P is an nn.LayerNorm with weight and bias; its key is norm_eps)
    "nemotron": Rules(gated=False, norm="layernorm"),
}
GATED_ACTS = ("silu", "swish")


def _standard(r: _Reader, rules: Rules | None = None) -> Config:
    """Any decoder-only config from its standard keys, with a family's `Rules`."""
    rules = rules or RULES.get(str(r.cfg.get("model_type")).lower(), Rules())
    hidden = r.get_int("hidden_size", "n_embd", "d_model")
    heads = r.get_int("num_attention_heads", "n_head", "num_heads", "n_heads")
    head_dim = r.get_int("head_dim", default=hidden // heads if hidden % heads == 0 else 0) or None
    if head_dim is None:
        raise r.fail("head_dim", f"missing, and hidden_size {hidden} is not a multiple of {heads} heads")
    act = next((r.cfg[k] for k in ("hidden_act", "hidden_activation", "activation_function") if r.cfg.get(k)), "silu")
    gated = rules.gated if rules.gated is not None else str(act) in GATED_ACTS
    all_bias = rules.bias if rules.bias is not None else r.get_bool(rules.bias_key, False)
    mlp_bias = r.get_bool("mlp_bias", all_bias)
    if all_bias != mlp_bias:
        raise r.fail("mlp_bias", f"{mlp_bias} with {rules.bias_key} {all_bias} is not supported")
    layer_norm = "rms_norm_eps" not in r.cfg and (
        r.cfg.get("norm_type") == "layer_norm" or any(k in r.cfg for k in ("layer_norm_eps", "layer_norm_epsilon")))
    norm = rules.norm or ("layernorm" if layer_norm else "rmsnorm")
    return dict(
        family=str(r.cfg.get("model_type")), n_layers=r.get_int("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
        hidden=hidden, n_heads=heads, n_kv_heads=r.get_int("num_key_value_heads", "num_kv_heads", default=heads),
        attn_head_dim=None if head_dim * heads == hidden else head_dim,
        ffn_hidden=r.get_int("intermediate_size", "n_inner", "ffn_hidden_size", default=4 * hidden),
        **_vocab(r.get_int("vocab_size"), None),
        max_positions=r.get_int("max_position_embeddings", "n_positions", "max_seq_len", default=2048),
        mlp="swiglu" if gated else "gelu", norm=norm, position="alibi" if r.get_bool("alibi", False) else "rope",
        tied_embeddings=r.get_bool("tie_word_embeddings", rules.tied_default), bias=all_bias,
        qkv_bias=rules.qkv_bias, norms_per_layer=rules.norms_per_layer, norm_bias=rules.norm_bias,
        qk_norm="full" if r.get_bool("use_qk_norm", False) else rules.qk_norm, parallel_block=rules.parallel_block,
    )


def _falcon(r: _Reader) -> Config:
    """transformers' FalconConfig: multi-query (7B) or grouped kv heads with two LayerNorms in
    the new decoder architecture (40B/180B); parallel attention and MLP share one LayerNorm."""
    hidden, heads = r.get_int("hidden_size"), r.get_int("num_attention_heads", "n_head")
    new_arch, parallel = r.get_bool("new_decoder_architecture", False), r.get_bool("parallel_attn", True)
    if new_arch:  # FalconDecoderLayer: num_ln_in_parallel_attn None -> 2 (ln_attn, ln_mlp)
        kv, norms = r.get_int("num_kv_heads", "n_head_kv", default=heads), r.get_int("num_ln_in_parallel_attn", default=2)
    else:
        kv, norms = 1 if r.get_bool("multi_query", True) else heads, 1
    norms = norms if parallel else 2
    return dict(
        family="falcon", n_layers=r.get_int("num_hidden_layers", "n_layer"), hidden=hidden, n_heads=heads,
        n_kv_heads=kv, ffn_hidden=r.get_int("ffn_hidden_size", default=4 * hidden),
        **_vocab(r.get_int("vocab_size"), None), max_positions=r.get_int("max_position_embeddings", default=2048),
        norm="layernorm", position="alibi" if r.get_bool("alibi", False) else "rope",
        tied_embeddings=r.get_bool("tie_word_embeddings", True), bias=r.get_bool("bias", False), norms_per_layer=norms,
        parallel_block=parallel,
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
    # use_parallel_residual (GPTNeoXConfig default True) changes the data flow, not the parameters.
    bias = r.get_bool("attention_bias", True)
    if not bias:
        raise r.fail("attention_bias", "false is not supported (the MLP keeps its biases)")
    return dict(
        family="gpt_neox", n_layers=r.get_int("num_hidden_layers"), hidden=r.get_int("hidden_size"),
        n_heads=r.get_int("num_attention_heads"), ffn_hidden=r.get_int("intermediate_size"),
        **_vocab(r.get_int("vocab_size"), None), max_positions=r.get_int("max_position_embeddings", default=2048),
        position="rope", tied_embeddings=r.get_bool("tie_word_embeddings", False),
        parallel_block=r.get_bool("use_parallel_residual", True),
    )


def _gptj(r: _Reader) -> Config:
    """transformers' GPTJConfig / GPTJBlock: one ln_1 feeding attention and MLP in parallel,
    q/k/v/out without biases, fc_in/fc_out with them (the out projection's bias, 0.002% of the
    parameters, is counted by ModelSpec's `bias`), untied lm_head."""
    hidden = r.get_int("n_embd", "hidden_size")
    return dict(
        family="gptj", n_layers=r.get_int("n_layer", "num_hidden_layers"), hidden=hidden,
        n_heads=r.get_int("n_head", "num_attention_heads"), ffn_hidden=r.get_int("n_inner", default=4 * hidden),
        **_vocab(r.get_int("vocab_size"), None), max_positions=r.get_int("n_positions", default=2048),
        position="rope", tied_embeddings=r.get_bool("tie_word_embeddings", False), bias=True, qkv_bias=False,
        norms_per_layer=1, parallel_block=True,
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
    fields = _standard(r, Rules(gated=True))  # transformers' OlmoConfig: LayerNorm without parameters
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


# Families whose keys are not the standard ones; every other decoder-only config reads with _standard.
_FAMILIES: dict[str, Callable[[_Reader], Config]] = {
    "gpt2": _gpt2, "bloom": _bloom, "gpt_neox": _gpt_neox, "mpt": _mpt, "olmo": _olmo, "hf_olmo": _olmo,
    "falcon": _falcon, "gptj": _gptj,
}
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx", "olmoe", "jamba",
             "granitemoe", "phimoe", "arctic", "jetmoe", "minimax", "llama4")
MLA_KEYS = ("kv_lora_rank", "q_lora_rank")  # DeepSeek-V2/V3 multi-head latent attention
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok")
ENCODER_TYPES = ("bert", "roberta", "deberta", "deberta-v2", "distilbert", "electra", "xlm-roberta", "t5", "mt5",
                 "bart", "mbart", "pegasus", "whisper", "umt5", "longt5")


def _refuse_unmodelled(r: _Reader, model_type: str) -> None:
    """Multi-head latent attention, mixture-of-experts families planner/hf_moe.py does not read (the
    shape can still go in by the --moe-* options) and encoder(-decoder) configs: one line, not a wrong answer."""
    mla = next((k for k in MLA_KEYS if r.cfg.get(k)), None)
    if mla and model_type not in hf_deepseek.READ_TYPES:
        raise r.fail(mla, f"multi-head latent attention ({model_type}, {mla}={r.cfg[mla]}: DeepSeek-V2/V3's "
                          "compressed K/V) is not modelled")
    moe_key = next((k for k in MOE_KEYS if isinstance(r.cfg.get(k), int) and r.cfg[k] > 1), None)
    if (model_type in MOE_TYPES or moe_key) and model_type not in hf_moe.READ_TYPES + hf_deepseek.READ_TYPES:
        what = f"{model_type}" + (f", {moe_key}={r.cfg[moe_key]}" if moe_key else "")
        raise r.fail("model_type", f"mixture-of-experts model_type {model_type!r} is not modelled ({what}; read: "
                                   f"{', '.join(hf_moe.READ_TYPES)}); give the shape by --moe-experts, --moe-top-k, "
                                   "--moe-ffn-hidden, ...")
    if model_type in ENCODER_TYPES or r.cfg.get("is_encoder_decoder") is True:
        raise r.fail("model_type", f"{model_type!r} is an encoder or encoder-decoder model; "
                                   "only decoder-only transformers are modelled")
