"""Check `network_gbps_needed` / `network_share` (planner/network_need.py) against the planner itself.

    python -m validation.network_check [--quick]

For each scenario (models x clusters x GPU counts x inter-node bandwidths) the best plans of `plan estimate`
are planned again, pinned, at the bandwidth each says it needs, at 0.9x that, at half and twice the
nodes' bandwidth and on an unlimited network. Prints numbers, not a test: each violation, then a count per
check. Checks:
- at the needed bandwidth the step is within the tolerance (1%) of the unlimited network's; at 0.9x it is not;
- `network_share` is 1 - step(unlimited) / step(the nodes' bandwidth);
- a faster network never costs a larger share; one node (or no inter-node traffic) needs 0.
"""

from __future__ import annotations

import argparse
import itertools

from planner import api, network_need
from planner.scenario import NOT_PINNED, Scenario

MODELS = ("1.3b", "13b", "llama2-70b", "gpt3-175b")
CLUSTERS = ("dgx-a100", "dgx-h100", "dgx-v100")
GPUS = (8, 64, 512)
GBPS = (100.0, 400.0, 3200.0)
UNLIMITED_GBPS = 1e7


def _pinned(e, scenario: Scenario, gbps: float) -> Scenario:
    plan = {k: v for k, v in e.plan.model_dump().items() if k not in NOT_PINNED}
    return scenario.model_copy(update={**plan, "internode_gbps": gbps})


def _step(scenario: Scenario) -> float | None:
    r = api.estimate(scenario, top=1, include_rejected=True).results
    return r[0].time.step_time_s if r and r[0].time else None


def check(scenario: Scenario, top: int) -> tuple[dict[str, int], list[str]]:
    counts = {k: 0 for k in ("plans", "within at needed", "outside at 0.9x", "share", "monotone", "one node 0")}
    bad: list[str] = []
    report = api.estimate(scenario, top=top)
    for e in (x for x in report.results if x.fits):
        counts["plans"] += 1
        perf, name = e.performance, f"{scenario.model} {scenario.cluster} x{scenario.gpus} @{scenario.internode_gbps:g}"
        need, share = perf.network_gbps_needed, perf.network_share
        free = _step(_pinned(e, scenario, UNLIMITED_GBPS))
        if free is None:
            bad.append(f"{name}: plan {e.plan.stack} tp{e.plan.tp} pp{e.plan.pp} not found again")
            continue
        tol = free * (1.0 + network_need.TOLERANCE) * (1.0 + 1e-9)
        if scenario.gpus <= report.system.gpus_per_node:
            counts["one node 0"] += need == 0 and share == 0
            if not (need == 0 and share == 0):
                bad.append(f"{name}: one node but needs {need:.0f} Gbps, share {share:.3f}")
            continue
        at_need = _step(_pinned(e, scenario, max(need, 1e-3))) if need > 0 else free
        counts["within at needed"] += at_need <= tol
        if at_need > tol:
            bad.append(f"{name}: at the {need:.0f} Gbps it needs the step is {at_need / free - 1:+.2%} of unlimited")
        if need > 0:
            below = _step(_pinned(e, scenario, need * 0.9))
            counts["outside at 0.9x"] += below > tol
            if below <= tol:
                bad.append(f"{name}: at 0.9x the {need:.0f} Gbps it needs the step is already within the tolerance")
        else:
            counts["outside at 0.9x"] += 1
        expected = 1.0 - free / e.time.step_time_s
        counts["share"] += abs(share - max(expected, 0.0)) < 1e-6
        if abs(share - max(expected, 0.0)) >= 1e-6:
            bad.append(f"{name}: share {share:.4f}, 1 - unlimited/step {expected:.4f}")
        half, double = (_step(_pinned(e, scenario, scenario.internode_gbps * f)) for f in (0.5, 2.0))
        ok = half >= e.time.step_time_s * (1 - 1e-9) and double <= e.time.step_time_s * (1 + 1e-9)
        counts["monotone"] += ok
        if not ok:
            bad.append(f"{name}: step {half:.3f} / {e.time.step_time_s:.3f} / {double:.3f} s at 0.5x / 1x / 2x")
    return counts, bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two models, one cluster, top 1")
    args = ap.parse_args(argv)
    models, clusters, top = (MODELS[:2], CLUSTERS[:1], 1) if args.quick else (MODELS, CLUSTERS, 3)
    total: dict[str, int] = {}
    violations: list[str] = []
    for model, cluster, gpus, gbps in itertools.product(models, clusters, GPUS, GBPS):
        counts, bad = check(Scenario(model=model, cluster=cluster, gpus=gpus, internode_gbps=gbps), top)
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
        violations += bad
    for line in violations:
        print("VIOLATION", line)
    plans = total.pop("plans")
    print(f"{plans} plans checked; " + ", ".join(f"{k}: {v}" for k, v in total.items())
          + f"; {len(violations)} violations")
    return 1 if violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
