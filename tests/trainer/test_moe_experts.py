"""The router's top-k renormalisation (moe_norm_topk_prob) by hand, where the presets and configs carry it, and the
routed experts' grouped GEMM (torch._grouped_mm) against their loop of GEMMs (trainer/experts.py)."""

import math

import pytest
import torch

from planner.errors import PlanError
from planner.hf_config import spec_from_config
from planner.model import ModelSpec
from planner.presets import resolve_model
from tests.planner.test_hf_moe import MIXTRAL, OLMOE, QWEN3, QWEN15_MOE
from trainer.experts import Experts, grouped_ok
from trainer.moe import MoeMlp

BASE = dict(name="tiny-moe", n_layers=1, hidden=8, n_heads=2, vocab=64, max_positions=16, position="rope",
            norm="rmsnorm", mlp="swiglu", bias=False, tied_embeddings=False, ffn_hidden=16,
            moe_experts=4, moe_top_k=2, moe_ffn_hidden=8)


@pytest.mark.parametrize("norm", [True, False])
def test_top2_routing_by_hand(norm):
    """Router logits ln 4, ln 3, ln 2, ln 1: softmax 0.4, 0.3, 0.2, 0.1; the top-2 are experts 0 and 1 with
    0.4 and 0.3 (OLMoE, Qwen2-MoE: norm_topk_prob false) or 4/7 and 3/7 (Mixtral: renormalised)."""
    layer = MoeMlp(ModelSpec(**BASE, moe_norm_topk_prob=norm)).double()
    with torch.no_grad():
        layer.router.weight.zero_()
        layer.router.weight[:, 0] = torch.tensor([4.0, 3.0, 2.0, 1.0]).log()
    x = torch.zeros(1, 8, dtype=torch.float64)
    x[0, 0] = 1.0
    probs, weights, experts = layer.route(x)
    torch.testing.assert_close(probs, torch.tensor([[0.4, 0.3, 0.2, 0.1]]))  # fp32, as HF routes
    assert experts.tolist() == [[0, 1]]
    want = [4 / 7, 3 / 7] if norm else [0.4, 0.3]
    torch.testing.assert_close(weights, torch.tensor([want]))
    expected = want[0] * layer.experts.one(0, x) + want[1] * layer.experts.one(1, x)
    torch.testing.assert_close(layer(x), expected)
    assert not norm or math.isclose(float(weights.sum()), 1.0, rel_tol=1e-6)


@pytest.mark.parametrize("preset, norm", [("mixtral-8x7b", True), ("mixtral-8x22b", True), ("olmoe-1b-7b", False),
                                          ("qwen3-30b-a3b", True)])
def test_presets_carry_norm_topk_prob(preset, norm):
    assert resolve_model(preset).moe_norm_topk_prob is norm


@pytest.mark.parametrize("cfg, norm", [
    (MIXTRAL, True),  # MixtralSparseMoeBlock always renormalises (no key)
    (MIXTRAL | {"norm_topk_prob": False}, True),  # not a key Mixtral's code reads
    (OLMOE, False), (OLMOE | {"norm_topk_prob": True}, True),  # OlmoeConfig default false
    (QWEN15_MOE, False), (QWEN15_MOE | {"norm_topk_prob": False}, False),  # Qwen2MoeConfig default false
    (QWEN3, True), (QWEN3 | {"norm_topk_prob": False}, False),
], ids=["mixtral", "mixtral-key", "olmoe", "olmoe-true", "qwen2moe", "qwen2moe-false", "qwen3", "qwen3-false"])
def test_config_reader_reads_norm_topk_prob(cfg, norm):
    assert spec_from_config(cfg).moe_norm_topk_prob is norm


def test_a_bad_norm_topk_prob_is_refused_naming_the_key():
    with pytest.raises(PlanError) as e:
        spec_from_config(OLMOE | {"norm_topk_prob": "yes"})
    assert "norm_topk_prob" in str(e.value) and "\n" not in str(e.value)


def _pair(swiglu: bool, bias: bool, dtype: torch.dtype, device: str = "cpu"):
    torch.manual_seed(0)
    loop = Experts(4, 64, 32, swiglu, bias).to(device, dtype)
    with torch.no_grad():
        for name, p in loop.named_parameters():
            if name.endswith("bias"):
                p.normal_()
    grouped = Experts(4, 64, 32, swiglu, bias).to(device, dtype)
    grouped.load_state_dict(loop.state_dict())
    loop.force_grouped, grouped.force_grouped = False, True
    return loop, grouped


def _run(layer, x, counts, g):
    x = x.clone().requires_grad_()
    y = layer(x, counts)
    y.backward(g)
    return y, x.grad, {n: p.grad for n, p in layer.named_parameters()}


@pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="torch without _grouped_mm")
@pytest.mark.parametrize("swiglu, bias", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_gemm_matches_the_loop_on_cpu(swiglu, bias, dtype):
    """torch 2.13's CPU kernel of _grouped_mm (fp32 and bf16, with backward): output, input and weight gradients as
    the loop of F.linear, with an expert that no row chose (its gradients zero in both). fp32: summation order only
    (1e-5); bf16: the loop rounds each projection's output to bf16 as the grouped kernel does, so a few bf16 ulps."""
    loop, grouped = _pair(swiglu, bias, dtype)
    counts = torch.tensor([5, 0, 9, 2])
    x = torch.randn(16, 64, dtype=dtype)
    g = torch.randn(16, 64, dtype=dtype)
    ya, xa, ga = _run(loop, x, counts, g)
    yb, xb, gb = _run(grouped, x, counts, g)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(yb, ya, **tol)
    torch.testing.assert_close(xb, xa, **tol)
    for name in ga:
        torch.testing.assert_close(gb[name], ga[name], **tol)
        assert float(gb[name][1].abs().sum()) == 0.0


def test_cpu_and_low_precision_keep_the_loop():
    assert not grouped_ok(torch.device("cpu"), torch.bfloat16, (64, 32))
    layer = Experts(2, 64, 32, True, False)
    assert not layer.use_grouped(torch.zeros(1, 64, dtype=torch.bfloat16))


CUDA_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


@pytest.mark.skipif(not CUDA_SM90, reason="needs a CUDA GPU of compute capability 9.0 or later")
def test_grouped_gemm_is_chosen_and_matches_the_loop_on_cuda():
    assert grouped_ok(torch.device("cuda"), torch.bfloat16, (64, 32))
    assert not grouped_ok(torch.device("cuda"), torch.float32, (64, 32))
    assert not grouped_ok(torch.device("cuda"), torch.bfloat16, (64, 36))  # 72-byte rows: not 16-byte aligned
    loop, grouped = _pair(True, True, torch.bfloat16, "cuda")
    grouped.force_grouped = None  # chosen by itself
    assert grouped.use_grouped(torch.zeros(1, 64, dtype=torch.bfloat16, device="cuda"))
    counts = torch.tensor([5, 0, 9, 2], device="cuda")
    x = torch.randn(16, 64, dtype=torch.bfloat16, device="cuda")
    g = torch.randn(16, 64, dtype=torch.bfloat16, device="cuda")
    ya, xa, ga = _run(loop, x, counts, g)
    yb, xb, gb = _run(grouped, x, counts, g)
    torch.testing.assert_close(yb, ya, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(xb, xa, atol=2e-2, rtol=2e-2)
    for name in ga:
        torch.testing.assert_close(gb[name], ga[name], atol=2e-2, rtol=2e-2)
