"""FlexAttention for local layers (trainer/local_attention.py): which kernel each device and dtype gets, FlexAttention's
numerics against the dense boolean mask (CPU: forward only, torch 2.13's flex_attention has no CPU backward; CUDA:
loss and gradients, skipped without a GPU), and the start-up line naming the kernels (trainer/kernels.py)."""

import json

import pytest
import torch

from planner.model import ModelSpec
from trainer import local_attention
from trainer.kernels import kernel_line
from trainer.local_attention import flex_local, local_path
from trainer.model import GPT, AttentionCore, loss_fn

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
SPEC = dict(name="tiny-local", n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, vocab=256, max_positions=256,
            position="rope", norm="rmsnorm", mlp="swiglu", bias=False, tied_embeddings=False, ffn_hidden=128,
            attn_window=8, attn_local_layers=1)


@pytest.mark.parametrize("flash, device, dtype, head_dim, chunked, kind, path", [
    (True, "cuda", BF16, 128, False, "flash", "flash_attn"),  # flash-attn's window where it applies
    (True, "cuda", FP16, 64, False, "flash", "flash_attn"),
    (True, "cuda", BF16, 128, True, "flash", "flex"),  # flash-attn has no chunked mask
    (True, "cuda", FP32, 128, False, "flash", "flex"),  # nor fp32
    (True, "cuda", BF16, 512, False, "flash", "flex"),  # nor head dims over 256
    (False, "cuda", BF16, 128, False, "flash", "flex"),  # not installed
    (False, "cuda", BF16, 8, False, "flash", "sdpa"),  # under Triton's 16-wide dot
    (True, "cpu", BF16, 128, False, "flash", "sdpa"),  # CPU: no FlexAttention backward
    (False, "cpu", FP32, 64, True, "flash", "sdpa"),
    (True, "cuda", BF16, 128, True, "eager", "eager"),  # the eager kind keeps its masked scores
])
def test_the_kernel_each_device_gets(monkeypatch, flash, device, dtype, head_dim, chunked, kind, path):
    monkeypatch.setattr(local_attention, "FLASH_ATTN", flash)
    assert local_path(device, dtype, head_dim, chunked, kind) == path


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("s, w, chunked", [(24, 5, False), (24, 8, True), (200, 40, False), (200, 48, True),
                                           (300, 130, False), (300, 128, True)])
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_forward_matches_the_dense_mask_on_cpu(heads, kv_heads, s, w, chunked):
    """The block mask's rule is local_mask's: over several 128-token tiles (tiles skipped and partial), GQA as
    enable_gqa. flex_attention's unfused CPU reference (the compiled CPU kernel gave the same to 4e-7 when tried:
    its first compile takes ~40 s here) vs SDPA with the boolean mask, fp32: summation order only (1e-5)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, heads, s, 16, generator=g)
    k, v = (torch.randn(2, kv_heads, s, 16, generator=g) for _ in range(2))
    with torch.no_grad():
        dense = AttentionCore("flash", w, chunked)(q, k, v)
        flex = flex_local(q, k, v, w, chunked, compiled=False)
    torch.testing.assert_close(flex, dense, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_compiled_flex_and_a_compiled_block_match_the_dense_mask_on_cpu(monkeypatch):
    """The trainer's own call (flex_local compiled, as on CUDA) and a compiled AttentionCore on the flex path (the
    block mask built outside the graph: trainer/local_attention.py block_mask) through the CPU inductor backend,
    forward only: the dense mask's output to 1e-5 (~1 min of compiling here)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 200, 16, generator=g)
    k, v = (torch.randn(2, 2, 200, 16, generator=g) for _ in range(2))
    core = AttentionCore("flash", 48, True)
    with torch.no_grad():
        dense = core(q, k, v)
        torch.testing.assert_close(flex_local(q, k, v, 48, True), dense, atol=1e-5, rtol=1e-5)
        monkeypatch.setattr(local_attention, "local_path", lambda *a, **kw: "flex")
        torch.testing.assert_close(torch.compile(core)(q, k, v), dense, atol=1e-5, rtol=1e-5)


def test_the_block_mask_skips_the_tiles_outside_the_window():
    """What makes it a windowed kernel: at 1024 tokens, window 128, a query tile reads at most 2 key tiles of 8."""
    def tiles_read(mask):  # partial tiles (the mask applied) + full tiles (no mask needed), per query tile
        full = mask.full_kv_num_blocks
        return (mask.kv_num_blocks + (0 if full is None else full)).flatten().tolist()

    # sliding 128: query tile 0 reads itself, each later one itself and the one before
    assert tiles_read(local_attention.block_mask(1024, 128, False, "cpu")) == [1] + [2] * 7
    # chunks of 256 = 2 tiles: the chunk's first tile reads itself, its second both
    assert tiles_read(local_attention.block_mask(1024, 256, True, "cpu")) == [1, 2] * 4


@pytest.mark.parametrize("chunked", [False, True])
def test_start_up_line_names_the_kernels(monkeypatch, chunked):
    monkeypatch.setattr(local_attention, "FLASH_ATTN", False)
    spec = ModelSpec(**SPEC, attn_chunked=chunked)
    shape = f"{'chunked' if chunked else 'sliding'} 8, 1 of 2 layers"
    assert kernel_line(spec, "flash", torch.device("cpu"), "fp32", 32) == \
        f"kernels: attention sdpa; local attention ({shape}) sdpa (boolean mask)"
    assert kernel_line(spec, "flash", torch.device("cuda"), "bf16", 32) == \
        f"kernels: attention sdpa; local attention ({shape}) flex (compiled)"
    assert kernel_line(spec, "eager", torch.device("cpu"), "fp32", 32) == \
        f"kernels: attention eager; local attention ({shape}) eager (masked scores)"
    assert kernel_line(spec, "flash", torch.device("cpu"), "fp32", 8) == "kernels: attention sdpa"  # causal
    moe = ModelSpec(**SPEC | dict(moe_experts=4, moe_top_k=2, moe_ffn_hidden=32))
    assert kernel_line(moe, "flash", torch.device("cpu"), "bf16", 32).endswith("; experts loop")


@pytest.mark.slow
def test_a_run_prints_the_kernel_line(tmp_path, capfd):
    from trainer.config import TrainConfig
    from trainer.launch import launch

    path = tmp_path / "m.json"
    path.write_text(json.dumps(SPEC | dict(attn_chunked=True, moe_experts=4, moe_top_k=2, moe_ffn_hidden=32)))
    r = launch(TrainConfig(model=str(path), nproc=1, steps=2, warmup_steps=1, seq_len=32, timeout_s=240,
                           json_out=str(tmp_path / "r.json")))
    assert r.status == "ok", r.error
    err = capfd.readouterr().err
    assert "kernels: attention sdpa; local attention (chunked 8, 1 of 2 layers) sdpa (boolean mask); experts loop" \
        in err.splitlines()


CUDA = torch.cuda.is_available()


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [FP32, BF16])
@pytest.mark.parametrize("chunked", [False, True])
def test_flex_loss_and_grads_match_the_dense_mask_on_cuda(monkeypatch, dtype, chunked):
    """A tiny GPT (GQA, one local layer of window 48 over 200 tokens) on CUDA: the local layer runs compiled
    FlexAttention, then the same weights with the dense boolean mask (local_path forced to "sdpa"): the same loss and
    gradients. fp32: the flex kernel accumulates in fp32 as SDPA's math does, 1e-4 (summation order over tiles);
    bf16: both round q k^T and p v products to bf16 in different tiles, 2e-2."""
    monkeypatch.setattr(local_attention, "FLASH_ATTN", False)
    spec = ModelSpec(**SPEC | dict(attn_window=48, attn_chunked=chunked))
    torch.manual_seed(0)
    model = GPT(spec).to("cuda", dtype)
    assert local_path("cuda", dtype, spec.head_dim, chunked) == "flex"
    x = torch.randint(0, 256, (2, 201), device="cuda")

    def run():
        model.zero_grad()
        loss = loss_fn(model(x[:, :-1]), x[:, 1:])
        loss.backward()
        return loss.detach().float(), {n: p.grad.float().clone() for n, p in model.named_parameters()}

    calls = []
    real_flex = local_attention.flex_local
    monkeypatch.setattr(local_attention, "flex_local", lambda *a, **k: calls.append(1) or real_flex(*a, **k))
    flex_loss, flex_grads = run()
    assert calls  # the flex path ran
    monkeypatch.setattr(local_attention, "local_path", lambda *a, **k: "sdpa")
    dense_loss, dense_grads = run()
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == FP32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(flex_loss, dense_loss, **tol)
    for name in dense_grads:
        torch.testing.assert_close(flex_grads[name], dense_grads[name], **tol)
