"""Mixture-of-experts shapes: parameter counts against the published totals, FLOPs per token against
6 x active, the layer pattern, and the one-line errors of a bad shape (planner/moe.py)."""

import pytest
from pydantic import ValidationError

from planner import flops, moe
from planner.model import LLAMA_BLOCK, ModelSpec
from tests.planner.moe_models import MIXTRAL_8X7B, PUBLISHED, QWEN3_30B_A3B

from tests.planner.moe_models import OLMOE_1B_7B


@pytest.mark.parametrize("spec,total,active", PUBLISHED, ids=lambda x: getattr(x, "name", ""))
def test_total_and_active_params_match_the_published_figures(spec, total, active):
    # published to one decimal of a billion; Qwen truncates (3.35B active is "3.3B"): within one unit
    assert abs(spec.n_params - total) < 0.1e9
    assert abs(moe.active_params(spec) - active) < 0.1e9


def test_published_figures_to_their_digits():
    assert round(MIXTRAL_8X7B.n_params / 1e8) == 467 and round(moe.active_params(MIXTRAL_8X7B) / 1e8) == 129
    assert round(OLMOE_1B_7B.n_params / 1e8) == 69 and round(moe.active_params(OLMOE_1B_7B) / 1e8) == 13
    # Qwen3-30B-A3B's card: 30.5B total, 29.9B non-embedding (the untied input and output embeddings)
    assert int(QWEN3_30B_A3B.n_params / 1e8) == 305
    assert int((QWEN3_30B_A3B.n_params - 2 * 151936 * 2048) / 1e8) == 299
    assert int(moe.active_params(QWEN3_30B_A3B) / 1e8) == 33


def test_mixtral_params_by_hand():
    h, f, kv = 4096, 14336, 1024
    attn = 2 * h * h + 2 * kv * h
    layer = attn + 2 * h + 8 * h + 8 * 3 * h * f  # norms, router, 8 experts
    assert MIXTRAL_8X7B.n_params == 32 * layer + 2 * 32000 * h + h
    assert moe.active_params(MIXTRAL_8X7B) == MIXTRAL_8X7B.n_params - 32 * 6 * 3 * h * f
    assert moe.routed_expert_params(MIXTRAL_8X7B) == 32 * 8 * 3 * h * f


def test_dense_model_unchanged():
    dense = ModelSpec(n_layers=4, hidden=256, n_heads=4, vocab=1000, **LLAMA_BLOCK, ffn_hidden=704)
    assert dense.n_params == 4 * dense.params_per_layer + dense.embedding_params
    assert moe.dense_view(dense) is dense
    assert moe.active_params(dense) == dense.n_params


@pytest.mark.parametrize("spec", [MIXTRAL_8X7B, OLMOE_1B_7B, QWEN3_30B_A3B], ids=lambda s: s.name)
def test_model_flops_are_six_times_active_plus_attention(spec):
    s = 4096
    norms = (spec.n_layers * spec.norms_per_layer + 1) * spec.hidden
    qk = {"none": 0, "per_head": 2 * spec.head_dim, "full": spec.q_dim + spec.kv_dim}[spec.qk_norm] * spec.n_layers
    # the input embedding and the norms run no GEMM; the router does
    matrices = moe.active_params(spec) - spec.vocab_padded * spec.hidden - norms - qk
    attention = 3 * spec.n_layers * 4 * s * spec.q_dim
    assert float(flops.model_flops_per_token(spec, s)) == pytest.approx(6 * matrices + attention, rel=1e-12)


def test_router_flops_counted():
    no_router = 3 * moe.router_forward_flops_per_token(MIXTRAL_8X7B)
    assert no_router == 3 * 2 * 32 * 4096 * 8


def test_first_dense_layers_and_frequency():
    base = dict(n_layers=8, hidden=256, n_heads=4, vocab=1000, ffn_hidden=1024, **LLAMA_BLOCK,
                moe_experts=4, moe_top_k=2, moe_ffn_hidden=128)
    every = ModelSpec(**base)
    assert moe.n_moe_layers(every) == 8
    # DeepSeek first_k_dense_replace = 3: layers 0-2 dense
    first = ModelSpec(**base, moe_first_dense_layers=3)
    assert moe.moe_layer_mask(first).tolist() == [False] * 3 + [True] * 5
    # Qwen2-MoE decoder_sparse_step = 2: layers 1, 3, 5, 7
    step = ModelSpec(**base, moe_layer_freq=2)
    assert moe.moe_layer_mask(step).tolist() == [False, True] * 4
    # each dense layer holds a dense MLP of ffn_hidden, each MoE layer router + experts
    dense_mlp, moe_mlp = 3 * 256 * 1024, 4 * 256 + 4 * 3 * 256 * 128
    assert first.n_params - every.n_params == 3 * (dense_mlp - moe_mlp)


def test_shared_experts_count_as_active():
    base = dict(n_layers=2, hidden=256, n_heads=4, vocab=1000, **LLAMA_BLOCK, moe_experts=8, moe_top_k=2,
                moe_ffn_hidden=64)
    plain = ModelSpec(**base)
    shared = ModelSpec(**base, moe_shared_experts=2)  # DeepSeek: n_shared_experts x moe_intermediate_size
    assert shared.n_params - plain.n_params == 2 * 2 * 3 * 256 * 64
    assert moe.active_params(shared) - moe.active_params(plain) == 2 * 2 * 3 * 256 * 64
    qwen2 = ModelSpec(**base, moe_shared_experts=1, moe_shared_ffn_hidden=256)  # shared_expert_intermediate_size
    assert qwen2.n_params - plain.n_params == 2 * 3 * 256 * 256


@pytest.mark.parametrize("extra,field", [
    ({"moe_top_k": 2}, "moe_top_k needs moe_experts"),
    ({"moe_experts": 8, "moe_top_k": 9}, "moe_top_k (9) must be between 1 and moe_experts (8)"),
    ({"moe_experts": 8, "moe_top_k": 0}, "moe_top_k (0)"),
    ({"moe_experts": 8, "moe_top_k": 2, "moe_first_dense_layers": 4}, "leave no MoE layer"),
])
def test_bad_moe_shapes_are_one_line_errors(extra, field):
    with pytest.raises(ValidationError) as e:
        ModelSpec(n_layers=4, hidden=256, n_heads=4, vocab=1000, **extra)
    msg = e.value.errors()[0]["msg"]
    assert field in msg and "\n" not in msg


def test_active_view_has_the_active_mlp_width():
    view = moe.dense_view(MIXTRAL_8X7B)
    assert view.moe_experts == 0 and view.ffn == 2 * 14336
    # its GEMM FLOPs per token are the MoE model's but for the router
    s = 2048
    gap = float(flops.model_flops_per_token(MIXTRAL_8X7B, s) - flops.model_flops_per_token(view, s))
    assert gap == pytest.approx(3 * moe.router_forward_flops_per_token(MIXTRAL_8X7B))
