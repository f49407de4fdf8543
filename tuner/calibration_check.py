"""Is the fitted calibration better than none? Judged on trials it was not fitted on.

Two factors fitted on a short study's few trials (tuner/calibrate.py) can predict those very
trials well and every other configuration worse than the planner without them: an in-sample
error cannot tell. Each completed trial is predicted by the planner with the calibration fitted
on the OTHER trials (leave one trial out); the calibration fitted on all of them is applied (the
loop's predictions, the report, --calibration-out) only where that held-out error is below the
error of the calibration the study started from (the uncalibrated planner, unless --calibration
gave one) on the same trials. Otherwise the study keeps its starting calibration and says why.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from planner.settings import Calibration
from tuner.calibrate import Observation, fit_calibration, fit_each_left_out

METHOD = "leave-one-trial-out"


@dataclass(frozen=True)
class Measured:
    """One completed trial: its knobs, its default-calibration breakdown + measured step, its tokens/s."""

    knobs: dict
    obs: Observation
    tokens_per_s: float


def _abs_pct(predicted: float | None, measured: float) -> float | None:
    if not predicted or not measured:
        return None
    return 100.0 * abs(predicted - measured) / measured


def choose(trials: list[Measured], predict: Callable[[dict, Calibration], float | None],
           start: Calibration) -> tuple[Calibration, dict]:
    """(the calibration to apply, the check: n, both mean errors, which was kept and why).

    `predict(knobs, cal)`: the planner's tokens/s for knobs under cal."""
    baseline = "uncalibrated planner" if start == Calibration() else f"starting calibration ({start.source})"
    check = {"method": METHOD, "n": 0, "baseline": baseline, "baseline_mean_abs_pct": None,
             "held_out_mean_abs_pct": None, "kept": "baseline", "fitted": None, "why": ""}
    pairs = []  # (baseline error, held-out error) of each trial both predict
    # the fit on the others of each trial, all at once (tuner/calibrate.py: fit_calibration's numbers)
    held_out = fit_each_left_out([t.obs for t in trials]) if len(trials) > 1 else [None] * len(trials)
    for t, cal in zip(trials, held_out):
        base = _abs_pct(predict(t.knobs, start), t.tokens_per_s)
        held = _abs_pct(predict(t.knobs, cal), t.tokens_per_s) if cal is not None else None
        if base is not None and held is not None:
            pairs.append((base, held))
    if len(trials) < 2:
        check["n"] = len(trials)
        check["why"] = "one completed trial: a fit on the others needs two at least"
        if trials:
            check["baseline_mean_abs_pct"] = _abs_pct(predict(trials[0].knobs, start), trials[0].tokens_per_s)
        return start, check
    fitted = fit_calibration([t.obs for t in trials])
    check["fitted"] = {"compute": fitted.compute, "network": fitted.network}
    check["n"] = len(pairs)
    if not pairs:
        check["why"] = "no trial the planner predicts under both calibrations"
        return start, check
    base_pct = statistics.fmean(p[0] for p in pairs)
    held_pct = statistics.fmean(p[1] for p in pairs)
    check.update(baseline_mean_abs_pct=base_pct, held_out_mean_abs_pct=held_pct)
    if held_pct < base_pct:
        check.update(kept="fitted", why=f"it predicts trials it was not fitted on better than the {baseline}")
        return fitted, check
    check["why"] = (f"fitted on the other trials, it predicts each trial worse on average than the {baseline}: "
                    "it is not applied")
    return start.model_copy(update={"source": f"{start.source}: the fit on {len(trials)} trials was not applied "
                                              f"(held-out error {held_pct:.0f}% vs {base_pct:.0f}%)"}), check


def line(check: dict, cal: dict) -> str:
    """The report's one line on it."""
    n, base, held = check.get("n", 0), check.get("baseline_mean_abs_pct"), check.get("held_out_mean_abs_pct")
    if held is None:
        b = f"{check['baseline']} {base:.0f}%" if base is not None else check["baseline"]
        return f"calibration: {b} over {n} trial{'s' if n != 1 else ''}; not fitted ({check['why']})"
    head = (f"calibration checked on trials it was not fitted on ({check['method']}, {n} trials): "
            f"{check['baseline']} {base:.0f}%, fitted {held:.0f}%")
    if check["kept"] == "fitted":
        return f"{head}: applied (compute x{cal['compute']:.3g}, network x{cal['network']:.3g})"
    f = check.get("fitted") or {}
    return (f"{head}: not applied, the {check['baseline']} is kept (the fit was compute x{f.get('compute', 1):.3g}, "
            f"network x{f.get('network', 1):.3g})")
