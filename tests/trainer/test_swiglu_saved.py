"""SwiGLU MLP tensors kept for backward, measured with the saved-tensor hooks, against the stack
profiles' `swiglu_saved_sbf` (hardware/stacks.py): autograd on down(silu(gate x) * up x) keeps 4
s*b*f tensors, whether gate and up are two linears (the bundled trainer, Hugging Face, torchtitan) or
two chunks of one fc1 output (Megatron-DeepSpeed's swiglu); Megatron-Core's fused kernel keeps 3."""

import pytest
import torch
import torch.nn.functional as F

from hardware.catalog import load_catalog
from planner.model import ModelSpec
from trainer.memory import saved_tensor_meter
from trainer.model import Mlp

B, S, H, FFN = 2, 32, 64, 176
SPEC = ModelSpec(name="t", n_layers=1, hidden=H, n_heads=4, ffn_hidden=FFN, vocab=128, max_positions=S,
                 mlp="swiglu", bias=False)
STACKS = load_catalog().stacks


def _saved_ffn_tensors(fn, x) -> float:
    """s*b*f tensors (bf16) `fn` keeps for backward beyond its input x."""
    with saved_tensor_meter() as out:
        y = fn(x)
        saved = out["bytes"] - x.numel() * x.element_size()
    y.float().sum().backward()
    return saved / (B * S * FFN * 2)


def _input():
    leaf = torch.randn(B, S, H, dtype=torch.bfloat16, requires_grad=True)
    return leaf * 1  # an activation, as in a model (a leaf counts as a parameter)


def test_bundled_trainer_mlp_keeps_four_ffn_tensors():
    mlp = Mlp(SPEC).to(torch.bfloat16)
    assert _saved_ffn_tensors(mlp, _input()) == pytest.approx(4.0)
    assert STACKS["bundled"].swiglu_saved_sbf == 4.0


def test_chunked_fc1_swiglu_keeps_four_too():
    # Megatron-DeepSpeed / legacy Megatron-LM: F.silu(x[0]) * x[1] on the chunks of one fc1 output; the
    # chunks are views, so silu's saved input keeps the whole [gate; up] storage (2) alive
    fc1 = torch.nn.Linear(H, 2 * FFN, bias=False).to(torch.bfloat16)
    fc2 = torch.nn.Linear(FFN, H, bias=False).to(torch.bfloat16)

    def mlp(x):
        g, u = torch.chunk(fc1(x), 2, dim=-1)
        return fc2(F.silu(g) * u)

    assert _saved_ffn_tensors(mlp, _input()) == pytest.approx(4.0)
    assert STACKS["megatron_deepspeed"].swiglu_saved_sbf == 4.0


def test_profiles_state_the_fused_kernel_for_megatron_core_only():
    # Megatron-Core's SwiGLUFunction saves its input (fc1's output, 2) and fc2 its own input (1)
    assert STACKS["megatron"].swiglu_saved_sbf == 3.0
    for name in ("hf", "torchtitan", "fsdp", "generic"):
        assert STACKS[name].swiglu_saved_sbf == 4.0
