"""The planner's own top-k for a study's space, from ONE `planner.api.estimate` call.

The knobs the space fixes (one choice) are pinned in the scenario; tp/pp are pinned to 1 when
the space does not search them. The planner does not search precision: when the space offers
several, the scenario pins the one with the highest peak on the measured device (a CPU whose
probe says bf16 is slower gets fp32); the others are left to the sampler. The estimate's
ranking (its tie rule included) is kept; plans outside the space are skipped.
"""

from __future__ import annotations

from planner.api import estimate
from planner.errors import PlanError
from planner.scenario import Scenario
from planner.settings import Settings
from planner.system import System


def fastest_precision(system: System, choices: tuple) -> str:
    def peak(p: str) -> float:
        try:
            return system.gpu.peak_tflops(p) or 0.0
        except ValueError:
            return 0.0

    return max(choices, key=peak)


def planner_top_k(base: Scenario, system: System, settings: Settings, choices: dict[str, tuple],
                  k: int, *, global_batch: int | None = None) -> list[dict]:
    """Up to k configurations of the space (knob -> value), the planner's best first."""
    if k <= 0:
        return []
    pins = {knob: vals[0] for knob, vals in choices.items() if len(vals) == 1}
    for knob in ("tp", "pp"):
        pins.setdefault(knob, 1)
    if "precision" in choices and "precision" not in pins:
        pins["precision"] = fastest_precision(system, choices["precision"])
    if global_batch is not None:
        pins.pop("grad_accum", None)
    pins["stack"] = "bundled"  # trials run on the bundled trainer: its profile, its features
    scenario = base.model_copy(update=pins)
    try:
        report = estimate(scenario, system=system, settings=settings, top=None, batch_rule=False)
    except PlanError:
        return []
    out: list[dict] = []
    for est in report.results:
        knobs = {knob: getattr(est.plan, knob) for knob in choices}
        if all(knobs[n] in vals for n, vals in choices.items()) and knobs not in out:
            out.append(knobs)
        if len(out) == k:
            break
    return out


def _label(knobs: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in knobs.items())


def network_effect(base: Scenario, measured: System, assumed: System, settings: Settings,
                   choices: dict[str, tuple], global_batch: int | None = None) -> str:
    """What the measured bus bandwidth changed in the planner's ranking (one line)."""
    if measured.measured_intranode_busbw_gbps is None and measured.measured_internode_busbw_gbps is None:
        return "network not measured: the planner ranks with the catalog's link speeds"
    a = planner_top_k(base, assumed, settings, choices, 3, global_batch=global_batch)
    m = planner_top_k(base, measured, settings, choices, 3, global_batch=global_batch)
    if not a or not m:
        return "no plan of the space fits: the network changes nothing"
    gbps = measured.measured_intranode_busbw_gbps or measured.measured_internode_busbw_gbps
    link = assumed.intranode_gbps if assumed.nodes == 1 else assumed.internode_gbps
    head = f"measured busbw plateau {gbps:.1f} Gbps (catalog link {link:.0f} Gbps): "
    if a[0] == m[0]:
        same = "same top 3" if a == m else "top 3 reordered"
        return head + f"the planner's first choice is unchanged ({_label(m[0])}; {same})"
    return head + f"the planner's first choice moved from {_label(a[0])} to {_label(m[0])}"
