"""The planner's ZeRO-3 unit against DeepSpeed's own definition on the bundled model:
`model_to_params` (deepspeed/runtime/zero/stage3.py) takes the largest module's direct params."""

import pytest

from planner.model import ModelSpec
from trainer.model import GPT

SHAPES = [  # largest module: the embedding; fc1 with its bias; SwiGLU's gate
    dict(n_layers=2, hidden=64, n_heads=4, vocab=300, vocab_multiple=128, max_positions=64),
    dict(n_layers=2, hidden=64, n_heads=4, vocab=32, vocab_multiple=32, max_positions=16),
    dict(n_layers=2, hidden=64, n_heads=4, vocab=32, vocab_multiple=32, max_positions=16, mlp="swiglu",
         norm="rmsnorm", position="rope", tied_embeddings=False, bias=False, ffn_hidden=256),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_largest_module_is_deepspeeds_largest_layer(shape):
    from deepspeed.runtime.zero.stage3 import model_to_params

    spec = ModelSpec(name="t", **shape)
    _, largest = model_to_params(GPT(spec))
    assert largest == spec.largest_module_params
    assert largest < spec.params_per_layer or largest == spec.vocab_padded * spec.hidden
