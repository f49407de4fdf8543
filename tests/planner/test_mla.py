"""Multi-head latent attention (planner/mla.py): exact parameters per layer from DeepSeek-V2 sec. 2.1's
matrices, forward FLOPs with query/key head dim 192 and value head dim 128, the activations it saves
against an MHA block, the fused kernel's shape (FlashAttention-2 pads V; cuDNN does not), the one-line
errors of a bad shape, and an MLA plan through memory and throughput."""

import numpy as np
import pytest
from pydantic import ValidationError

from hardware.catalog import load_catalog
from planner import flops, memory, mla, moe, throughput
from planner.layout import Layout
from planner.model import LLAMA_BLOCK, ModelSpec
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from tests.planner.deepseek_models import DEEPSEEK_V2, DEEPSEEK_V2_LITE, DEEPSEEK_V3

CATALOG = load_catalog()


def test_v3_attention_params_by_hand():
    h, n = 7168, 128
    w_dq, w_uq = 1536 * h, n * (128 + 64) * 1536  # eq. 12; eq. 13-14 (W^UQ and W^QR)
    w_dkv_kr = (512 + 64) * h  # eq. 9 and 15 (kv_a_proj_with_mqa)
    w_uk_uv = n * (128 + 128) * 512  # eq. 10-11 (kv_b_proj)
    w_o = h * n * 128  # eq. 19
    attn = w_dq + w_uq + w_dkv_kr + w_uk_uv + w_o + 1536 + 512  # + the latent RMSNorms
    assert sum(int(np.prod(s)) for s in mla.attention_param_shapes(DEEPSEEK_V3)) == attn == 187_107_328
    dense_mlp, norms = 3 * h * 18432, 2 * h
    assert DEEPSEEK_V3.params_per_layer == attn + dense_mlp + norms


def test_v2_lite_has_no_query_compression():
    h, n = 2048, 16
    names = [lin.name for lin in mla.linears(DEEPSEEK_V2_LITE)]
    assert names == ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]
    attn = n * 192 * h + 576 * h + n * 256 * 512 + h * n * 128 + 512
    assert sum(int(np.prod(s)) for s in mla.attention_param_shapes(DEEPSEEK_V2_LITE)) == attn


def test_forward_flops_projections_and_core_with_differing_head_dims():
    s, n = 4096, 128
    proj = 2 * sum(int(np.prod(sh)) for sh in mla.attention_param_shapes(DEEPSEEK_V3) if len(sh) == 2)
    assert flops.attention_projection_flops_per_token(DEEPSEEK_V3) == proj
    # QK^T over n x 192, attention x V over n x 128, full s x s (planner/flops.py's convention)
    assert flops.attention_core_forward_flops_per_token(DEEPSEEK_V3, s) == 2 * s * n * 192 + 2 * s * n * 128


@pytest.mark.parametrize("spec", [DEEPSEEK_V2_LITE, DEEPSEEK_V2, DEEPSEEK_V3], ids=lambda x: x.name)
def test_model_flops_are_six_times_activated_matrices_plus_attention(spec):
    """6 x the activated matrix parameters a token multiplies (the input embedding is a lookup, the
    norms are element-wise) + 3 x the attention core."""
    s = 4096
    norm_params = (spec.n_layers * 2 + 1) * spec.hidden + spec.n_layers * (512 + (spec.q_lora_rank and 1536 or 0))
    matrices = moe.active_params(spec) - spec.vocab * spec.hidden - norm_params
    core = 3 * spec.n_layers * flops.attention_core_forward_flops_per_token(spec, s)
    assert flops.model_flops_per_token(spec, s) == pytest.approx(6 * matrices + core, rel=1e-12)


def test_activations_hold_the_latents_and_the_decompressed_qkv():
    plan = Layout.from_plan(ExecutionPlan(tp=1, dp=8, seq_len=4096, micro_batch=1))
    a, sb = 2, 4096
    got = np.ravel(memory.layer_activation_bytes(DEEPSEEK_V3, plan))[0]
    mha = DEEPSEEK_V3.model_copy(update=dict(q_lora_rank=None, kv_lora_rank=None, qk_nope_head_dim=None,
                                             qk_rope_head_dim=None, v_head_dim=None))
    base = np.ravel(memory.layer_activation_bytes(mha, plan))[0]
    h, n = 7168, 128
    mha_attn = sb * (h + 2 * h) * a + sb * h * a  # q, k, v and the attention output at hidden width
    mla_attn = sb * ((1536 + 512 + 64) + (1536 + 512) + n * (2 * 192 + 2 * 128)) * a + sb * 4.0 * 2
    assert float(got - base) == pytest.approx(mla_attn - mha_attn)
    assert float(got) > float(base)  # the decompressed K/V and 192-dim Q/K outweigh the latent's saving


def test_kernel_shape_flash_attention_pads_v_cudnn_does_not():
    assert float(mla.kernel_work_factor(DEEPSEEK_V3, 0)) == pytest.approx((192 + 128) / (2 * 192))
    assert float(mla.kernel_work_factor(DEEPSEEK_V3, 1)) == 1.0
    assert DEEPSEEK_V3.head_dim == 192 and DEEPSEEK_V3.kv_dim == 128 * (192 + 128) // 2


def test_tensor_parallel_leaves_the_down_projections_whole():
    per_token, _ = mla.input_projection_gemm(DEEPSEEK_V3, 4096, 8)
    h = 7168
    assert float(per_token) == pytest.approx(2 * (1536 * h + 576 * h) + 2 * (128 * 192 * 1536 + 128 * 256 * 512) / 8)


@pytest.mark.parametrize("bad,words", [
    (dict(kv_lora_rank=None), "q_lora_rank needs kv_lora_rank"),
    (dict(v_head_dim=None), "v_head_dim is required"),
    (dict(n_kv_heads=8), "n_kv_heads (8) must equal n_heads"),
    (dict(attn_head_dim=192), "attn_head_dim is not used"),
    (dict(qk_norm="per_head"), "qk_norm with multi-head latent attention"),
])
def test_bad_mla_shapes_are_one_line_errors(bad, words):
    fields = {**DEEPSEEK_V2.model_dump(), "published_params": None, **bad}
    with pytest.raises(ValidationError) as e:
        ModelSpec(**fields)
    assert words in str(e.value)


def test_dense_mla_plan_through_memory_and_throughput():
    spec = ModelSpec(n_layers=4, hidden=1024, n_heads=8, ffn_hidden=2816, vocab=32000, **LLAMA_BLOCK,
                     q_lora_rank=384, kv_lora_rank=256, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64)
    system = resolve_system(Scenario(gpu="h100-80gb", gpus=8), CATALOG)
    plan = Layout.from_plan(ExecutionPlan(tp=2, dp=4, seq_len=4096, micro_batch=1, sequence_parallel=True))
    settings = Settings(stacks=CATALOG.stacks)
    perf = throughput.performance(spec, plan, system, settings)
    assert np.isfinite(perf["step_time_s"]).all() and (perf["mfu"] > 0).all()
    assert np.isfinite(memory.memory_arrays(spec, plan, system, settings)["total_bytes"]).all()
    assert "MLA (q rank 384, kv rank 256" in spec.describe()


def test_the_bundled_trainer_refuses_mla_in_one_line():
    from planner.errors import PlanError
    from trainer.config import TrainConfig, validate_layout

    spec = ModelSpec(n_layers=2, hidden=256, n_heads=4, vocab=1000, **LLAMA_BLOCK, kv_lora_rank=64,
                     qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32)
    with pytest.raises(PlanError) as e:
        validate_layout(TrainConfig(spec=spec), spec)
    assert e.value.field == "model" and "kv_lora_rank" in str(e.value) and "\n" not in str(e.value)
