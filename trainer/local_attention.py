"""Local attention for the layers a spec makes local (planner/attn_window.py `local_layer_mask`).

Sliding window of w: query i sees keys i-w+1 .. i (transformers' sliding-window mask `kv_idx > q_idx -
sliding_window`; FlashAttention-2 `window_size=(w-1, 0)`). Chunked (Llama 4's attention_chunk_size): query i sees
key j <= i in its own block of w tokens (transformers' chunked mask: `q_idx // w == kv_idx // w`). Both run as a
boolean mask given to F.scaled_dot_product_attention or to the eager scores; on CUDA with the flash-attn package
installed the sliding window runs as flash_attn_func(window_size=(w-1, 0)), which takes GQA itself.
"""

from __future__ import annotations

import importlib.util
import math

import torch
import torch.nn.functional as F

FLASH_ATTN = importlib.util.find_spec("flash_attn") is not None


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
    return (FLASH_ATTN and not chunked and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
            and q.shape[-1] <= 256 and q.shape[-1] % 8 == 0)


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
