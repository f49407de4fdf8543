"""Sliding-window and chunked local attention in the bundled trainer, against a naive reference that builds the
full score matrix and masks it by the rule planner/attn_window.py states (query i sees keys i-w+1 .. i; chunked:
keys j <= i of its own block of w)."""

import math

import numpy as np
import pytest
import torch

from planner import attn_window
from planner.model import ModelSpec
from trainer.local_attention import FLASH_ATTN, local_mask
from trainer.model import GPT, AttentionCore


def sees(i: int, j: int, w: int, chunked: bool) -> bool:
    """The rule, one (query, key) pair at a time (0-based positions)."""
    if j > i:
        return False
    return i // w == j // w if chunked else i - j < w


def reference(q, k, v, w, chunked):
    """softmax over the full S x S scores with -inf where the rule says no; K/V heads repeated for GQA."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1).double(), v.repeat_interleave(rep, dim=1).double()
    s = q.shape[-2]
    scores = q.double() @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    for i in range(s):
        for j in range(s):
            if not sees(i, j, w, chunked):
                scores[..., i, j] = float("-inf")
    return (torch.softmax(scores, dim=-1) @ v).float()


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("w", [1, 3, 8])
def test_mask_is_the_rule(w, chunked):
    m = local_mask(13, w, chunked)
    assert m.tolist() == [[sees(i, j, w, chunked) for j in range(13)] for i in range(13)]


def test_mask_sees_the_keys_the_planner_counts():
    """The scores the mask keeps are planner/attn_window.py keys_per_sequence, K(s, w), exactly."""
    for s, w, chunked in [(64, 8, False), (64, 5, False), (64, 8, True), (61, 7, True), (16, 32, False)]:
        assert int(local_mask(s, w, chunked).sum()) == int(attn_window.keys_per_sequence(s, w, chunked))


@pytest.mark.parametrize("kind", ["flash", "eager"])
@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("w, chunked", [(5, False), (8, True), (1, False)])
def test_core_matches_the_reference(kind, heads, kv_heads, w, chunked):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, heads, 24, 16, generator=g)
    k, v = (torch.randn(2, kv_heads, 24, 16, generator=g) for _ in range(2))
    out = AttentionCore(kind, w, chunked)(q, k, v)
    torch.testing.assert_close(out, reference(q, k, v, w, chunked), atol=1e-5, rtol=1e-4)


def test_a_window_as_long_as_the_sequence_is_causal():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=g) for _ in range(3))
    for chunked in (False, True):
        torch.testing.assert_close(AttentionCore("flash", 16, chunked)(q, k, v), AttentionCore("flash")(q, k, v))
    assert not torch.allclose(AttentionCore("flash", 4)(q, k, v), AttentionCore("flash")(q, k, v))


def test_gradients_match_the_reference():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 12, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    AttentionCore("flash", 4)(q, k, v).sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    reference(q, k, v, 4, False).sum().backward()
    for a, b in zip(got, (q.grad, k.grad, v.grad)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("n, local, globals_at", [
    (26, 22, [5, 11, 17, 23]),  # Gemma 3: 5 local : 1 global
    (26, 13, list(range(1, 26, 2))),  # Gemma 2: alternating
    (48, 36, list(range(3, 48, 4))),  # Llama 4: 3 chunked : 1 global
    (4, 4, []),
    (4, 0, [0, 1, 2, 3]),
])
def test_which_layers_are_local(n, local, globals_at):
    spec = ModelSpec(name="w", n_layers=n, hidden=64, n_heads=4, vocab=128, attn_window=16,
                     attn_local_layers=None if local == n else local)
    mask = attn_window.local_layer_mask(spec)
    assert np.flatnonzero(~mask).tolist() == globals_at


def test_any_count_of_local_layers_is_kept():
    for n in range(1, 13):
        for local in range(n + 1):
            spec = ModelSpec(name="w", n_layers=n, hidden=64, n_heads=4, vocab=128, attn_window=16,
                             attn_local_layers=local)
            assert int(attn_window.local_layer_mask(spec).sum()) == local


def test_gpt_builds_the_window_on_the_local_layers():
    spec = ModelSpec(name="w", n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, vocab=128, max_positions=64,
                     position="rope", attn_window=8, attn_local_layers=1, attn_chunked=True)
    model = GPT(spec)
    assert [(b.attn.core.window, b.attn.core.chunked) for b in model.blocks] == [(8, True), (None, True)]
    x = torch.randint(0, 128, (2, 32))
    dense = GPT(spec.model_copy(update={"attn_window": None, "attn_local_layers": None, "attn_chunked": False}))
    dense.load_state_dict(model.state_dict())
    assert model(x).shape == (2, 32, 128)
    assert torch.allclose(model(x)[:, :8], dense(x)[:, :8], atol=1e-5)  # the first chunk sees what causal sees
    assert not torch.allclose(model(x)[:, 8:], dense(x)[:, 8:], atol=1e-4)


@pytest.mark.skipif(not (torch.cuda.is_available() and FLASH_ATTN), reason="needs a CUDA GPU and flash-attn")
def test_flash_attn_window_matches_the_reference():
    from trainer import local_attention

    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 4, 64, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(2, 2, 64, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    assert local_attention.flash_window_ok(q, chunked=False)
    out = AttentionCore("flash", 16)(q, k, v)
    torch.testing.assert_close(out.float().cpu(), reference(q.cpu(), k.cpu(), v.cpu(), 16, False), atol=2e-2,
                               rtol=2e-2)
