"""Llama 4 config.json files (planner/hf_llama4.py) and chunked local attention (planner/attn_window.py).

Configs typed after the base checkpoints meta-llama/Llama-4-Scout-17B-16E and Llama-4-Maverick-17B-128E (Llama4Config
with a Llama4TextConfig under text_config) as AMD Primus's Megatron presets transcribe them
(primus/configs/models/megatron/llama4_17B16E.yaml, llama4_17B128E.yaml): 262,144 positions both, llama3-type
RoPE scaling x16 on Scout only (original_max_position_embeddings 8192, Llama 3.x's, is our reading), q/k norm on
Scout only. Meta's model cards: Scout 17B active / 109B total, Maverick 17B active /
400B total; both totals include the vision encoder, which the planner leaves out (text model only)."""

from __future__ import annotations

import numpy as np
import pytest

from planner import attn_window, flops, moe
from planner.errors import PlanError
from planner.exports.megatron_args import model_refusal
from planner.hf_config import spec_from_config

TEXT = {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_act": "silu", "vocab_size": 202048, "num_local_experts": 16, "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1, "attention_chunk_size": 8192, "use_qk_norm": True, "rms_norm_eps": 1e-05,
        "max_position_embeddings": 262144, "tie_word_embeddings": False, "attention_bias": False,
        "no_rope_layers": [], "moe_layers": None, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
SCOUT = {"model_type": "llama4", "text_config": TEXT, "vision_config": {"hidden_size": 1408, "num_hidden_layers": 34}}
MAVERICK = {**SCOUT, "text_config": {**TEXT, "num_local_experts": 128, "interleave_moe_layer_step": 2,
                                     "use_qk_norm": False, "rope_scaling": None}}


def test_scout_and_maverick_read_as_their_model_cards():
    scout, maverick = spec_from_config(SCOUT), spec_from_config(MAVERICK)
    assert moe.active_params(scout) / 1e9 == pytest.approx(17.0, rel=0.015)
    assert moe.active_params(maverick) / 1e9 == pytest.approx(17.0, rel=0.015)
    assert maverick.n_params / 1e9 == pytest.approx(400.0, rel=0.005)
    # the card's 109B counts the vision encoder (~1.2B); the text model is below it
    assert 106.5 < scout.n_params / 1e9 < 109.0
    assert (moe.n_moe_layers(scout), moe.n_moe_layers(maverick)) == (48, 24)
    assert moe.moe_layer_mask(maverick)[:4].tolist() == [False, True, False, True]  # moe_layers = range(1, 48, 2)
    for spec in (scout, maverick):
        assert (spec.moe_top_k, spec.moe_shared_experts, spec.moe_ffn_hidden, spec.ffn) == (1, 1, 8192, 16384)
        assert (spec.attn_window, spec.attn_chunked, spec.attn_local_layers) == (8192, True, 36)  # NoPE every 4th
        assert spec.qk_norm == "none" and "vision encoder" in spec.source
        assert "chunked attention 8192 on 36/48 layers" in spec.describe()


def test_a_text_only_file_and_explicit_lists_read_alike():
    text = spec_from_config({**TEXT, "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(48)],
                             "moe_layers": list(range(48))})
    assert text.n_params == spec_from_config(SCOUT).n_params and text.attn_local_layers == 36
    full = spec_from_config({**TEXT, "attention_chunk_size": None})
    assert full.attn_window is None and not full.attn_chunked


@pytest.mark.parametrize(("cfg", "key"), [
    ({"model_type": "llama4"}, "text_config"),
    ({**SCOUT, "text_config": {**TEXT, "model_type": "mllama"}}, "text_config"),
    ({**TEXT, "no_rope_layers": [1, 0]}, "no_rope_layers"),
    ({**TEXT, "moe_layers": [0, 5, 7]}, "moe_layers"),
    ({**TEXT, "num_experts_per_tok": 32}, "num_experts_per_tok"),
    ({**TEXT, "attention_bias": True}, "attention_bias"),
    # a key of the nested text model is named by its path in the file
    ({**SCOUT, "text_config": {**TEXT, "attention_chunk_size": "x"}}, "text_config.attention_chunk_size"),
    ({**SCOUT, "text_config": {**TEXT, "num_experts_per_tok": 32}}, "text_config.num_experts_per_tok"),
])
def test_bad_llama4_keys_are_one_line_naming_the_key(cfg, key):
    with pytest.raises(PlanError) as e:
        spec_from_config(cfg)
    assert f"key {key!r}" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("s", "w"), [(1, 4), (4, 4), (5, 4), (11, 4), (32, 8), (37, 8)])
def test_chunked_scores_are_the_exact_block_sum(s, w):
    """Query i (0-based) sees keys j <= i of its own block of w: sum over i of (i mod w) + 1."""
    brute = sum(i % w + 1 for i in range(s))
    assert attn_window.keys_per_sequence(s, w, chunked=True) == brute
    assert attn_window.keys_per_sequence(s, w) >= brute  # a sliding window of w sees at least as many


def test_chunked_attention_flops_between_full_and_a_window_of_half_the_chunk():
    scout = spec_from_config(SCOUT)
    full = attn_window.unwindowed(scout)
    sliding = scout.model_copy(update={"attn_chunked": False})
    half = scout.model_copy(update={"attn_chunked": False, "attn_window": 4096})
    at = lambda spec, s: float(flops.attention_core_forward_flops_per_token(spec, s))  # noqa: E731
    assert at(scout, 8192) == pytest.approx(at(full, 8192))  # one chunk: full causal
    for s in (16384, 65536, 262144):
        assert at(half, s) < at(scout, s) < at(sliding, s) < at(full, s)
    assert not attn_window.unwindowed(scout).attn_chunked
    assert np.all(attn_window.ring_factor(scout, 65536, np.array([2, 4])) == 1.0)  # no halo exchange: full ring


def test_megatron_export_refuses_chunked_attention():
    err = model_refusal(spec_from_config(SCOUT))
    assert err is not None and err.field == "attn_chunked"


def test_the_default_seq_len_is_the_pretraining_context_not_the_10m_maximum():
    """Scout's RoPE is scaled x16 from 8192 to its 262,144 positions: a blank seq_len plans 8192; Maverick has no
    scaling and plans its maximum."""
    from planner.resolve import seq_len_of
    from planner.scenario import Scenario

    scout = spec_from_config(SCOUT)
    assert (scout.max_positions, scout.train_seq_len) == (262144, 8192)
    assert spec_from_config(MAVERICK).train_seq_len is None
    assert seq_len_of(Scenario(model="x"), scout) == 8192 and seq_len_of(Scenario(model="x", seq_len=65536), scout) == 65536
    plain = spec_from_config({**TEXT, "rope_scaling": None})
    assert plain.train_seq_len is None and seq_len_of(Scenario(model="x"), plain) == 262144
    with pytest.raises(PlanError) as e:
        spec_from_config({**TEXT, "rope_scaling": {"original_max_position_embeddings": "8k"}})
    assert "original_max_position_embeddings" in str(e.value)


# ---- run rows on a chunked model (planner/attn_window.apply_row) ------------------------------------
def test_a_row_stating_the_chunk_keeps_llama4_as_it_is():
    """An `attn_window` column of 8192 on Llama 4 is its own chunk (as --attn-window is), not a sliding window
    on all 48 layers; "chunked attention 4096" re-chunks its 36 RoPE layers; a dense model's row makes it chunked."""
    scout = spec_from_config(SCOUT)
    notes: list[str] = []
    for row in ({"attn_window": "8192"}, {"notes": "chunked attention 8192"}, {"attention_chunk_size": "8k"}):
        assert attn_window.apply_row({"id": "r", **row}, scout, notes) is scout
    assert notes == []
    four = attn_window.apply_row({"id": "r", "notes": "Llama 4 Scout, chunked attention 4096, EP 8"}, scout, notes)
    assert (four.attn_window, four.attn_chunked, four.attn_local_layers) == (4096, True, 36)
    assert notes == ["chunked attention 4096 as stated on 36 of 48 layers"]
    dense = attn_window.unwindowed(scout)
    made = attn_window.apply_row({"id": "r", "notes": "attention chunk size 8k"}, dense, notes)
    assert (made.attn_window, made.attn_chunked, made.attn_local_layers) == (8192, True, None)
    assert attn_window.apply_row({"id": "r", "attn_window": "none"}, scout, notes).attn_window is None
    with pytest.raises(PlanError, match="attention_chunk_size"):
        attn_window.apply_row({"id": "r", "attention_chunk_size": "big"}, scout, notes)
