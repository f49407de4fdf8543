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


# Megatron-Core's training script runs Transformer Engine unless `--transformer-impl local` is given:
# `group.add_argument('--transformer-impl', default='transformer_engine', choices=['local', 'transformer_engine'])`
# (megatron/training/arguments.py of core_v0.7.0, as traced in github.com/shifang99/Megatron-LM_core_v0.7.0_trace);
# a framework cell "Megatron-Core r0.7" or later names TE as plainly as "fp8 (Transformer Engine)" does
TE_DEFAULT_FROM = (0, 7)
_CORE_VERSION = re.compile(r"megatron[- _]?core\s*(?:r|v|core_r|core_v)?(\d+)\.(\d+)")
_LOCAL_IMPL = re.compile(r"transformer[-_]impl\W*local")


def stated(text: str) -> str | None:
    """The kernel the (lower-cased) text names, None if none."""
    for pattern, kernel in _STATED:
        if pattern.search(text):
            return kernel
    m = _CORE_VERSION.search(text)
    if m and (int(m.group(1)), int(m.group(2))) >= TE_DEFAULT_FROM and not _LOCAL_IMPL.search(text):
        return "cudnn"  # Transformer Engine by default (above): its cuDNN fused attention on Hopper
    return None
