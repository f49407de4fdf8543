"""Units and scale words in a runs file's numeric cells (planner/run_text.number uses this).

Curators restate a column's unit or write it at another scale: "2048 tokens", "64 GPUs", "8 GPUs/node",
"1024 sequences", "32 layers", "7B", "350M", "1T" (n_params_B), "1420 ms" (iteration seconds), "3.2k
tok/s/GPU", "150 TFLOPs/GPU", "128K" (vocab: x 1000), "4k" (seq_len: x 1024), "TP8" / "8-way" (a
parallel degree), "8 nodes x 8 GPUs" (n_gpus). `bare` returns the number text and the factor into
the column's own unit; text it does not know is left as it is (and is then "not a number").
"""

from __future__ import annotations

import re

_TOKENS_PER_S = r"tok(?:en)?s?\s*/\s*s(?:ec)?(?:\s*(?:/|per)\s*GPU)?"
# column -> (unit regex at the end of the cell, factor into the column's unit), first match wins
UNIT_WORDS: dict[str, list[tuple[str, float]]] = {
    "n_params_B": [(r"B|bn|billions?", 1.0), (r"M|million", 1e-3), (r"T|trillion", 1e3)],
    "measured_peak_mem_GB": [(r"GB|GiB|G", 1.0)],
    "measured_iter_time_s": [(r"ms|msec|milliseconds?", 1e-3), (r"s|sec|secs|seconds?", 1.0),
                             (r"min|mins|minutes?", 60.0)],
    "measured_tflops_per_gpu": [(r"TFLOP/?S?(?:\s*/\s*s)?(?:\s*(?:/|per)\s*GPU)?", 1.0)],
    "measured_tokens_per_sec_per_gpu": [(_TOKENS_PER_S, 1.0)],
    "measured_mfu": [(r"%", 1.0)],
    "seq_len": [(r"tokens?|tok", 1.0)],
    "global_batch": [(r"sequences?|seqs?|samples?", 1.0)],
    "micro_batch": [(r"sequences?|seqs?|samples?", 1.0)],
    "n_gpus": [(r"GPUs?|accelerators?|devices?", 1.0)],
    "gpus_per_node": [(r"GPUs?\s*(?:/|per)\s*node|GPUs?", 1.0)],
    "n_layers": [(r"layers?|blocks?", 1.0)],
    "n_heads": [(r"(?:attention\s*)?heads?", 1.0)],
    "n_kv_heads": [(r"(?:kv|key[\s/-]*value)?\s*heads?", 1.0)],
    "vocab": [(r"tokens?", 1.0)],
    # mixture of experts (planner/run_moe.py)
    "n_active_params_B": [(r"B|bn|billions?", 1.0), (r"M|million", 1e-3), (r"T|trillion", 1e3)],
    "moe_experts": [(r"(?:routed\s*)?experts?", 1.0)],
    "moe_top_k": [(r"experts?(?:\s*per\s*token)?", 1.0)],
    "moe_shared_experts": [(r"(?:shared\s*)?experts?", 1.0)],
    "capacity_factor": [(r"x", 1.0)],
}
# column -> a multiplier letter after the number (seq_len's "4k" is 4096: context lengths are powers of two)
MULTIPLIERS: dict[str, dict[str, float]] = {
    "seq_len": {"k": 1024.0}, "vocab": {"k": 1e3}, "measured_tokens_per_sec_per_gpu": {"k": 1e3, "m": 1e6},
}
DEGREES = ("tp", "pp", "dp", "cp", "vpp", "ep", "etp")
# columns that count whole things: a fraction there ("0.5", "8.5") is an error, not a silent int()
COUNTS = frozenset(DEGREES + ("n_gpus", "gpus_per_node", "micro_batch", "global_batch", "n_layers", "hidden", "n_heads",
                              "n_kv_heads", "ffn_hidden", "vocab", "seq_len", "grad_accum", "gradient_accumulation_steps",
                              "moe_experts", "moe_top_k", "moe_ffn_hidden", "moe_shared_experts"))
# column -> the largest value the planner takes there (its own bounds: planner/scenario.py ExecutionPlan and
# Scenario, planner/model.py ModelSpec); a larger cell is a typo or another unit, refused naming the column
MAXIMA: dict[str, float] = {
    "n_gpus": 1_000_000, "gpus_per_node": 1024, "dp": 1_000_000, "tp": 1024, "pp": 10_000, "vpp": 1000, "cp": 1024,
    "ep": 100_000, "etp": 1024, "micro_batch": 1_000_000, "grad_accum": 1_000_000, "gradient_accumulation_steps": 1_000_000,
    "global_batch": 1e12, "n_layers": 10_000, "hidden": 1_000_000, "n_heads": 100_000, "n_kv_heads": 100_000,
    "ffn_hidden": 10_000_000, "vocab": 100_000_000, "seq_len": 100_000_000, "moe_experts": 1_000_000,
    "moe_top_k": 1_000_000, "moe_ffn_hidden": 10_000_000, "moe_shared_experts": 1024,
    # n_params_B: a million billion parameters; measured_mfu: a percentage at most 100; TFLOPs: 1000x a
    # B200's dense fp8 (4.5 PFLOPs; its product brief)
    "n_params_B": 1e6, "n_active_params_B": 1e6, "measured_mfu": 100.0, "measured_tflops_per_gpu": 4.5e6,
}
SMALLEST = 1e-9  # below this no count or measurement of a run ('1e-310': a speed from it overflows)
_NODES_TIMES = re.compile(r"(\d+)\s*nodes?\s*(?:x|×|\*|of)\s*(\d+)(?:\s*(?:GPUs?|accelerators?))?(?:\s*(?:/|per)\s*node)?",
                          re.I)


def bare(key: str, raw: str) -> tuple[str, float]:
    """(the cell's number text without its unit words, the factor into the column's unit)."""
    v = re.sub(r"\s*\([^()]*\)$", "", raw).strip()  # "64 GPUs (8 nodes)": the note in brackets
    if key in DEGREES:  # "TP8", "tp=8", "8-way", "8x"
        v = re.sub(rf"^{key}\s*[=:]?\s*", "", v, flags=re.I)
        v = re.sub(r"\s*-?\s*(?:way|x)$", "", v, flags=re.I)
    if key == "n_gpus":
        m = _NODES_TIMES.fullmatch(v)
        if m:
            return str(int(m.group(1)) * int(m.group(2))), 1.0
    factor = 1.0
    for pattern, scale in UNIT_WORDS.get(key, ()):
        stripped = re.sub(rf"(?<=[\d.\sA-Za-z])\s*(?:{pattern})$", "", v, flags=re.I)
        if stripped != v and re.search(r"\d", stripped):
            v, factor = stripped.strip(), scale
            break
    for letter, scale in MULTIPLIERS.get(key, {}).items():
        if re.fullmatch(rf".*\d\s*{letter}", v, re.I):
            return v[:-1].strip(), factor * scale
    return v, factor
