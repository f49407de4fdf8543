import numpy as np
import pytest

from planner import flops
from planner.layout import CKPT
from planner.model import ModelSpec
from planner.presets import resolve_model

GPT = ModelSpec(name="gpt-7.5b", n_layers=36, hidden=4096, n_heads=32, vocab=51200, max_positions=2048)


def test_hardware_flops_with_full_recompute_equal_megatron_formula():
    # Narayanan et al. SC21 eq. (3): 96 B s l h^2 (1 + s/6h + V/16lh) per iteration, recompute included
    s, l, h, v = 2048, GPT.n_layers, GPT.hidden, GPT.vocab_padded
    megatron_per_token = 96.0 * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    ours = flops.hardware_flops_per_token(GPT, s, CKPT["full"])
    assert ours == pytest.approx(megatron_per_token, rel=1e-12)
    # without recompute: exactly 3/4 of the block part, logits unchanged
    no_ckpt = flops.hardware_flops_per_token(GPT, s, CKPT["none"])
    assert no_ckpt == pytest.approx(megatron_per_token - (24 * l * h * h + 4 * s * h * l), rel=1e-12)


def test_swiglu_and_gqa_count_six_n_plus_attention():
    spec = resolve_model("llama2-70b")  # GQA 8 kv heads, SwiGLU
    s = 4096
    extra = 3 * (spec.n_layers * flops.attention_core_forward_flops_per_token(spec, s)
                 + flops.logits_forward_flops_per_token(spec))
    six_n = 6 * spec.n_layers * spec.params_per_layer
    # 6N over the matmul weights; norms are a rounding error
    assert flops.model_flops_per_token(spec, s) - extra == pytest.approx(six_n, rel=2e-4)
    full_heads = spec.model_copy(update={"n_kv_heads": None})
    saved = 3 * spec.n_layers * 2 * spec.hidden * 2 * (spec.hidden - spec.kv_dim)
    assert flops.model_flops_per_token(full_heads, s) - flops.model_flops_per_token(spec, s) == pytest.approx(saved)


def test_selective_recompute_adds_only_attention_core():
    s = np.array([1024, 2048])
    sel = flops.recompute_flops_per_token(GPT, s, np.array([CKPT["selective"]] * 2))
    assert np.allclose(sel, GPT.n_layers * 4.0 * s * GPT.hidden)
    assert np.all(flops.recompute_flops_per_token(GPT, s, CKPT["none"]) == 0)


def test_hand_count_of_a_tiny_gqa_block_with_wide_queries():
    """hidden 8, 4 heads of dim 4 (queries 16 wide, as Gemma's n_heads x head_dim > hidden),
    2 kv heads (k, v 8 wide), GELU MLP 12, vocab 10, 2 layers, 5 tokens of context."""
    spec = ModelSpec(n_layers=2, hidden=8, n_heads=4, attn_head_dim=4, n_kv_heads=2, ffn_hidden=12, vocab=10)
    assert (spec.q_dim, spec.kv_dim) == (16, 8)
    # per token, one block's forward: 2 FLOPs per multiply-add
    q_proj, k_proj, v_proj, o_proj = 2 * 8 * 16, 2 * 8 * 8, 2 * 8 * 8, 2 * 16 * 8  # 256, 128, 128, 256
    fc1, fc2 = 2 * 8 * 12, 2 * 12 * 8  # 192, 192
    scores, values = 2 * 4 * 4 * 5, 2 * 4 * 4 * 5  # every query head against 5 keys, dim 4: 160, 160
    block = q_proj + k_proj + v_proj + o_proj + fc1 + fc2 + scores + values
    assert block == 1472
    logits = 2 * 8 * 10
    assert flops.layer_forward_flops_per_token(spec, 5) == block
    assert flops.model_flops_per_token(spec, 5) == 3 * (2 * block + logits) == 9312
    # full recompute: one more forward of the blocks; selective: of the attention core
    assert flops.hardware_flops_per_token(spec, 5, "full") == 9312 + 2 * block
    assert flops.hardware_flops_per_token(spec, 5, "selective") == 9312 + 2 * (scores + values)


def test_wide_queries_match_six_n_plus_palm_attention():
    """PaLM (Chowdhery et al. 2022, App. B): 6N + 12 L H Q T per token, H x Q the query width
    (Gemma 7B: 16 heads x 256 = 4096 > hidden 3072), N the matmul weights with the output head."""
    spec = ModelSpec(name="gemma-7b-like", n_layers=28, hidden=3072, n_heads=16, attn_head_dim=256,
                     ffn_hidden=24576, vocab=256000, mlp="swiglu", norm="rmsnorm", position="rope", bias=False)
    s = 8192
    weights = sum(a * b for a, b in (sh for sh in spec.layer_param_shapes() if len(sh) == 2))
    n = spec.n_layers * weights + spec.vocab_padded * spec.hidden
    palm = 6 * n + 12 * spec.n_layers * spec.n_heads * spec.head_dim * s
    assert flops.model_flops_per_token(spec, s) == pytest.approx(palm, rel=1e-12)


def test_efficiency_interpolates_in_log_size_and_clamps():
    pts = [(1.0, 0.2), (100.0, 0.6)]
    assert flops.efficiency(pts, 10.0) == pytest.approx(0.4)
    assert flops.efficiency(pts, 1e-6) == pytest.approx(0.2)
    assert flops.efficiency(pts, 1e6) == pytest.approx(0.6)
    sizes = np.logspace(-3, 4, 50)
    eff = flops.efficiency(flops.DEFAULT_EFFICIENCY, sizes)
    assert np.all(np.diff(eff) >= 0) and eff.max() <= 1


def test_tp_splits_gemms():
    one = flops.block_gemms(GPT, 2048, 1)
    four = flops.block_gemms(GPT, 2048, np.array([4]))
    for (f1, g1), (f4, g4) in zip(one, four):
        assert f4 == pytest.approx(f1 / 4) and g4 == pytest.approx(g1 / 4)
