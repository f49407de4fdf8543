"""Parallel degrees a runs file states in its notes rather than in the tp/pp/dp columns
(planner/run_layout.layout_of uses this): "TP=4, PP=2, DP=8", "TP4 PP2", "tp 4, pp 2", "tensor parallel 4",
"4-way tensor parallelism", "--tensor-model-parallel-size 4", "pipeline_model_parallel_size=2".

A degree in the notes fills only a blank column. Notes that name another GPU count than the row's
("Table 3 uses TP8 x PP35 on 280 GPUs") may describe another configuration: their degrees are not used
(noted).
"""

from __future__ import annotations

import re

_SIZE = r"(?:ism|[\s_-]*size|[\s_-]*degree)?\s*(?:of|=|:)?\s*(\d+)\b"
_PATTERNS = {
    "tp": (r"\bTP\s*[=:]?\s*(\d+)\b", r"tensor[\s_-]*(?:model[\s_-]*)?parallel" + _SIZE, r"(\d+)[\s-]*way\s+tensor"),
    "pp": (r"\bPP\s*[=:]?\s*(\d+)\b", r"pipeline[\s_-]*(?:model[\s_-]*)?parallel" + _SIZE, r"(\d+)[\s-]*way\s+pipeline"),
    "dp": (r"\bDP\s*[=:]?\s*(\d+)\b", r"data[\s_-]*parallel" + _SIZE, r"(\d+)[\s-]*way\s+data"),
}
_GPU_COUNT = re.compile(r"(?<![\w.])(\d[\d,]*)\s*(?:[A-Za-z][\w-]*\s+){0,2}GPUs\b", re.I)


def degrees_in_notes(text: str, gpus: int, notes: list[str]) -> dict[str, int]:
    """{'tp': 4, 'pp': 2, ...} for each degree the notes state (empty where they state none or describe
    another GPU count)."""
    found = {}
    for key, patterns in _PATTERNS.items():
        for pat in patterns:
            m = re.search(pat, text, re.I)
            if m and int(m.group(1)) > 0:
                found[key] = int(m.group(1))
                break
    if not found:
        return {}
    others = other_gpu_counts(text, gpus)
    if others:
        notes.append(f"the notes' {', '.join(f'{k} {v}' for k, v in found.items())} go with {others[0]} GPUs, "
                     f"not the row's {gpus}: not used")
        return {}
    return found


def other_gpu_counts(text: str, gpus: int) -> list[int]:
    """GPU counts the notes name other than the row's (their degrees may describe another configuration)."""
    return sorted({int(c.replace(",", "")) for c in _GPU_COUNT.findall(text)} - {gpus})
