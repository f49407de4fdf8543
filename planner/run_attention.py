"""A runs-file row's attention kernel, where its text names one or its source fixes one (planner/run_columns.py).

The planner's kernels (planner/scenario.py `Attention`, speeds in planner/attention_kernel.py): flash (the
stack's own fused kernel), flash2, cudnn, triton (FlashAttention in Triton, the pre-FA2 kernel), eager.
"""

from __future__ import annotations

import re

# a kernel named in the row's notes / precision / framework text, first match wins
_STATED = (
    (re.compile(r"attn_impl\W*triton|triton[ -_]?(flash|fused)[ -_]?attn|triton[ -_]?(flash|fused)[ -_]?attention"
                r"|flash[ -_]?attn[ -_]?triton|flash[ -_]?attention[ -_]?(in|with)[ -_]?triton"), "triton"),
    (re.compile(r"flash[ -_]?attention[ -_]?-?2|flash[ -_]?attn[ -_]?2|flash_attention_2|\bfa-?2\b"), "flash2"),
    (re.compile(r"cudnn[ -_]?(fused[ -_]?)?(attention|attn|sdpa)|attn_impl\W*cudnn"), "cudnn"),
    # Transformer Engine named (e.g. NeMo's "fp8 (Transformer Engine)"): its DotProductAttention prefers cuDNN's
    # fused attention on Hopper (transformer_engine/pytorch/attention.py get_attention_backend: "Disabling
    # FlashAttention to give FusedAttention preference on Hopper+"); off Hopper `cudnn` falls back to the FA2
    # curve (planner/attention_kernel.curves), so the row keeps its kernel on any stack, `generic` included
    (re.compile(r"transformer[ -_]?engine"), "cudnn"),
)


def stated(text: str) -> str | None:
    """The kernel the (lower-cased) text names, None if none."""
    for pattern, kernel in _STATED:
        if pattern.search(text):
            return kernel
    return None
