"""A preset plans at the context its model was pretrained at, as its config.json reads (planner/hf_context.py:
rope_scaling's original_max_position_embeddings): llama3-405b planned 131,072-token sequences by default (its
YaRN/llama3-scaled maximum) while Llama-3.1-405B's config.json gives 8,192 (rope_scaling original 8192)."""

import json

from planner.hf_config import load_hf_config
from planner.presets import resolve_model
from planner.resolve import seq_len_of
from planner.scenario import Scenario


def test_llama3_405b_preset_defaults_to_its_config_context(tmp_path):
    spec = resolve_model("llama3-405b")
    assert seq_len_of(Scenario(model="llama3-405b"), spec) == 8192
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16384,
           "intermediate_size": 53248, "num_hidden_layers": 126, "num_attention_heads": 128, "num_key_value_heads": 8,
           "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "hidden_act": "silu", "tie_word_embeddings": False,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    from_file = load_hf_config(path)
    assert from_file.train_seq_len == spec.train_seq_len == 8192
    assert (from_file.n_params, from_file.max_positions) == (spec.n_params, spec.max_positions)


def test_qwen3_moe_preset_plans_its_pretraining_context_not_its_maximum():
    # Qwen3 Technical Report (arXiv 2505.09388, sec. 3.2): stages S1/S2 at 4,096 tokens, S3 (long context) at 32,768;
    # config.json's 40,960 positions are the long-context maximum, not what most of its tokens trained at.
    spec = resolve_model("qwen3-30b-a3b")
    assert (spec.max_positions, spec.train_seq_len) == (40960, 4096)
    assert seq_len_of(Scenario(model="qwen3-30b-a3b"), spec) == 4096
    assert seq_len_of(Scenario(model="mixtral-8x7b"), resolve_model("mixtral-8x7b")) == 32768


def test_mistral_7b_plans_its_context_len_not_the_sliding_window_maximum():
    # Mistral 7B (arXiv 2310.06825, Table 1): context_len 8192; config.json's 32,768 positions are its window's reach
    spec = resolve_model("mistral-7b")
    assert (spec.max_positions, spec.train_seq_len) == (32768, 8192)
    assert seq_len_of(Scenario(model="mistral-7b"), spec) == 8192
