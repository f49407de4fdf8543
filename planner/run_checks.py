"""Checks of a runs-file row that keep a damaged cell out of the scores (planner/runs.py uses these).

A garbage cell ('-7', '1e400', 'abc', '1e30') is refused naming its column even where another column
gives the same fact and the cell would not be read (a preset's vocab, an MFU beside a measured speed):
a row that says two things, one of them garbage, is not scored. A measured speed or peak memory that no
GPU can reach, or so slow that it is a unit slip, is kept out too.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

from planner import flops, run_text
from planner.errors import PlanError

# columns read only as numbers (planner/run_text.number); global_batch also takes '4M tokens' (run_layout)
NUMBER_COLUMNS = ("n_params_B", "n_layers", "hidden", "n_heads", "n_kv_heads", "ffn_hidden", "vocab", "seq_len",
                  "n_gpus", "gpus_per_node", "tp", "pp", "dp", "micro_batch", "measured_tflops_per_gpu", "measured_mfu",
                  "measured_tokens_per_sec_per_gpu", "measured_iter_time_s", "measured_peak_mem_GB",
                  "days_per_100B_tokens")
MIN_MFU = 1e-3  # the slowest real row runs at 1.5% MFU (seed 003's offload runs): 0.1% is a unit slip
MAX_MEMORY_SHARE = 2.0  # the largest published peak is 0.95 of the GPU's memory: twice it is another unit


def check_cells(row) -> None:
    """A PlanError naming the first numeric cell that is not a positive, finite, small enough number."""
    for key in NUMBER_COLUMNS:
        run_text.number(row, key)


def peak_memory_gib(row, system) -> float | None:
    """measured_peak_mem_GB, refused above MAX_MEMORY_SHARE x the GPU's memory (unified memory: no bound)."""
    mem = run_text.number(row, "measured_peak_mem_GB")
    if mem is not None and not system.unified_memory and mem > MAX_MEMORY_SHARE * system.gpu.hbm_gib:
        raise PlanError("measured_peak_mem_GB", f"row {row.get('id')}: {mem:g} GB is more than "
                        f"{MAX_MEMORY_SHARE:g}x the {system.gpu.id}'s {system.gpu.hbm_gib:g} GiB (check the units)")
    return mem


def speed_out_of_range(spec, plan, system, tps: float | None) -> str | None:
    """Why a row's measured speed is impossible (its model FLOPs per GPU above the GPU's dense peak in the
    row's precision, or below MIN_MFU of it; 6N + attention, planner/flops.py), else None: a typo, another
    unit or a sparse/per-node figure."""
    if not tps:
        return None
    try:
        peak = system.gpu.peak_tflops(plan.precision)
    except ValueError:  # a precision the GPU lacks is refused elsewhere
        return None
    achieved = tps * float(flops.model_flops_per_token(spec, plan.seq_len)) / 1e12
    if achieved < MIN_MFU * peak:  # '1420' seconds for 1420 ms: a thousand times too slow
        return (f"measured {tps:,.3g} tokens/s per GPU = {achieved:.3g} TFLOPs/GPU of model FLOPs, below "
                f"{MIN_MFU:.1%} of the GPU's {plan.precision} peak {peak:,.0f}: not scored (check the row's units)")
    if achieved <= peak:
        return None
    return (f"measured {tps:,.0f} tokens/s per GPU = {achieved:,.0f} TFLOPs/GPU of model FLOPs, above the "
            f"GPU's dense {plan.precision} peak {peak:,.0f}: not scored (check the row's units)")


def stated_speeds(row, plan, iter_time_s: float | None) -> list[float]:
    """Tokens/s per GPU of each other measurement the row states (its iteration time, its days per 100B
    tokens), to be checked like the speed scored: a garbage one beside a good speed is not scored either."""
    out = [plan.global_batch * plan.seq_len / (iter_time_s * plan.gpus)] if iter_time_s else []
    days = run_text.number(row, "days_per_100B_tokens")
    return out + ([1e11 / (days * 86400) / plan.gpus] if days else [])


def field_of(error: ValidationError) -> tuple[str, str]:
    """(the field, the reason) of a model's first refusal; a check across fields (ModelSpec's 'hidden (100) must
    be divisible by n_heads (32)') has no location: its field is the one its message starts with."""
    first = error.errors()[0]
    reason = str(first["msg"]).removeprefix("Value error, ")
    field = ".".join(str(p) for p in first.get("loc", ()))
    if not field:
        from planner.model import ModelSpec
        from planner.scenario import ExecutionPlan

        m = re.match(r"([a-z][a-z0-9_]*)\b", reason)
        known = set(NUMBER_COLUMNS) | set(ModelSpec.model_fields) | set(ExecutionPlan.model_fields)
        field = m.group(1) if m and m.group(1) in known else "row"
    return field, reason
