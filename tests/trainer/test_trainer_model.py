"""The model, data and byte-counting pieces of the trainer, in one process."""

import pytest
import torch

from planner.model import ModelSpec
from trainer.checkpointing import apply_checkpointing
from trainer.data import Batches
from trainer.memory import StorageCounter, saved_tensor_meter
from trainer.model import GPT, loss_fn


def spec(**kw):
    base = dict(n_layers=2, hidden=64, n_heads=4, vocab=300, vocab_multiple=128, max_positions=64)
    return ModelSpec(**(base | kw))


VARIANTS = [
    {},
    dict(mlp="swiglu", norm="rmsnorm", position="rope", n_kv_heads=2, tied_embeddings=False, bias=False),
    dict(norm="nonparametric"),
    dict(norm_bias=False, embedding_norm=True),
    # families read from Hugging Face configs (planner/hf_config.py RULES)
    dict(mlp="swiglu", norm="rmsnorm", position="rope", n_kv_heads=2, bias=False, qkv_bias=True),  # Qwen2
    dict(mlp="swiglu", norm="rmsnorm", position="rope", n_kv_heads=2, bias=False, attn_head_dim=32,
         norms_per_layer=4, qk_norm="per_head"),  # Gemma 2/3: head_dim != hidden/heads, post-norms
    dict(position="rope", n_kv_heads=1, bias=False, norms_per_layer=1),  # Falcon-7B: parallel block
    dict(position="rope", parallel_block=True),  # GPT-NeoX use_parallel_residual: two norms over x
    dict(mlp="swiglu", norm="rmsnorm", position="rope", bias=False, qk_norm="full"),  # OLMo 2
]


@pytest.mark.parametrize("kw", VARIANTS)
@pytest.mark.parametrize("attention", ["flash", "eager"])
def test_gpt_matches_spec_and_trains(kw, attention):
    s = spec(**kw)
    torch.manual_seed(0)
    model = GPT(s, attention)
    assert sum(p.numel() for p in model.parameters()) == s.n_params
    assert model.embed.weight.shape[0] == 384  # 300 padded to a multiple of 128
    x = torch.randint(0, 300, (2, 16))
    loss = loss_fn(model(x), x)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_flash_and_eager_agree():
    torch.manual_seed(0)
    a = GPT(spec(position="rope", n_kv_heads=2), "flash")
    b = GPT(spec(position="rope", n_kv_heads=2), "eager")
    b.load_state_dict(a.state_dict())
    x = torch.randint(0, 300, (2, 16))
    torch.testing.assert_close(a(x), b(x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kv", [1, 2])
def test_sdpa_own_gqa_matches_expanded_kv(monkeypatch, kv):
    """SDPA's enable_gqa (torch >= 2.5) and the K/V expansion it replaces (the path older torch keeps): the same
    model gives the same logits and gradients; the native path hands SDPA the kv_heads K/V, not n_heads copies."""
    import trainer.model as tm

    s = spec(position="rope", n_kv_heads=kv, mlp="swiglu", norm="rmsnorm", bias=False)
    torch.manual_seed(0)
    native = GPT(s, "flash")
    x = torch.randint(0, 300, (2, 16))
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(tm.F, "scaled_dot_product_attention", lambda q, k, v, **kw: seen.append(
        (q.shape[1], k.shape[1], kw.get("enable_gqa", False))) or sdpa(q, k, v, **kw))
    out_native = native(x)
    loss_fn(out_native, x).backward()
    assert seen and all(entry == (4, kv, True) for entry in seen)
    monkeypatch.setattr(tm, "SDPA_HAS_GQA", False)  # torch before 2.5: K/V repeated to n_heads
    seen.clear()
    expanded = GPT(s, "flash")
    expanded.load_state_dict(native.state_dict())
    out_expanded = expanded(x)
    loss_fn(out_expanded, x).backward()
    assert seen and all(entry == (4, 4, False) for entry in seen)
    torch.testing.assert_close(out_native, out_expanded, rtol=1e-5, atol=1e-5)
    for (name, a), b in zip(native.named_parameters(), expanded.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_low_precision_layernorm_runs_in_bf16():
    model = GPT(spec(), "flash", low_precision_norm=True)
    x = torch.randint(0, 300, (1, 8))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = model.blocks[0].norm1(model.embed(x))
    assert h.dtype == torch.bfloat16


def test_storage_counter_counts_each_byte_once():
    flat = torch.zeros(100)
    c = StorageCounter()
    assert c.count([flat[:10], flat[5:20]]) == 20 * 4  # overlapping views: union
    assert c.count([flat[:20]]) == 0  # already counted
    assert c.count([torch.zeros(3, dtype=torch.bfloat16)]) == 6


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_saved_bytes_shrink_with_checkpointing(mode):
    torch.manual_seed(0)
    s = spec()
    model = GPT(s, "eager")
    apply_checkpointing(model, mode)
    x = torch.randint(0, 300, (2, 32))
    with saved_tensor_meter() as out:
        loss = loss_fn(model(x), x)
    loss.backward()  # checkpointed modules still train
    sbh = 2 * 32 * 64 * 4
    if mode == "full":  # block inputs + final norm/log-softmax only
        assert out["bytes"] < 2 * sbh + 2 * 32 * 384 * 4 + 4 * sbh
    test_saved_bytes_shrink_with_checkpointing.seen[mode] = out["bytes"]
    if len(test_saved_bytes_shrink_with_checkpointing.seen) == 3:
        seen = test_saved_bytes_shrink_with_checkpointing.seen
        assert seen["full"] < seen["selective"] < seen["none"]


test_saved_bytes_shrink_with_checkpointing.seen = {}


def test_byte_text_batches(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("hello world " * 20)
    x, y = Batches(str(p), 300, micro_batch=3, seq_len=16, seed=0).next()
    assert x.shape == (3, 16) and int(x.max()) < 256
    assert torch.equal(x[:, 1:], y[:, :-1])
