"""Structural checks of pinned knobs: a request that no plan can ever satisfy is an error that
names its cause (pp deeper than the model, a batch that does not divide), not a table of
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
    tp, pp, vpp = scenario.tp, scenario.pp, scenario.vpp
    if pp is not None and pp > spec.n_layers:
        raise PlanError("pp", f"{pp} pipeline stages for {spec.n_layers} layers of {spec.name}: "
                        f"each stage needs at least one layer (pp <= {spec.n_layers})")
    if pp is not None and vpp is not None and pp * vpp > spec.n_layers:
        raise PlanError("vpp", f"pp x vpp = {pp} x {vpp} = {pp * vpp} virtual stages for "
                        f"{spec.n_layers} layers of {spec.name} (at most {spec.n_layers})")
    if tp is not None and spec.n_heads % tp:
        raise PlanError("tp", f"{tp} does not divide the {spec.n_heads} attention heads of {spec.name}")
    if global_batch is None:
        return
    mb, ga = scenario.micro_batch, scenario.grad_accum
    dp = system.gpus // (tp * pp * (scenario.cp or 1)) if tp is not None and pp is not None else None
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
