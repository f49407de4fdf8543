"""The trainer's rotary embedding takes the spec's base (ModelSpec.rope_theta): frequency i of a head of d is
theta ** (-2i/d) (RoFormer, arXiv 2104.09864 sec. 3.2.2). Before it the trainer always used 10000, so a Llama 3
spec (500000) trained and was measured with another model's positions."""

import math

import pytest
import torch

from planner.model import LLAMA_BLOCK, ModelSpec
from trainer.model import Attention, rope_tables


@pytest.mark.parametrize("theta", [10_000.0, 500_000.0, 1_000_000.0])
def test_rope_tables_follow_the_formula(theta):
    seq, d = 37, 16
    cos, sin = rope_tables(seq, d, theta=theta)
    angles = torch.tensor([[p * theta ** (-2 * i / d) for i in range(d // 2)] for p in range(seq)], dtype=torch.float64)
    torch.testing.assert_close(cos.double(), angles.cos(), atol=2e-5, rtol=0)
    torch.testing.assert_close(sin.double(), angles.sin(), atol=2e-5, rtol=0)


def _rotate(x: torch.Tensor, theta: float) -> torch.Tensor:
    """RoPE by hand on (B, H, S, D), the two halves of the head paired (the trainer's layout), in float64."""
    d, s = x.shape[-1], x.shape[-2]
    out = torch.empty_like(x, dtype=torch.float64)
    for p in range(s):
        for i in range(d // 2):
            a = p * theta ** (-2 * i / d)
            x1, x2 = x[..., p, i].double(), x[..., p, i + d // 2].double()
            out[..., p, i] = x1 * math.cos(a) - x2 * math.sin(a)
            out[..., p, i + d // 2] = x1 * math.sin(a) + x2 * math.cos(a)
    return out


def test_attention_rotates_with_the_specs_base():
    torch.manual_seed(0)
    spec = ModelSpec(n_layers=1, hidden=32, n_heads=2, vocab=64, max_positions=64, rope_theta=500_000.0, **LLAMA_BLOCK)
    attn = Attention(spec, "eager").double()
    x = torch.randn(1, 24, 32, dtype=torch.float64)
    q = attn.q(x).view(1, 24, 2, 16).transpose(1, 2)
    k = attn.k(x).view(1, 24, 2, 16).transpose(1, 2)
    v = attn.v(x).view(1, 24, 2, 16).transpose(1, 2)
    q, k = _rotate(q, 500_000.0), _rotate(k, 500_000.0)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(16)
    scores = scores.masked_fill(torch.ones(24, 24, dtype=torch.bool).triu(1), float("-inf"))
    want = attn.o((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(1, 24, 32))
    torch.testing.assert_close(attn(x), want, atol=1e-5, rtol=1e-5)
    # and it is not the 10000 base (the test would not tell them apart otherwise)
    base = ModelSpec(**(spec.model_dump() | {"rope_theta": 10_000.0}))
    other = Attention(base, "eager").double()
    other.load_state_dict(attn.state_dict())
    assert (other(x) - want).abs().max() > 1e-3
