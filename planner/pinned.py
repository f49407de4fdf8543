"""Structural checks of pinned knobs: a request that no plan can ever satisfy is an error that
names its cause (tp that does not divide the heads, a batch that does not divide), not a table of
"closest misses" (issue 13). Pure arithmetic on the scenario, the model and the system.
"""

from __future__ import annotations

from planner.errors import PlanError
from planner.model import ModelSpec
from planner.scenario import Scenario
from planner.system import System


def check_structure(spec: ModelSpec, system: System, scenario: Scenario, global_batch: int | None) -> None:
    """Raise a PlanError naming the first pinned knob that rules out every plan.

    `global_batch` is the scenario's global batch in sequences (None: searched)."""
    tp, pp, cp = scenario.tp, scenario.pp, scenario.cp  # pp > n_layers: search._check_pinned
    if tp is not None and spec.n_heads % tp:
        raise PlanError("tp", f"{tp} does not divide the {spec.n_heads} attention heads of {spec.name}")
    if global_batch is None:
        return
    mb, ga = scenario.micro_batch, scenario.grad_accum
    dp = system.gpus // (tp * pp * cp) if None not in (tp, pp, cp) else None
    parts = [(name, value) for name, value in (("micro_batch", mb), ("grad_accum", ga), ("dp", dp))
             if value is not None]
    product = 1
    for n, (name, value) in enumerate(parts):
        product *= value
        if global_batch % product:
            names = " x ".join(p for p, _ in parts[: n + 1])
            values = " x ".join(str(v) for _, v in parts[: n + 1])
            shown = f"{names} = {values} = {product}" if n else f"{name} {value}"
            raise PlanError("global_batch", f"{global_batch} sequences is not divisible by {shown}")
