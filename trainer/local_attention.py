"""Local attention for the layers a spec makes local (planner/attn_window.py `local_layer_mask`).

Sliding window of w: query i sees keys i-w+1 .. i (transformers' sliding-window mask `kv_idx > q_idx -
sliding_window`; FlashAttention-2 `window_size=(w-1, 0)`). Chunked (Llama 4's attention_chunk_size): query i sees
key j <= i in its own block of w tokens (transformers' chunked mask: `q_idx // w == kv_idx // w`).

Which kernel runs a local layer (`local_path`, also named in the trainer's start-up line, trainer/kernels.py):
- "flash_attn": CUDA, the flash-attn package installed, fp16/bf16, a sliding window: flash_attn_func(window_size=
  (w-1, 0)), which takes GQA itself.
- "flex": CUDA otherwise (chunked layers, no flash-attn, fp32): FlexAttention (torch.nn.attention.flex_attention) with
  a block mask of the same rule (create_block_mask: 128 x 128 tiles wholly outside the window are skipped, so the work
  and memory are the windowed kernel's the planner times, planner/attn_window.py), GQA by enable_gqa, compiled with
  torch.compile (uncompiled it materialises the full scores: torch's flex_attention docstring).
- "sdpa": elsewhere (CPU: FlexAttention there has no backward in torch 2.13) the boolean mask given to
  F.scaled_dot_product_attention; "eager": the attention kind eager, the mask on the full scores.
"""

from __future__ import annotations

import functools
import importlib.util
import math

import torch
import torch.nn.functional as F

FLASH_ATTN = importlib.util.find_spec("flash_attn") is not None
try:  # torch >= 2.5
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:  # pragma: no cover - older torch
    create_block_mask = flex_attention = None
FLEX = flex_attention is not None
# Triton's tl.dot needs K >= 16 (the flex kernel rounds the head dim up to a power of two, no further)
FLEX_MIN_HEAD_DIM = 16


def local_path(device_type: str, dtype: torch.dtype, head_dim: int, chunked: bool, kind: str = "flash") -> str:
    """The kernel a local layer runs: "flash_attn", "flex", "sdpa" or "eager" (the module docstring)."""
    if kind == "eager":
        return "eager"
    if (FLASH_ATTN and not chunked and device_type == "cuda" and dtype in (torch.float16, torch.bfloat16)
            and head_dim <= 256 and head_dim % 8 == 0):  # flash-attn 2's README: head dim <= 256, multiple of 8
        return "flash_attn"
    if FLEX and device_type == "cuda" and head_dim >= FLEX_MIN_HEAD_DIM:
        return "flex"
    return "sdpa"


def local_mask(seq_len: int, window: int, chunked: bool, device=None) -> torch.Tensor:
    """(S, S) bool, True where query (row) i may see key (column) j."""
    i = torch.arange(seq_len, device=device)[:, None]
    j = torch.arange(seq_len, device=device)[None, :]
    if chunked:
        return (j <= i) & (i // window == j // window)
    return (j <= i) & (j > i - window)


def flash_window_ok(q: torch.Tensor, chunked: bool) -> bool:
    """flash_attn_func runs this: the package is there, a CUDA tensor in fp16/bf16, head dim <= 256 and a multiple
    of 8 (flash-attn 2's README), a sliding window (it has no chunked mask)."""
    return local_path(q.device.type, q.dtype, q.shape[-1], chunked) == "flash_attn"


@torch.compiler.disable  # inside a compiled block: built here once, not traced (and its S x S rule evaluated) each step
@functools.lru_cache(maxsize=64)
def block_mask(seq_len: int, window: int, chunked: bool, device: str):
    """FlexAttention's BlockMask of the local rule (as `local_mask`), one per shape: built once, reused each step."""
    def sliding(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx - kv_idx < window)

    def chunk(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (q_idx // window == kv_idx // window)

    return create_block_mask(chunk if chunked else sliding, None, None, seq_len, seq_len, device=device)


@functools.cache
def _compiled_flex():
    return torch.compile(flex_attention, dynamic=False)


def flex_local(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, chunked: bool,
               compiled: bool = True) -> torch.Tensor:
    """(B, H, S, D) in and out, K/V with fewer heads as they are (enable_gqa). `compiled` False: flex_attention's
    unfused reference (CPU tests); inside a compiled block dynamo captures the plain call itself."""
    mask = block_mask(q.shape[-2], window, chunked, str(q.device))
    fn = _compiled_flex() if compiled and not torch.compiler.is_compiling() else flex_attention
    return fn(q, k, v, block_mask=mask, enable_gqa=k.shape[1] != q.shape[1])


def flash_window(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """(B, H, S, D) in and out; flash-attn takes (B, S, H, D) and fewer K/V heads (GQA) as they are."""
    from flash_attn import flash_attn_func

    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True,
                          window_size=(window - 1, 0))
    return out.transpose(1, 2)


def sdpa_masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, gqa: bool) -> torch.Tensor:
    """SDPA with the boolean mask (True: attend); `gqa`: K/V carry fewer heads and SDPA takes them (enable_gqa)."""
    if gqa:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def eager_masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The full S x S scores, the mask as -inf (Hugging Face eager_attention_forward); K/V expanded already."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v
