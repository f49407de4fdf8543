"""The trainer's start-up line naming the kernels its layers run, by the same predicates the layers use at run time:
local attention (trainer/local_attention.py local_path) and the routed experts (trainer/experts.py grouped_ok).

    kernels: attention sdpa; local attention (chunked 8192, 36 of 48 layers) flex (compiled); experts grouped_mm

The dtype is the run's compute dtype (trainer/backends/base.py DTYPES: autocast's for DDP's bf16/fp16, the cast
parameters' for FSDP2's and DeepSpeed's).
"""

from __future__ import annotations

import torch

from planner import attn_window, moe
from planner.model import ModelSpec
from trainer import local_attention
from trainer.backends.base import DTYPES
from trainer.experts import grouped_ok

PREFIX = "kernels:"
_NAMES = {"flash_attn": "flash_attn (window_size)", "flex": "flex (compiled)", "sdpa": "sdpa (boolean mask)",
          "eager": "eager (masked scores)"}


def kernel_line(spec: ModelSpec, attention: str, device: torch.device, precision: str, seq_len: int) -> str:
    """One line: the full-attention kernel, the local layers' (if any; a window of seq_len or more is causal
    attention, trainer/model.py AttentionCore) and the experts' (if any)."""
    dtype = DTYPES.get(precision, torch.bfloat16)
    parts = [f"attention {'eager' if attention == 'eager' else 'sdpa'}"]
    local = attn_window.local_layer_mask(spec)
    if spec.attn_window is not None and spec.attn_window < seq_len and local.any():
        kind = "eager" if attention == "eager" else "flash"
        path = local_attention.local_path(device.type, dtype, spec.head_dim, spec.attn_chunked, kind)
        shape = f"{'chunked' if spec.attn_chunked else 'sliding'} {spec.attn_window}"
        parts.append(f"local attention ({shape}, {int(local.sum())} of {spec.n_layers} layers) {_NAMES[path]}")
    if moe.is_moe(spec):
        widths = (spec.hidden, moe.expert_ffn(spec))
        parts.append(f"experts {'grouped_mm' if grouped_ok(device, dtype, widths) else 'loop'}")
    return f"{PREFIX} {'; '.join(parts)}"
