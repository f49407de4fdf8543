"""Bytes the bundled trainer's eager attention keeps per attention score, measured with the
saved-tensor hooks, against planner/activation_terms.eager_scores_saved_bytes: the softmax runs
in fp32 (as Hugging Face's eager attention does) and keeps its fp32 output next to the 16-bit
probabilities the value matmul saves."""

import pytest
import torch

from planner.activation_terms import eager_scores_saved_bytes
from trainer.memory import saved_tensor_meter
from trainer.model import AttentionCore


@pytest.mark.parametrize("dtype, size", [(torch.bfloat16, 2), (torch.float32, 4)])
def test_eager_core_keeps_fp32_softmax_and_16bit_probs(dtype, size):
    b, heads, s, d = 2, 4, 64, 16
    leaves = [torch.randn(b, heads, s, d, dtype=dtype, requires_grad=True) for _ in range(3)]
    q, k, v = (t * 1 for t in leaves)  # activations, as in a model (leaves count as parameters)
    with saved_tensor_meter() as out:
        y = AttentionCore("eager")(q, k, v)
        qkv = 3 * b * heads * s * d * size  # q, k (scores) and v (values); the causal mask is s*s bools
        scores = out["bytes"] - qkv - s * s
    y.sum().backward()
    per_score = scores / (b * heads * s * s)
    assert per_score == pytest.approx(float(eager_scores_saved_bytes(size, True)), abs=0.05)
    if size == 2:  # a 16-bit softmax would keep 2 B
        assert per_score > float(eager_scores_saved_bytes(size, False))
