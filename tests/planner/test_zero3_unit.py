"""ZeRO-3's gathered unit is one module's own parameters (an embedding or a linear), FSDP's one
wrapped block or the root's embedding."""

import numpy as np
import pytest

from planner import memory
from planner.layout import Layout
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan

GPT2_52B = ModelSpec(name="gpt2-52b", n_layers=64, hidden=8192, n_heads=32, vocab=50257, max_positions=1024)
LLAMA = ModelSpec(name="l", n_layers=2, hidden=4096, n_heads=32, n_kv_heads=8, ffn_hidden=14336, vocab=1024,
                  mlp="swiglu", norm="rmsnorm", position="rope", tied_embeddings=False, bias=False)


def test_largest_module_is_the_embedding_or_one_linear():
    assert GPT2_52B.largest_module_params == GPT2_52B.vocab_padded * 8192  # the 412M-row embedding
    assert GPT2_52B.largest_layer_params == GPT2_52B.params_per_layer  # a whole 805M block
    # a small vocabulary: the largest linear (SwiGLU's 14336 x 4096), not the block
    assert LLAMA.largest_module_params == 14336 * 4096
    assert LLAMA.largest_module_params < LLAMA.params_per_layer


@pytest.mark.parametrize("sharding, expected", [("zero3", "largest_module_params"),
                                                ("fsdp_full_shard", "largest_layer_params")])
def test_unit_by_sharding(sharding, expected):
    lay = Layout.from_plan(ExecutionPlan(dp=8, tp=2, sharding=sharding, stack="hf"))
    unit = float(np.asarray(memory._unit_params(GPT2_52B, lay)).reshape(-1)[0])
    assert unit == getattr(GPT2_52B, expected) / 2
