"""The end of a study: the top candidates re-measured, interleaved, and ranked with the
planner's tie rule, the noise taken into account.

One trial of the tiny model on a shared 2-core machine can be 2.5x off its repeat
(notes/cpu-runs.md), so the best single measurement is often luck. The top candidates are
run again in rounds (A B C A B C: drift in the machine's load hits all of them alike); each
gets the median of its measurements and their spread. Candidates whose medians differ by less
than the noise (or the planner's 2% tie window, whichever is larger) are ties, and a tie goes
to the simpler plan with the planner's own rule (planner/api.py `_rank`, planner/search.py
`simplicity`), not a second copy of it.
"""

from __future__ import annotations

import math
import statistics
from types import SimpleNamespace

import numpy as np
from optuna.trial import FrozenTrial, TrialState

from planner import api
from planner.layout import Layout
from planner.scenario import ExecutionPlan
from tuner.activity import REMEASURING, LogWatch

FINAL_KEY = "final_ranking"
TOP_N = 3


def tie_order(knobs: list[dict], scores: list[float], window: float = api.TIE_FRACTION) -> list[int]:
    """Indices best first: the planner's ranking (`api._rank`: tiers of `window` from the best,
    the simpler plan first inside a tier). A window wider than the planner's 2% is applied by
    a monotone rescaling of the scores: tier = floor(log(best/s) / log1p(window))."""
    if not knobs:
        return []
    plans = [ExecutionPlan(**{k: v for k, v in kn.items() if k in ExecutionPlan.model_fields}) for kn in knobs]
    lay = Layout.from_plans(plans)
    power = math.log1p(api.TIE_FRACTION) / math.log1p(max(window, api.TIE_FRACTION))
    s = np.maximum(np.nan_to_num(np.asarray(scores, dtype=float), nan=0.0), 1e-300) ** power
    n = len(plans)
    found = SimpleNamespace(mem={"capacity_bytes": np.zeros(n), "total_bytes": np.zeros(n)})
    return [int(i) for i in api._rank(lay, found, np.arange(n), {"tokens_per_s": s}, "tokens_per_s")]


def spread(values: list[float]) -> float | None:
    """Relative half-range of repeated measurements (None with one: unknown, not 0)."""
    if len(values) < 2:
        return None
    return (max(values) - min(values)) / (2 * statistics.median(values))


def completed(study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.value]


def candidates(study, n: int = TOP_N) -> list[FrozenTrial]:
    """The n best distinct configurations measured so far (the tie rule at 2%)."""
    done = completed(study)
    order = tie_order([t.user_attrs["knobs"] for t in done], [t.value for t in done])
    out, seen = [], set()
    for i in order:
        key = done[i].user_attrs.get("config_key")
        if key not in seen:
            seen.add(key)
            out.append(done[i])
    return out[:n]


def rank_final(study, remeasured: dict[str, list[float]]) -> dict:
    """The final ranking of the re-measured candidates, stored on the study."""
    top = [t for t in completed(study) if t.user_attrs.get("config_key") in remeasured]
    top = list({t.user_attrs["config_key"]: t for t in sorted(top, key=lambda t: t.number)}.values())
    rows = []
    for t in top:
        samples = [t.value, *remeasured[t.user_attrs["config_key"]]]
        rows.append({"trial": t.number, "config_key": t.user_attrs["config_key"], "knobs": t.user_attrs["knobs"],
                     "samples_tokens_per_s": samples, "median_tokens_per_s": statistics.median(samples),
                     "runs": len(samples), "spread_pct": None if len(samples) < 2 else 100 * spread(samples)})
    spreads = [r["spread_pct"] / 100 for r in rows if r["spread_pct"] is not None]
    noise = statistics.median(spreads) if spreads else 0.0
    # the medians are surer than one run: their noise shrinks as 1/sqrt(runs)
    runs = statistics.median(len(r["samples_tokens_per_s"]) for r in rows) if rows else 1
    window = max(api.TIE_FRACTION, noise / math.sqrt(runs))
    order = tie_order([r["knobs"] for r in rows], [r["median_tokens_per_s"] for r in rows], window)
    final = {"rows": [rows[i] for i in order], "noise_pct": 100 * noise, "tie_window_pct": 100 * window, "runs": runs,
             "n_completed": len(completed(study))}
    study.set_user_attr(FINAL_KEY, final)
    return final


def reserve_s(tuner, rounds: int) -> float:
    """Budget kept for the re-measurements: `rounds` runs of each current candidate, at most
    a quarter of the budget (the search itself comes first)."""
    top = candidates(tuner.study)
    if rounds <= 0 or len(top) < 2:
        return 0.0
    need = rounds * sum(tuner.expected_s(t.user_attrs["knobs"]) for t in top)
    return min(need, 0.25 * tuner.budget.total_s)


def remeasure(tuner, rounds: int) -> dict | None:
    """Run the top candidates again, interleaved, as the budget allows; rank them."""
    from tuner.budget import trial_timeout_s

    top = candidates(tuner.study)
    if rounds <= 0 or len(top) < 2:
        return None
    stored = tuner.study.user_attrs.get("remeasured") or {}
    samples: dict[str, list[float]] = {t.user_attrs["config_key"]: list(stored.get(t.user_attrs["config_key"], []))
                                       for t in top}
    for _ in range(rounds):
        for t in top:
            knobs = t.user_attrs["knobs"]
            expected = tuner.expected_s(knobs)
            if not tuner.budget.allows(expected):
                continue
            line = f"the top candidates: trial #{t.number}, its run {len(samples[t.user_attrs['config_key']]) + 2}"
            tuner.on_phase(REMEASURING, line)
            kw = {k: t.user_attrs[a] for k, a in (("deepspeed_json", "deepspeed_config_json"),
                                                  ("fsdp_json", "fsdp_config_json")) if t.user_attrs.get(a)}
            watch = LogWatch(tuner.on_phase, REMEASURING, line)  # its steps, as a trial's show in report.running
            try:
                out = tuner.runner(knobs, trial_number=t.number, timeout_s=min(trial_timeout_s(expected),
                                                                               tuner.budget.left_s),
                                   on_start=watch.start, **kw)
            finally:
                watch.stop()
            tuner.remeasurements += 1
            if out.status == "ok" and out.tokens_per_s:
                samples[t.user_attrs["config_key"]].append(out.tokens_per_s)
                tuner.study.set_user_attr("remeasured", {**stored, **samples})
            if tuner.on_trial:
                tuner.on_trial(tuner, remeasure_line(t.number, out, len(samples[t.user_attrs["config_key"]]) + 1))
    return rank_final(tuner.study, samples)


def remeasure_line(number: int, out, runs: int) -> str:
    """A progress line for one re-measurement of trial `number` (the progress printed the study's
    last trial again instead: '#7 ok ...' three times while #2 and #3 were the ones re-run)."""
    if out.status == "ok" and out.tokens_per_s:
        return f"  re-measured #{number}: {out.tokens_per_s:,.0f} tok/s (its run {runs})"
    why = str(out.error or "")[:100]
    return f"  re-measured #{number}: {out.status}{': ' + why if why else ''} (not counted)"


def final_ranking(study) -> dict | None:
    """The stored final ranking, when no trial completed after it was made."""
    final = study.user_attrs.get(FINAL_KEY)
    if final and final.get("rows") and final.get("n_completed") == len(completed(study)):
        return final
    return None


def best_trial(study) -> FrozenTrial | None:
    """The winner: first of the final ranking, else the best measurement (2% tie rule)."""
    final = final_ranking(study)
    if final is not None:
        by_number = {t.number: t for t in completed(study)}
        if final["rows"][0]["trial"] in by_number:
            return by_number[final["rows"][0]["trial"]]
    top = candidates(study, 1)
    return top[0] if top else None


def why_it_won(study) -> str:
    """One line: the winner against the best of every other backend (and the noise)."""
    from tuner.study_store import StudyMeta

    meta = StudyMeta.load(study)

    def backend_for(sharding: str) -> str:
        return meta.run_backend({"sharding": sharding})

    best = best_trial(study)
    if best is None:
        return ""
    final = final_ranking(study) or {}
    med = {r["trial"]: r["median_tokens_per_s"] for r in final.get("rows", [])}
    win_b = backend_for(best.user_attrs["knobs"]["sharding"])
    win_v = med.get(best.number, best.value)
    window = final.get("tie_window_pct", 100 * api.TIE_FRACTION)
    parts = []
    for b in sorted({backend_for(t.user_attrs["knobs"]["sharding"]) for t in completed(study)} - {win_b}):
        rival = max((t for t in completed(study) if backend_for(t.user_attrs["knobs"]["sharding"]) == b),
                    key=lambda t: med.get(t.number, t.value))
        rv = med.get(rival.number, rival.value)
        gap = 100 * (win_v / rv - 1)
        verdict = (f"a tie inside the {window:.0f}% noise window, which the planner's rule gives to the simpler plan"
                   if abs(gap) <= window else f"{gap:+.0f}%")
        parts.append(f"vs best {b} (trial {rival.number}, {rv:,.0f} tok/s): {verdict}")
    head = f"{win_b} won: trial {best.number}, {win_v:,.0f} tokens/s" + (
        " (median of re-measurements)" if best.number in med else "")
    if not parts:  # one backend: against the runner-up configuration
        rows = final.get("rows", [])
        if len(rows) > 1:
            gap = 100 * (win_v / rows[1]["median_tokens_per_s"] - 1)
            verdict = (f"inside the {window:.0f}% noise window: a tie the planner's rule gives to the simpler plan"
                       if abs(gap) <= window else f"{gap:+.0f}%")
            parts.append(f"vs trial {rows[1]['trial']} ({rows[1]['median_tokens_per_s']:,.0f} tok/s): {verdict}")
        parts.append("the only backend with a result" if len({backend_for(s) for s in meta.space.get("sharding", [])}) > 1
                     else f"{win_b} is the only backend of the space")
    return head + "; " + "; ".join(parts)

