"""DeepSpeed ZeRO-3 with mixture-of-experts layers (planner/zero3.py): every local expert is gathered, and the
fetch calls follow how the stack keeps a layer's experts (one stacked module, two grouped modules, one module
per expert, or the whole MoE block as one ZeRO-3 leaf module)."""

import numpy as np
import pytest

from planner import moe, zero3
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance

MIXTRAL = resolve_model("mixtral-8x7b")  # 8 experts: the router (8 x hidden) stays resident
QWEN3 = resolve_model("qwen3-30b-a3b")  # 128 experts of 768, top-8: the router is gathered
OLMOE = resolve_model("olmoe-1b-7b")


def _layout(stack: str, ep: int = 1, **kw) -> Layout:
    return Layout.from_plan(ExecutionPlan(**{"dp": 16, "seq_len": 2048, "micro_batch": 1, "sharding": "zero3",
                                             "stack": stack, "ep": ep, **kw}))


def _calls_per_layer(spec, stack: str, ep: int = 1) -> float:
    view = moe.dense_view(spec)
    lay = _layout(stack, ep)
    layers = spec.n_layers
    return float((np.asarray(zero3.gathers(view, lay, spec)["calls_fwd"]) - 2.0).item()) / layers


@pytest.mark.parametrize("stack, calls", [
    ("bundled", 4 + 1),  # q, k, v, o + trainer/experts.py's one module of stacked experts
    ("torchtitan", 4 + 1),  # GroupedExperts: w1, w2, w3 of one module
    ("megatron", 4 + 2),  # TEGroupedMLP: linear_fc1, linear_fc2
    ("megatron_deepspeed", 4 + 8 * 3),  # DeepSpeed-MoE: a module per expert, an nn.Linear per projection
    ("hf", 4 + 1),  # MixtralSparseMoeBlock a ZeRO-3 leaf module (set_z3_leaf_modules): router + experts, one fetch
])
def test_mixtral_fetch_calls_follow_how_the_stack_keeps_its_experts(stack, calls):
    assert _calls_per_layer(MIXTRAL, stack) == pytest.approx(calls)


def test_a_router_above_the_persistence_threshold_is_one_more_fetch_and_ep_shrinks_the_per_expert_count():
    # Qwen3-30B-A3B: 128 x 2048 router weights > 10 x hidden, so fetched; 128 experts of 3 projections
    assert _calls_per_layer(QWEN3, "bundled") == pytest.approx(4 + 1 + 1)
    assert _calls_per_layer(QWEN3, "megatron_deepspeed") == pytest.approx(4 + 1 + 128 * 3)
    assert _calls_per_layer(QWEN3, "megatron_deepspeed", ep=4) == pytest.approx(4 + 1 + 32 * 3)
    # a dense model keeps one fetch per weight matrix whatever the stack
    llama = resolve_model("llama2-7b")
    assert float(zero3.block_calls(llama, _layout("bundled"), llama)) == float(zero3.block_calls(llama, _layout("hf")))


def test_zero3_gathers_every_expert_not_only_the_active_ones():
    view = moe.dense_view(OLMOE)
    lay = _layout("bundled")
    with_experts = zero3.gathers(view, lay, OLMOE)
    view_only = zero3.gathers(view, lay)
    # forward gathers each block once: the idle experts' parameters come on top of the view's
    extra = float(np.asarray(with_experts["fwd"] - view_only["fwd"]).item())
    assert extra == pytest.approx(OLMOE.n_params - view.n_params, rel=1e-9)
    assert extra > 4 * view.n_params  # 64 experts, 8 active: most of OLMoE's 6.9B is idle per token
    assert float(np.asarray(zero3.params_per_gpu(view, lay, OLMOE)).item()) == pytest.approx(OLMOE.n_params)


def test_bundled_zero3_moe_step_prices_the_experts_in_the_zero3_term_not_the_expert_gradient_term():
    system = resolve_system(Scenario(cluster="jean-zay-a100", gpus=16))
    lay = _layout("bundled", grad_accum=4)
    out = performance(OLMOE, lay, system, Settings())
    assert float(np.asarray(out["moe_expert_grad_s"]).item()) == 0.0
    # the same plan under ZeRO-2 still reduces the idle experts' gradients in the expert term
    z2 = performance(OLMOE, _layout("bundled", grad_accum=4, sharding="zero2"), system, Settings())
    assert float(np.asarray(z2["moe_expert_grad_s"]).item()) > 0.0


def test_hf_fetches_the_leaf_moe_block_at_once_router_and_shared_experts_included():
    """Hugging Face MoE blocks run under ZeRO-3 as leaf modules (deepspeed.utils.set_z3_leaf_modules): the router
    (gathered on its own elsewhere: Qwen3's is above the persistence threshold) and every expert in one fetch; the
    gathered block's weights and gradients (16-bit) are what GPU memory holds at once."""
    from planner import memory
    from planner.resolve import resolve_system

    assert _calls_per_layer(QWEN3, "hf") == pytest.approx(4 + 1)
    assert _calls_per_layer(QWEN3, "generic") == pytest.approx(4 + 1 + 128 * 3)  # a module per expert
    system = resolve_system(Scenario(gpu="h100-80gb", gpus=16))
    settings = Settings()
    mem = {s: memory.memory_arrays(MIXTRAL, _layout(s), system, settings) for s in ("hf", "generic")}
    block = 8 * 3 * 4096 * 14336  # Mixtral's 8 SwiGLU experts gathered at once (the router stays resident)
    view_unit = float(np.asarray(zero3.leaf_block_params(MIXTRAL, _layout("generic"))).item())
    assert view_unit == 0.0
    for key in ("weights_bytes", "grads_bytes"):
        extra = float(np.asarray(mem["hf"][key] - mem["generic"][key]).item())
        assert 2 * block * 0.9 < extra < 2 * (block + 8 * 4096)
