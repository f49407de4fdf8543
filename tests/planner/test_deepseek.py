"""The DeepSeek-V2/V3 family: config.json files written from the published values read into the typed
shapes (planner/hf_deepseek.py), the presets equal to them, total / activated parameters against the
papers, the MTP module counted apart, and the one-line errors of an unexpressible config."""

import json

import pytest

from planner import flops, moe, mtp
from planner.errors import PlanError
from planner.hf_config import load_hf_config, spec_from_config
from planner.presets import resolve_model
from tests.planner.deepseek_models import DEEPSEEK_V2, DEEPSEEK_V2_LITE, DEEPSEEK_V3, PUBLISHED

_COMMON = dict(hidden_act="silu", rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False,
               max_position_embeddings=163840, rope_theta=10000, kv_lora_rank=512, qk_nope_head_dim=128,
               qk_rope_head_dim=64, v_head_dim=128, moe_layer_freq=1, norm_topk_prob=False)
# deepseek-ai/DeepSeek-V3 config.json (the keys that shape the model, as published)
V3_CONFIG = {**_COMMON, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
             "intermediate_size": 18432, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
             "q_lora_rank": 1536, "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1,
             "moe_intermediate_size": 2048, "first_k_dense_replace": 3, "n_group": 8, "topk_group": 4,
             "topk_method": "noaux_tc", "scoring_func": "sigmoid", "routed_scaling_factor": 2.5, "norm_topk_prob": True,
             "num_nextn_predict_layers": 1, "vocab_size": 129280}
V2_CONFIG = {**_COMMON, "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 5120,
             "intermediate_size": 12288, "num_hidden_layers": 60, "num_attention_heads": 128, "num_key_value_heads": 128,
             "q_lora_rank": 1536, "n_routed_experts": 160, "num_experts_per_tok": 6, "n_shared_experts": 2,
             "moe_intermediate_size": 1536, "first_k_dense_replace": 1, "n_group": 8, "topk_group": 3,
             "topk_method": "group_limited_greedy", "routed_scaling_factor": 16.0, "vocab_size": 102400}
V2_LITE_CONFIG = {**_COMMON, "model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
                  "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16, "q_lora_rank": None,
                  "n_routed_experts": 64, "num_experts_per_tok": 6, "n_shared_experts": 2, "moe_intermediate_size": 1408,
                  "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "topk_method": "greedy", "vocab_size": 102400}
# rope_scaling as published (V2 / V2-Lite mscale 0.707, V3 1.0): YaRN x40 from the 4096-token pretraining context,
# which the planner reads as the default seq_len (planner/hf_context.py), as the presets say (train_seq_len)
_YARN = dict(type="yarn", factor=40, beta_fast=32, beta_slow=1, original_max_position_embeddings=4096)
for _cfg, _mscale in ((V2_LITE_CONFIG, 0.707), (V2_CONFIG, 0.707), (V3_CONFIG, 1.0)):
    _cfg["rope_scaling"] = {**_YARN, "mscale": _mscale, "mscale_all_dim": _mscale}
CASES = [(V2_LITE_CONFIG, DEEPSEEK_V2_LITE), (V2_CONFIG, DEEPSEEK_V2), (V3_CONFIG, DEEPSEEK_V3)]
SHAPE = [k for k in type(DEEPSEEK_V3).model_fields if k not in ("name", "source", "published_params", "n_kv_heads")]


def _same_shape(a, b):
    got, want = ({k: getattr(x, k) for k in SHAPE} | {"kv_heads": x.kv_heads} for x in (a, b))
    assert {k: v for k, v in got.items() if want[k] != v} == {}
    return True


@pytest.mark.parametrize("cfg,typed", CASES, ids=lambda x: getattr(x, "name", ""))
def test_config_file_reads_into_the_typed_shape(tmp_path, cfg, typed):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert _same_shape(load_hf_config(path), typed)


@pytest.mark.parametrize("typed", [DEEPSEEK_V2_LITE, DEEPSEEK_V2, DEEPSEEK_V3], ids=lambda x: x.name)
def test_presets_are_the_typed_shapes(typed):
    assert _same_shape(resolve_model(typed.name), typed)


@pytest.mark.parametrize("typed", [DEEPSEEK_V2_LITE, DEEPSEEK_V2, DEEPSEEK_V3], ids=lambda x: x.name)
def test_presets_plan_at_the_pretraining_context_by_default(typed):
    """`plan estimate --model deepseek-v3` planned 163,840-token sequences (the YaRN-extended maximum) while the same
    model's config.json gives 4,096 (rope_scaling's original_max_position_embeddings), as the README's rule says."""
    from planner.resolve import seq_len_of
    from planner.scenario import Scenario

    assert seq_len_of(Scenario(model=typed.name), resolve_model(typed.name)) == 4096
    assert seq_len_of(Scenario(model=typed.name, seq_len=32768), resolve_model(typed.name)) == 32768


def deepseek_activated(spec) -> int:
    """DeepSeek's activated count: the parameters a token multiplies, the input embedding (a lookup) not
    counted (the only convention that gives all three published figures; with it: 2.66B / 21.4B / 37.6B)."""
    return moe.active_params(spec) - spec.vocab_padded * spec.hidden


@pytest.mark.parametrize("spec,total,active", PUBLISHED, ids=lambda x: getattr(x, "name", ""))
def test_total_and_activated_params_against_the_papers(spec, total, active):
    assert spec.n_params == pytest.approx(total, rel=0.01)  # 15.706B, 235.74B, 671.03B
    # published to 2 significant digits: V2 20.85B "21B" (-0.7%), V3 36.63B "37B" (-1.0%, inside the
    # figure's rounding 36.5-37.5), V2-Lite 2.451B "2.4B" (+2.1%: the paper truncates 2.45)
    assert deepseek_activated(spec) == pytest.approx(active, rel=0.025)
    unit = 10 ** (len(str(int(active))) - 2)  # the published figure is ours rounded or truncated to its digits
    assert active in (round(deepseek_activated(spec) / unit) * unit, deepseek_activated(spec) // unit * unit)


def test_v3_counts_by_hand_and_the_mtp_module_apart():
    h, v, e = 7168, 129280, 3 * 7168 * 2048
    attn = 187_107_328 + 2 * h  # MLA linears and latent norms + the block's two RMSNorms
    moe_layer = attn + 256 * h + 257 * e  # router, 256 routed + 1 shared expert
    dense_layer = attn + 3 * h * 18432
    assert DEEPSEEK_V3.n_params == 3 * dense_layer + 58 * moe_layer + 2 * v * h + h
    # V3 sec. 2.2: one block (an MoE layer), M_k (hidden x 2 hidden), RMSNorms; embedding and head shared
    assert mtp.params(DEEPSEEK_V3) == moe_layer + 2 * h * h + 3 * h
    # the model card: "685B ... 671B of the Main Model weights and 14B of the MTP Module weights"
    assert round(mtp.checkpoint_params(DEEPSEEK_V3) / 1e9) == 13 and round(
        (DEEPSEEK_V3.n_params + mtp.checkpoint_params(DEEPSEEK_V3)) / 1e9) == 684
    assert mtp.params(DEEPSEEK_V2) == 0 and mtp.training_flops_per_token(DEEPSEEK_V2, 4096) == 0.0


def test_v3_training_flops_per_token():
    """6 x 36.6B activated matrices + 3 x the MLA core at 4K (no causal halving) = 281 GFLOPs per token;
    the MTP module adds 10.7 GFLOPs (3.8%), left out of the model FLOPs as the report's 37B leaves it out."""
    s = 4096
    assert flops.model_flops_per_token(DEEPSEEK_V3, s) / 1e9 == pytest.approx(281.15, abs=0.01)
    assert 6 * deepseek_activated(DEEPSEEK_V3) / 1e9 == pytest.approx(219.75, abs=0.01)
    assert mtp.training_flops_per_token(DEEPSEEK_V3, s) / 1e9 == pytest.approx(10.70, abs=0.01)


@pytest.mark.parametrize("changes,words", [
    (dict(moe_layer_freq=2), "key 'moe_layer_freq': 2 is not modelled"),
    (dict(num_key_value_heads=8), "key 'num_key_value_heads': 8 must equal num_attention_heads 128"),
    (dict(kv_lora_rank=None), "key 'kv_lora_rank': missing"),
    (dict(num_experts_per_tok=300), "key 'num_experts_per_tok': 300 exceeds n_routed_experts 256"),
    (dict(qk_rope_head_dim="64"), "key 'qk_rope_head_dim': must be an integer"),
])
def test_unexpressible_deepseek_configs_are_refused_naming_the_key(changes, words):
    with pytest.raises(PlanError) as e:
        spec_from_config({**V3_CONFIG, **changes})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_dense_deepseek_config_and_v2_lite_q_lora_rank_zero():
    dense = spec_from_config({**V2_LITE_CONFIG, "n_routed_experts": None})
    assert dense.moe_experts == 0 and dense.kv_lora_rank == 512
    assert spec_from_config({**V2_LITE_CONFIG, "q_lora_rank": 0}).q_lora_rank is None  # DeepSeek's own configs
