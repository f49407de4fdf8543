"""Leave-one-STACK-out: how well the planner does on a framework it has no data for.

Each stack's rows are predicted by the pooled fit of the other stacks' rows (the `generic` profile,
planner/profile_fit.py), never by a fit that saw that stack: the honest error of `generic`, and a
proxy for a stack whose own data are few or unrepresentative (the hf profile rests on two seed logs
of one cluster). Also: how far each fitted stack's factors sit from the pooled ones.

    python -m validation.stack_cv
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from hardware.stacks import StackProfile
from planner import profile_fit
from planner.runs import Run

GENERIC = profile_fit.GENERIC


def leave_one_stack_out(runs: list[Run], priors: dict[str, StackProfile]) -> dict[str, float]:
    """Run id -> predicted/measured tokens/s - 1, each stack's rows predicted by the `generic`
    (pooled) profile fitted on the other stacks' rows only."""
    scored = [r for r in runs if r.scored and r.layout_stated]
    errors: dict[str, float] = {}
    for stack in sorted({r.plan.stack for r in scored} - {GENERIC}):
        train = [r for r in scored if r.plan.stack != stack]
        test = [r for r in scored if r.plan.stack == stack]
        profiles = profile_fit.fit(train, {**priors, GENERIC: priors[GENERIC]})
        moved = [_on(r, GENERIC) for r in test]
        for r, ratio in zip(test, profile_fit.predict_ratio(moved, profiles)):
            errors[r.id] = float(ratio - 1.0)
    return errors


def _on(run: Run, stack: str) -> Run:
    from dataclasses import replace

    return replace(run, plan=run.plan.model_copy(update={"stack": stack}))


def factor_distance(profiles: dict[str, StackProfile]) -> dict[str, float]:
    """Stack -> RMS of log(factor / pooled factor) over the multiplicative time factors."""
    names = [p[0] for p in profile_fit.PARAMS if p[0].endswith("_factor")]
    pooled = np.array([getattr(profiles[GENERIC], n) for n in names])
    return {s: float(np.sqrt(np.mean(np.log(np.array([getattr(p, n) for n in names]) / pooled) ** 2)))
            for s, p in sorted(profiles.items()) if s != GENERIC}


def report(runs: list[Run], priors: dict[str, StackProfile], final: dict[str, StackProfile]) -> float | None:
    """Print the leave-one-stack-out MAPE per stack (published rows; seed rows apart) and each stack's
    distance from the pooled factors; return the MAPE over all published rows (generic's error)."""
    errors = leave_one_stack_out(runs, priors)
    by: dict[tuple[str, bool], list[float]] = defaultdict(list)
    for r in runs:
        if r.id in errors:
            by[(r.plan.stack, r.source.startswith("seed"))].append(errors[r.id])
    dist = factor_distance(final)
    print("Leave-one-stack-out (each stack's rows predicted by the pooled fit of the other stacks):")
    for (stack, seed), e in sorted(by.items()):
        print(f"  stack {stack:20} {'seed' if seed else 'published':9} rows {len(e):4}  MAPE {100 * np.mean(np.abs(e)):5.1f}%"
              f"  bias {100 * np.mean(e):+6.1f}%")
    for stack, d in dist.items():
        print(f"  stack {stack:20} factors vs pooled: RMS log ratio {d:.2f}  "
              + " ".join(f"{p[0].removesuffix('_time_factor')}={getattr(final[stack], p[0]):.3g}"
                         for p in profile_fit.PARAMS))
    pub = [v for (s, seed), e in by.items() if not seed for v in e]
    if not pub:
        return None
    mape = 100 * float(np.mean(np.abs(pub)))
    print(f"  published rows: MAPE {mape:.1f}% ({len(pub)} rows): the stated error of the generic profile")
    return mape


if __name__ == "__main__":
    from hardware.catalog import load_catalog
    from validation.fit_profiles import load_all

    runs, priors = load_all(), load_catalog().stacks
    report(runs, priors, profile_fit.fit(runs, priors))
