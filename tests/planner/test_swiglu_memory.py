"""The SwiGLU MLP's saved tensors per stack (its profile's swiglu_saved_sbf) in the activation terms, and the
rebuilt block of full recompute in what must fit (planner/memory_required.py) keeping what a kept block keeps."""

import numpy as np
import pytest

from planner import fp8_saved, memory, memory_required
from planner.layout import Layout
from planner.model import LLAMA_BLOCK, ModelSpec
from planner.scenario import ExecutionPlan
from planner.settings import Settings, stack_profiles, with_catalog
from planner.stacks import per_candidate
from tests.planner.test_memory import system

SPEC = ModelSpec(name="t", n_layers=16, hidden=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336, vocab=128256,
                 max_positions=8192, **LLAMA_BLOCK)


def _layout(stack, **kw):
    plan = dict(tp=2, pp=1, dp=4, sharding="zero1", precision="bf16", micro_batch=1, grad_accum=8, seq_len=4096,
                activation_checkpointing="none", sequence_parallel=True, stack=stack)
    return Layout.from_plan(ExecutionPlan(**{**plan, **kw}))


def one(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def test_fused_swiglu_keeps_one_ffn_tensor_less():
    lay = _layout("megatron")
    four, three = (one(memory.layer_activation_bytes(SPEC, lay, 0.0, n)) for n in (4.0, 3.0))
    assert four - three == pytest.approx(4096 * SPEC.ffn * 2 / 2)  # s*b*f/t bf16 elements


@pytest.mark.parametrize("stack, sbf", [("megatron", 3.0), ("torchtitan", 4.0)])
def test_memory_arrays_reads_the_stack_profile(stack, sbf):
    lay = _layout(stack)
    prof = per_candidate(stack_profiles(Settings()), lay)
    assert one(prof["swiglu_saved_sbf"]) == sbf
    m = memory.memory_arrays(SPEC, lay, system(gpus=8), Settings())
    expected = memory.activation_bytes(SPEC, lay, prof["loss_saved_bytes_per_logit"], prof["pipeline_outputs_kept"],
                                       prof["eager_softmax_fp32"], 0.0, sbf)
    assert one(m["activations_bytes"]) == pytest.approx(one(expected), rel=1e-12)


def test_rebuilt_block_keeps_what_a_kept_block_keeps():
    # fp8 on Megatron (TE keeps fp8 linear inputs: fp8_saved.block_bytes_less), full recompute, one stage:
    # what must fit is the block inputs + max(the loss's backward, the rebuilt block as it is kept)
    settings = with_catalog(Settings())
    lay = _layout("megatron", precision="fp8", fp8_recipe="delayed", activation_checkpointing="full")
    prof = per_candidate(stack_profiles(settings), lay)
    less = one(fp8_saved.block_bytes_less(SPEC, lay, settings))
    assert less > 0
    block = one(memory.layer_activation_bytes(SPEC, lay, 0.0, 3.0))
    m = memory.memory_arrays(SPEC, lay, system(gpus=8), settings)
    acts = m["activations_bytes"]
    live = one(memory_required.backward_live_bytes(SPEC, lay, acts, 0.0, prof, less))
    sb, t = 4096.0, 2
    logits = one(prof["loss_saved_bytes_per_logit"]) * sb * SPEC.vocab_padded / t
    final = sb * SPEC.hidden * 2 * 2 / t
    inputs = one(acts) - (block - less) - logits - final  # the saved block inputs
    assert live == pytest.approx(inputs + max(logits + final, block - less), rel=1e-12)
    # without the recipe's saving the rebuilt block is over-counted and the live bytes come out wrong
    assert one(memory_required.backward_live_bytes(SPEC, lay, acts, 0.0, prof)) != pytest.approx(live, rel=1e-6)
