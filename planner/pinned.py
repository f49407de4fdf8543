"""Pinned knobs that no plan can satisfy: an error that names its cause (tp that does not divide
the heads, a batch that does not divide), not a table of "closest misses" (issue 13).

The rules are those of planner/rules.py, checked on the scenario's pinned knobs alone (a rule
whose inputs are not all pinned is left to the search, unless its relaxed values stand in);
the one check of its own is the batch split on a partial pin (micro_batch alone, ...).
"""

from __future__ import annotations

from planner import rules
from planner.errors import PlanError
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan, Scenario
from planner.system import System


def pinned_knobs(system: System, scenario: Scenario) -> dict:
    """The plan knobs the scenario pins (dp too, where tp, pp and cp are all pinned)."""
    knobs = {k: v for k in ExecutionPlan.model_fields if k in Scenario.model_fields
             and (v := getattr(scenario, k)) is not None}
    tp, pp, cp = scenario.tp, scenario.pp, scenario.cp
    if None not in (tp, pp, cp) and system.gpus % (tp * pp * cp) == 0:
        knobs["dp"] = system.gpus // (tp * pp * cp)
    return knobs


def check_pinned(spec: ModelSpec, system: System, scenario: Scenario, seq_len: int,
                 global_batch: int | None) -> None:
    """Raise a PlanError naming the first pinned knob that rules out every plan.

    `global_batch` is the scenario's global batch in sequences (None: searched)."""
    knobs = pinned_knobs(system, scenario)
    rules.check(knobs, spec=spec, system=system, seq_len=seq_len, global_batch=global_batch)
    if global_batch is None:
        return
    parts = [(name, knobs[name]) for name in ("micro_batch", "grad_accum", "dp") if name in knobs]
    product = 1
    for n, (name, value) in enumerate(parts):
        product *= value
        if global_batch % product:
            names = " x ".join(p for p, _ in parts[: n + 1])
            values = " x ".join(str(v) for _, v in parts[: n + 1])
            shown = f"{names} = {values} = {product}" if n else f"{name} {value}"
            raise PlanError("global_batch", f"{global_batch} sequences is not divisible by {shown}")
