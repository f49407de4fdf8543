"""Mixture-of-experts config.json files read by planner/hf_config.py + planner/hf_moe.py.

The three configs are typed from the files cited in tests/planner/moe_models.py; the read specs
must equal the typed ones and give the published total / active counts."""

from __future__ import annotations

import pytest

from planner import moe
from planner.errors import PlanError
from planner.hf_config import spec_from_config
from tests.planner.moe_models import MIXTRAL_8X7B, OLMOE_1B_7B, PUBLISHED, QWEN3_30B_A3B

MIXTRAL = {"model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
           "max_position_embeddings": 32768, "num_attention_heads": 32, "num_experts_per_tok": 2,
           "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "rms_norm_eps": 1e-05,
           "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 32000}
OLMOE = {"model_type": "olmoe", "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 1024,
         "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 64,
         "num_experts_per_tok": 8, "vocab_size": 50304, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
         "tie_word_embeddings": False, "attention_bias": False, "clip_qkv": None}
QWEN3 = {"model_type": "qwen3_moe", "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
         "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
         "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
         "vocab_size": 151936, "max_position_embeddings": 40960, "tie_word_embeddings": False,
         "use_sliding_window": False, "sliding_window": None, "max_window_layers": 48, "attention_bias": False,
         "rms_norm_eps": 1e-06, "norm_topk_prob": True}
# Qwen/Qwen1.5-MoE-A2.7B config.json (qwen2_moe: 60 experts of 1408, top-4, one shared expert of 5632)
QWEN15_MOE = {"model_type": "qwen2_moe", "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632,
              "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_hidden_layers": 24,
              "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
              "decoder_sparse_step": 1, "vocab_size": 151936, "max_position_embeddings": 8192,
              "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": 32768, "rms_norm_eps": 1e-06}
OWN = {"name", "source", "published_params", "family", "n_kv_heads"}  # n_kv_heads None = n_heads: kv_heads


@pytest.mark.parametrize(("cfg", "typed"), [(MIXTRAL, MIXTRAL_8X7B), (OLMOE, OLMOE_1B_7B), (QWEN3, QWEN3_30B_A3B)],
                         ids=["mixtral", "olmoe", "qwen3_moe"])
def test_read_config_is_the_typed_spec_with_the_published_counts(cfg, typed):
    spec = spec_from_config(cfg)
    got = {k: v for k, v in spec.model_dump().items() if k not in OWN}
    assert got == {k: v for k, v in typed.model_dump().items() if k not in OWN} and spec.kv_heads == typed.kv_heads
    total, active = next((t, a) for s, t, a in PUBLISHED if s is typed)
    assert abs(spec.n_params - total) < 0.1e9 and abs(moe.active_params(spec) - active) < 0.1e9


def test_mixtral_8x7b_to_the_published_digits():
    spec = spec_from_config(MIXTRAL)  # "46.7B total parameters but only uses 12.9B parameters per token"
    assert round(spec.n_params / 1e8) == 467 and round(moe.active_params(spec) / 1e8) == 129


def test_qwen2_moe_shared_expert_and_qkv_biases():
    spec = spec_from_config(QWEN15_MOE)
    assert (spec.moe_experts, spec.moe_top_k, spec.moe_ffn_hidden) == (60, 4, 1408)
    assert (spec.moe_shared_experts, spec.moe_shared_ffn_hidden, spec.qkv_bias, spec.bias) == (1, 5632, True, False)
    assert spec.attn_window is None  # use_sliding_window false
    # per layer: router 60 x 2048, 60 routed + 1 shared SwiGLU experts (3 x 2048 x width), no biases
    per_layer = 60 * 2048 + 60 * 3 * 2048 * 1408 + 3 * 2048 * 5632
    assert moe.moe_mlp_params(spec) == per_layer
    # the model card's "14.3B parameters in total"
    assert round(spec.n_params / 1e8) == 143


@pytest.mark.parametrize(("step", "dense", "freq", "first"), [
    (1, [], 1, 0), (2, None, 2, 0), (1, [0, 1, 2], 1, 3), (2, [1, 3], 2, 5), (2, [0], 2, 0)])
def test_sparse_step_and_dense_prefix(step, dense, freq, first):
    spec = spec_from_config({**QWEN3, "decoder_sparse_step": step, "mlp_only_layers": dense})
    assert (spec.moe_layer_freq, spec.moe_first_dense_layers) == (freq, first)
    hf = [i not in (dense or []) and (i + 1) % step == 0 for i in range(48)]
    assert moe.moe_layer_mask(spec).tolist() == hf


@pytest.mark.parametrize(("cfg", "words"), [
    ({**QWEN3, "mlp_only_layers": [5]}, "key 'mlp_only_layers': [5] is not expressible"),
    ({**QWEN3, "mlp_only_layers": list(range(48))}, "leaves no MoE layer"),
    ({**QWEN3, "mlp_only_layers": "0"}, "key 'mlp_only_layers': must be a list"),
    ({**QWEN3, "use_sliding_window": True}, "key 'use_sliding_window'"),
    ({**MIXTRAL, "num_experts_per_tok": 9}, "key 'num_experts_per_tok': 9 exceeds num_local_experts 8"),
    ({**MIXTRAL, "num_local_experts": None}, "key 'num_local_experts': missing"),
    ({**OLMOE, "attention_bias": True}, "key 'attention_bias': true with bias-free experts (olmoe)"),
    ({**MIXTRAL, "model_type": "phimoe", "lm_head_bias": True}, "key 'lm_head_bias'"),
    ({**MIXTRAL, "model_type": "jetmoe"}, "mixture-of-experts model_type 'jetmoe' is not modelled"),  # jamba: hf_ssm.py
    ({**MIXTRAL, "kv_lora_rank": 512}, "multi-head latent attention (mixtral"),
])
def test_unexpressible_moe_configs_are_refused_naming_the_key(cfg, words):
    with pytest.raises(PlanError) as e:
        spec_from_config(cfg)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_granitemoe_and_phimoe_read_their_expert_keys():
    granite = spec_from_config({**MIXTRAL, "model_type": "granitemoe", "num_local_experts": 32,
                                "num_experts_per_tok": 8, "intermediate_size": 512, "embedding_multiplier": 12.0})
    assert (granite.moe_experts, granite.moe_top_k, granite.moe_ffn_hidden, granite.norm) == (32, 8, 512, "rmsnorm")
    phi = spec_from_config({**MIXTRAL, "model_type": "phimoe", "num_local_experts": 16})
    assert (phi.moe_experts, phi.moe_top_k, phi.norm, phi.norm_bias) == (16, 2, "layernorm", True)


def _gpt_oss(layers: int, experts: int) -> dict:
    """openai/gpt-oss-20b / -120b config.json (GptOssConfig): alternating sliding (128) / full layers."""
    return {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "hidden_act": "silu", "hidden_size": 2880,
            "intermediate_size": 2880, "num_hidden_layers": layers, "num_attention_heads": 64, "num_key_value_heads": 8,
            "head_dim": 64, "num_local_experts": experts, "num_experts_per_tok": 4, "vocab_size": 201088,
            "sliding_window": 128, "attention_bias": True, "tie_word_embeddings": False, "rms_norm_eps": 1e-05,
            "max_position_embeddings": 131072, "initial_context_length": 4096, "rope_theta": 150000,
            "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                             "rope_type": "yarn", "truncate": False},
            "layer_types": ["sliding_attention", "full_attention"] * (layers // 2)}


@pytest.mark.parametrize(("layers", "experts", "total_b", "active_b"), [(24, 32, 20.91, 3.61), (36, 128, 116.83, 5.13)],
                         ids=["gpt-oss-20b", "gpt-oss-120b"])
def test_gpt_oss_reads_with_biased_experts_and_its_published_counts(layers, experts, total_b, active_b):
    """OpenAI's gpt-oss model card (Aug 2025, Table 1): 20.91B / 116.83B total, 3.61B / 5.13B active per token.
    The card's active count leaves out the input embedding (a lookup); `moe.active_params` counts both
    embeddings (as Mixtral's 12.9B does): the card's figure + 201088 x 2880."""
    spec = spec_from_config(_gpt_oss(layers, experts))
    assert (spec.moe_experts, spec.moe_top_k, spec.moe_ffn_hidden, spec.mlp, spec.bias) == (experts, 4, 2880, "swiglu", True)
    assert spec.attn_window == 128 and spec.n_kv_heads == 8 and spec.train_seq_len == 4096
    assert spec.n_params / 1e9 == pytest.approx(total_b, rel=0.002)
    embedding = 201088 * 2880
    assert (moe.active_params(spec) - embedding) / 1e9 == pytest.approx(active_b, rel=0.01)


def test_the_report_says_the_counts_and_where_seq_len_came_from():
    """gpt-oss's card counts 3.61B active without the input embedding; the planner's count has both embeddings:
    the header says so, and --json / POST /estimate carry the totals and the seq_len's origin."""
    from planner import api
    from planner.scenario import Scenario

    report = api.estimate(Scenario(model="gpt-oss-20b", gpu="h100-80gb", gpus=8, ep=8, tp=1, pp=1), top=1)
    spec = report.model
    assert (report.n_params, report.active_params) == (spec.n_params, moe.active_params(spec))
    assert "train_seq_len 4,096" in report.seq_len_rule and report.seq_len == 4096
    assert "active, embeddings included" in spec.describe()
    pinned = api.estimate(Scenario(model="gpt-oss-20b", gpu="h100-80gb", gpus=8, ep=8, tp=1, pp=1, seq_len=2048), top=1)
    assert pinned.seq_len_rule.startswith("pinned") and pinned.model_dump(mode="json")["active_params"] < spec.n_params
