"""Fit the stack profiles (catalog/stacks/*.toml) on the developers' runs, with leave-one-source-out
cross-validation, and print only cross-validated errors.

    python validation/fit_profiles.py            # print the CV tables
    python validation/fit_profiles.py --write    # also rewrite catalog/stacks/*.toml

A second table holds out a whole origin at a time (a paper, repository or seed log with all its tables,
validation/origin_cv.py): what a run from a team the fit never saw meets, so the error written as each
stack's cv_mape_pct (printed with every speed) is that one.

Data: validation/data/published_dev.csv + seed_runs.csv (a source = one table of one origin).
Each source is predicted by profiles fitted on the other sources only; the numbers written into
the profiles (cv_mape_pct, cv_by_source) are those CV errors. The final profiles are fitted on
every row.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hardware.catalog import load_catalog  # noqa: E402
from hardware.stacks import profile_to_toml  # noqa: E402
from planner import profile_fit  # noqa: E402
from planner.runs import load_runs  # noqa: E402
from planner.validate import _groups  # noqa: E402
from validation import origin_cv, replicates, stack_cv  # noqa: E402

DATA = REPO / "validation" / "data"
STACKS_DIR = REPO / "catalog" / "stacks"
# Targets of issue 10 (a benchmark, not a test): CV MAPE <= 15% overall, no source > 25%.
TARGET_MAPE, TARGET_SOURCE = 15.0, 25.0
FIT_METHOD = ("bounded ridge least squares on relative step-time error (planner/profile_fit.py); cv_mape_pct: "
              "leave-one-ORIGIN-out CV over the published rows of this stack (hf: leave-one-source-out over its "
              "seed rows); cv_by_source: leave-one-source-out per source (seed logs +-40% day to day)")
CV_COMMENT = ("cv_mape_pct (the +-N% printed with every speed) is the leave-one-ORIGIN-out error: each paper,\n"
              "repository or seed log predicted by a fit on the other origins only (validation/origin_cv.py), what\n"
              "a run from a team the fit never saw meets; cv_by_source holds the leave-one-source-out errors.")
SEED_BAND = 0.40  # seed 002: one configuration varied +-40% between allocations on Jean Zay


def load_all():
    return load_runs(DATA / "published_dev.csv") + load_runs(DATA / "seed_runs.csv")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite catalog/stacks/*.toml with the fit")
    args = ap.parse_args(argv)
    runs = load_all()
    priors = load_catalog().stacks
    errors = profile_fit.cross_validate(runs, priors)
    by_source = profile_fit.source_errors(runs, errors)
    e = np.array(list(errors.values()))
    published = np.array([v for k, v in errors.items() if not k.startswith("s00")])
    print("Leave-one-source-out CV of tokens/s per GPU (each source predicted by profiles fitted on the others):")
    print(f"  {'source':62} {'rows':>4} {'MAPE %':>7} {'bias %':>7}")
    for s in by_source:
        flag = "  > 25%" if s.mape_pct > TARGET_SOURCE else ""
        print(f"  {s.source[:62]:62} {s.rows:4} {s.mape_pct:7.1f} {s.bias_pct:+7.1f}{flag}")
    print(f"  all rows: MAPE {100 * np.mean(np.abs(e)):.1f}%  bias {100 * np.mean(e):+.1f}%  ({e.size} rows)")
    print(f"  published rows: MAPE {100 * np.mean(np.abs(published)):.1f}%  bias {100 * np.mean(published):+.1f}%  "
          f"({published.size} rows)")
    seeds = np.array([v for k, v in errors.items() if k.startswith("s00")])
    if seeds.size:
        inside = int(np.sum(np.abs(seeds) <= SEED_BAND))
        print(f"  seed rows with a stated, consistent configuration: {inside} of {seeds.size} inside the seeds' "
              f"+-{100 * SEED_BAND:.0f}% band (run-to-run spread they report)")
        seed_runs = [r for r in runs if r.id.startswith("s00")]
        rep = replicates.inside_band(seed_runs, errors, SEED_BAND)
        print(f"  ... scored against the spread of repeated configurations (validation/replicates.py): "
              f"{sum(rep.values())} of {len(rep)} inside")
    by_stack = _stack_errors(runs, errors)
    for stack, errs in sorted(by_stack.items()):
        print(f"  stack {stack:20} CV MAPE {100 * np.mean(np.abs(errs)):.1f}% over {len(errs)} rows")

    origin_errors = origin_cv.report(runs, priors)
    by_stack_origin = _stack_errors(runs, origin_errors, published_only=True)
    for stack, errs in sorted(by_stack_origin.items()):
        print(f"  stack {stack:20} leave-one-origin-out MAPE {100 * np.mean(np.abs(errs)):.1f}% over {len(errs)} published rows")

    # ranking within groups, on the CV predictions
    for label, subset in (("all", runs), ("published", [r for r in runs if not r.id.startswith("s00")]),
                          ("seed", [r for r in runs if r.id.startswith("s00")])):
        groups = _cv_groups(subset, errors)
        if groups:
            print(f"Ranking within {len(groups)} {label} groups (CV): mean Spearman "
                  f"{np.mean([g.spearman for g in groups]):.2f}, mean top-1 regret "
                  f"{100 * np.mean([g.top1_regret for g in groups]):.1f}%")
    final, sites = profile_fit.fit_sites(runs, priors)
    print("Site factors of the seed logs (x the model's step time of every row of that log, any stack; "
          "planner/site_effects.py): " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(sites.items())))
    generic_mape = stack_cv.report(runs, priors, final) if profile_fit.GENERIC in priors else None
    if args.write:
        for sid, prof in final.items():
            mine = [s for s in by_source if any(r.source == s.source and r.plan.stack == sid for r in runs)]
            # the expected error printed with every speed: leave-one-ORIGIN-out over the published rows (what
            # a run from an unseen team meets; the seed logs vary +-40% day to day for one configuration and
            # their leave-one-source-out errors stay in cv_by_source); a stack without published rows (hf):
            # leave-one-source-out over its seed rows, each log with its site factor
            errs = by_stack_origin.get(sid) or by_stack.get(sid, [])
            if sid == profile_fit.GENERIC:  # no rows of its own: its error is the leave-one-stack-out one
                errs = [generic_mape / 100] if generic_mape is not None else []
            prof = prof.model_copy(update={
                "fit_method": FIT_METHOD,
                "fit_sources": sorted({r.source for r in runs if r.plan.stack == sid and r.scored}),
                "cv_mape_pct": round(100 * float(np.mean(np.abs(errs))), 1) if errs else prof.cv_mape_pct,
                "cv_by_source": mine,
            })
            path = STACKS_DIR / f"{sid}.toml"
            path.write_text(profile_to_toml(prof, CV_COMMENT))
            tomllib.loads(path.read_text())  # what we wrote parses
            print(f"wrote {path.relative_to(REPO)}")
    return 0


def _stack_errors(runs, errors, published_only=False) -> dict[str, list[float]]:
    by: dict[str, list[float]] = defaultdict(list)
    for r in runs:
        if r.id in errors and not (published_only and r.id.startswith("s00")):
            by[r.plan.stack].append(errors[r.id])
    return by


def _cv_groups(runs, errors):
    """Groups of the validate report, scored on the CV predictions (measured x (1 + CV error))."""
    from planner.validate import RunPrediction

    preds, kept = [], []
    for r in runs:
        if r.id not in errors:
            continue
        meas = r.measured_tokens_per_s_per_gpu
        preds.append(RunPrediction(
            id=r.id, source=r.source, stack=r.plan.stack, outcome=r.outcome, measured_tokens_per_s_per_gpu=meas,
            predicted_tokens_per_s_per_gpu=meas * (1 + errors[r.id]), measured_iter_time_s=r.measured_iter_time_s,
            predicted_iter_time_s=0.0, error=errors[r.id], measured_mem_gib=None, predicted_mem_gib=0.0,
            capacity_gib=0.0, fits=True, verdict="", mfu=0.0, assumptions=[]))
        kept.append(r)
    return _groups(preds, kept)


if __name__ == "__main__":
    raise SystemExit(main())
