"""Sliding-window and local/global attention (planner/attn_window.py): FLOPs against the exact
sum of min(i, w) keys, the full causal count where w >= s, kernel time, eager attention, ring CP,
the Hugging Face configs (values typed from the model cards' config.json) and run rows."""

import numpy as np
import pytest

from planner import attn_window, context_parallel, flops
from planner.errors import PlanError
from planner.hf_config import spec_from_config
from planner.layout import Layout
from planner.model import LLAMA_BLOCK, ModelSpec
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance

# Mistral-7B-v0.1 (huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json): sliding_window 4096
MISTRAL = dict(n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336, vocab=32000,
               max_positions=32768, **LLAMA_BLOCK)


def spec(**kw) -> ModelSpec:
    return ModelSpec(name="m", **{**MISTRAL, **kw})


def brute_keys(s: int, w: int) -> int:
    return sum(min(i, w) for i in range(1, s + 1))


@pytest.mark.parametrize("s,w", [(1, 1), (7, 3), (100, 100), (100, 250), (4096, 1024), (8193, 4096), (10, 1)])
def test_scores_are_the_exact_sum_of_min_i_w(s, w):
    assert attn_window.keys_per_sequence(s, w) == brute_keys(s, w)


@pytest.mark.parametrize("s,w", [(2048, 4096), (4096, 4096), (8192, 4096), (32768, 4096), (131072, 512)])
def test_windowed_flops_are_the_convention_applied_to_the_executed_scores(s, w):
    """4 q_dim per key, keys = the executed causal scores x 2/(s+1) (the convention's full s x s for
    a causal layer: 2 s(s+1)/2 / (s+1) = s)."""
    windowed = spec(attn_window=w)
    core = flops.attention_core_forward_flops_per_token(windowed, s)
    assert core == pytest.approx(4.0 * windowed.q_dim * 2.0 * brute_keys(s, w) / (s + 1), rel=1e-12)
    full = flops.attention_core_forward_flops_per_token(spec(), s)
    assert core <= full


@pytest.mark.parametrize("s", [512, 4096])
def test_a_window_at_least_the_sequence_is_full_causal_attention(s):
    plain, wide = spec(), spec(attn_window=4096)
    assert flops.model_flops_per_token(wide, s) == flops.model_flops_per_token(plain, s)
    assert flops.hardware_flops_per_token(wide, s, "selective") == flops.hardware_flops_per_token(plain, s, "selective")


def test_long_sequences_cost_about_two_w_keys_per_token():
    """w << s: K ~ s w, so ~2w keys per token in the convention (full causal: s)."""
    s, w = 131072, 4096
    assert attn_window.effective_len(s, w) == pytest.approx(2 * w, rel=0.02)


def test_local_global_mix_averages_over_the_layers():
    """Gemma 2: half the layers local (4096), half global; Gemma 3: 5 local : 1 global."""
    s = 32768
    half = spec(attn_window=4096, attn_local_layers=16)
    expected = 0.5 * attn_window.effective_len(s, 4096) + 0.5 * s
    assert attn_window.mean_keys(half, s) == pytest.approx(expected)
    assert attn_window.mean_keys(spec(attn_window=4096, attn_local_layers=0), s) == pytest.approx(s)


def test_a_model_without_a_window_is_unchanged():
    s = np.array([1024, 8192, 131072])
    plain = spec()
    assert attn_window.mean_keys(plain, s) is not None and (attn_window.mean_keys(plain, s) == s).all()
    assert attn_window.unwindowed(plain) is plain
    assert (attn_window.ring_factor(plain, s, 8) == 1.0).all()


def test_local_layers_need_a_window_and_fit_the_model():
    with pytest.raises(ValueError, match="attn_local_layers needs attn_window"):
        spec(attn_local_layers=3)
    with pytest.raises(ValueError, match="exceeds n_layers"):
        spec(attn_window=4096, attn_local_layers=33)


def _system():
    return resolve_system(Scenario(cluster="dgx-h100", gpus=8))


def _perf(model, seq_len, attention="flash", cp=1, cp_impl="ring"):
    plan = ExecutionPlan(tp=1, pp=1, cp=cp, cp_impl=cp_impl, dp=8 // cp, micro_batch=1, grad_accum=1,
                         seq_len=seq_len, attention=attention, activation_checkpointing="full", sharding="zero1")
    return performance(model, Layout.from_plan(plan), _system(), Settings())


def test_a_window_shortens_the_fused_attention_time_not_the_gemms():
    plain, windowed = _perf(spec(), 32768), _perf(spec(attn_window=4096), 32768)
    assert windowed["raw_attention_s"][0] < 0.35 * plain["raw_attention_s"][0]
    assert windowed["raw_gemm_s"][0] == plain["raw_gemm_s"][0]
    assert windowed["tokens_per_s"][0] > plain["tokens_per_s"][0]


def test_eager_attention_computes_the_whole_score_matrix_with_a_window():
    """Hugging Face eager attention adds the window mask to the full s x s scores."""
    plain, windowed = _perf(spec(), 8192, "eager"), _perf(spec(attn_window=1024), 8192, "eager")
    assert windowed["raw_attention_s"][0] == plain["raw_attention_s"][0]


def test_ring_cp_sends_the_halo_of_a_window():
    """TE's sliding-window p2p CP: 2 transfers of <= 2w tokens instead of 3 (N-1) chunks of s/N."""
    s, w, n = 131072, 4096, 8
    assert attn_window.ring_factor(spec(attn_window=w), s, n) == pytest.approx(4 * w / (3 * (n - 1) * s / n))
    # wider than (N-1) s / 2N: TE falls back to all-gather, modelled as the full ring
    assert attn_window.ring_factor(spec(attn_window=s), s, n) == 1.0
    plan = ExecutionPlan(tp=1, pp=1, cp=n, dp=1, micro_batch=1, grad_accum=1, seq_len=s, cp_impl="ring")
    lay = Layout.from_plan(plan)
    full = context_parallel.volume_bytes(spec(), lay, 8)["ring"]
    halo = context_parallel.volume_bytes(spec(attn_window=w), lay, 8)["ring"]
    assert halo[0] == pytest.approx(full[0] * 4 * w / (3 * (n - 1) * s / n))


# ---- Hugging Face configs (values typed from each model's config.json) ----------------------------
def test_mistral_7b_v01_slides_on_every_layer():
    cfg = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "rms_norm_eps": 1e-5,
           "hidden_act": "silu", "max_position_embeddings": 32768, "sliding_window": 4096}
    m = spec_from_config(cfg)
    assert (m.attn_window, m.attn_local_layers) == (4096, None)
    assert m.n_params == 7_241_732_096  # the card's 7.24B, unchanged by the window
    assert resolve_model("mistral-7b").attn_window == 4096
    assert spec_from_config({**cfg, "sliding_window": None}).attn_window is None  # v0.2+


def test_gemma2_alternates_local_and_global_layers():
    """google/gemma-2-9b config.json: 42 layers, sliding_window 4096; transformers' Gemma2Config:
    layer i slides where (i + 1) % 2 (even layers)."""
    cfg = {"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42, "num_attention_heads": 16,
           "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
           "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 4096}
    m = spec_from_config(cfg)
    assert (m.attn_window, m.attn_local_layers) == (4096, 21)


def test_gemma3_five_local_to_one_global():
    """google/gemma-3-1b-pt config.json: 26 layers, sliding_window 512, sliding_window_pattern 6:
    layers 5, 11, 17, 23 global; newer files spell it as layer_types."""
    cfg = {"model_type": "gemma3_text", "hidden_size": 1152, "num_hidden_layers": 26, "num_attention_heads": 4,
           "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 6912, "vocab_size": 262144,
           "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 512,
           "sliding_window_pattern": 6}
    assert spec_from_config(cfg).attn_local_layers == 22
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(26)]
    listed = {k: v for k, v in cfg.items() if k != "sliding_window_pattern"} | {"layer_types": types}
    assert spec_from_config(listed).attn_local_layers == 22
    with pytest.raises(PlanError, match="layer_types"):
        spec_from_config({**listed, "layer_types": types[:-1]})
    with pytest.raises(PlanError, match="layer_types"):
        spec_from_config({**listed, "layer_types": ["chunked_attention"] * 26})


def test_qwen2_slides_only_when_asked_above_max_window_layers():
    """Qwen2Config: sliding_window applies with use_sliding_window (default false) on layers
    i >= max_window_layers (Qwen2.5-7B config.json: false, 131072, 28)."""
    cfg = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "rms_norm_eps": 1e-6,
           "hidden_act": "silu", "sliding_window": 131072, "max_window_layers": 28, "use_sliding_window": False}
    assert spec_from_config(cfg).attn_window is None
    on = spec_from_config({**cfg, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 21})
    assert (on.attn_window, on.attn_local_layers) == (4096, 7)


# ---- Nemotron-4 / Minitron: relu2, LayerNorm1P with bias ------------------------------------------
def test_nemotron4_15b_parameter_count():
    """transformers' NemotronConfig defaults are Nemotron-4 15B (6144 hidden, 24576 ffn, 32 layers, 48
    heads, vocab 256000, relu2, untied) with 8 kv heads: "3.2 billion embedding parameters and 12.5
    billion non-embedding parameters" (Parmar et al. 2024, Nemotron-4 15B Technical Report, arXiv
    2402.16819, sec. 2)."""
    cfg = {"model_type": "nemotron", "hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 32,
           "num_attention_heads": 48, "num_key_value_heads": 8, "hidden_act": "relu2", "vocab_size": 256000,
           "norm_eps": 1e-5, "max_position_embeddings": 4096, "partial_rotary_factor": 0.5,
           "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}
    m = spec_from_config(cfg)
    assert m.mlp == "gelu" and m.norm == "layernorm" and m.norm_bias  # up/down only; LayerNorm weight + bias
    assert m.embedding_params / 1e9 == pytest.approx(3.2, abs=0.06)
    assert m.n_layers * m.params_per_layer / 1e9 == pytest.approx(12.5, abs=0.05)


# ---- run rows ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("cells,expected", [
    ({"attn_window": "4096"}, (4096, None)),
    ({"sliding_window": "4k"}, (4096, None)),
    ({"notes": "Mistral-style sliding window attention of 4096 tokens"}, (4096, None)),
    ({"notes": "SWA 1024, 5 local : 1 global layers"}, (1024, (5, 1))),
    ({"notes": "full attention"}, (None, None)),
    ({"attn_window": "none"}, (0, None)),
])
def test_row_spellings(cells, expected):
    assert attn_window.stated_in_row({"id": "r", **cells}) == expected


def test_a_row_window_reaches_the_model():
    notes: list[str] = []
    m = attn_window.apply_row({"id": "r", "notes": "sliding window 1024, 5 local : 1 global"}, spec(), notes)
    assert (m.attn_window, m.attn_local_layers) == (1024, 27)  # 32 layers: globals at 5, 11, 17, 23, 29
    assert notes and "sliding-window attention 1024" in notes[0]
    with pytest.raises(PlanError, match="attn_window"):
        attn_window.stated_in_row({"id": "r", "attn_window": "lots"})
    full = attn_window.apply_row({"id": "r", "sliding_window": "none"}, spec(attn_window=4096), notes)
    assert full.attn_window is None and "full causal attention" in notes[-1]


def test_a_runs_file_column_and_note_reach_the_prediction(tmp_path):
    from tests.planner.test_run_spellings import load

    run = load(tmp_path, extra_columns=("attn_window",), attn_window="4096", seq_len="32768", n_kv_heads="8")
    assert run.spec.attn_window == 4096 and any("sliding-window" in n for n in run.assumptions)
    plain = load(tmp_path, seq_len="32768", n_kv_heads="8")
    assert plain.spec.attn_window is None
    noted = load(tmp_path, seq_len="32768", n_kv_heads="8", notes="Gemma-style SWA 4096, 1 local : 1 global")
    assert (noted.spec.attn_window, noted.spec.attn_local_layers) == (4096, 48)
