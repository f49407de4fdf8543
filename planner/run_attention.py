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
)

# llm-foundry's benchmark tables (scripts/train/benchmarking/README.md) ran submit_benchmarks.py, whose
# `--attn_impl` defaults to 'triton' (parser.add_argument('--attn_impl', type=str, default='triton'); the
# tables state no other), i.e. llmfoundry/models/layers/flash_attn_triton.py, Dao's Triton FlashAttention.
_LLMFOUNDRY_BENCH = re.compile(r"llm-?foundry.*benchmarking")


def stated(text: str) -> str | None:
    """The kernel the (lower-cased) text names, None if none."""
    for pattern, kernel in _STATED:
        if pattern.search(text):
            return kernel
    return None


def of_source(row, notes: list[str]) -> str | None:
    """The kernel the row's source fixes where the row states none (noted), None if it fixes none."""
    if _LLMFOUNDRY_BENCH.search(str(row.get("source") or "").lower()):
        notes.append("attention not stated: triton (llm-foundry submit_benchmarks.py default --attn_impl 'triton')")
        return "triton"
    return None
