"""Seed rows that repeat one stated configuration: scored against the spread of their repeats.

Seed 002 measured the same configuration on several days (Megatron 52B, tp 4, pp 16, micro batch 4,
global batch 1024 on 64 V100: 129 s, 217 s, 125 s and 225 s per step, rows s002-22..25) and says
why they differ: "each allocation may give performance that can vary as much as 40% ... An identical
test scored 40% faster or slower on the same allocation at different times of the day". The planner
predicts one speed per configuration, so a prediction is consistent with the data when it lies in
the seed's +-band around ANY of the configuration's measurements: each row of a replicate group is
scored against the spread [min, max] of the group, widened by the band. A configuration measured once
is scored against its own measurement, as before. The CV errors themselves (MAPE, bias, per source)
are unchanged; only the count of seed rows inside the band uses this rule.

Replicates: rows of one source (one table) with the same model, system and execution plan (every
stated configuration column equal); nothing else (dates, notes) is used to group them.
"""

from __future__ import annotations

from collections import defaultdict

from planner.runs import Run


def _key(r: Run) -> tuple:
    return (r.source, r.spec.model_dump_json(), r.system.model_dump_json(), r.plan.model_dump_json())


def replicate_groups(runs: list[Run]) -> dict[str, list[Run]]:
    """Run id -> the scored runs of its source with the identical stated configuration (itself included)."""
    by: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        if r.scored:
            by[_key(r)].append(r)
    return {r.id: group for group in by.values() for r in group}


def inside_band(runs: list[Run], errors: dict[str, float], band: float) -> dict[str, bool]:
    """Run id -> whether its CV prediction (measured x (1 + error)) is within +-band of the
    measurement of any replicate of its configuration."""
    groups = replicate_groups(runs)
    out: dict[str, bool] = {}
    for r in runs:
        if r.id not in errors or r.id not in groups:
            continue
        predicted = r.measured_tokens_per_s_per_gpu * (1.0 + errors[r.id])
        out[r.id] = any(abs(predicted / g.measured_tokens_per_s_per_gpu - 1.0) <= band + 1e-12 for g in groups[r.id])
    return out
