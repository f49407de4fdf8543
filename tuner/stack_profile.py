"""A stack profile fitted on a study's measured trials: what `plan calibrate` fits from a runs
CSV, fitted here from the trainer runs of `plan tune` (the bundled stack).

Each completed trial is a run: the configuration it ran (the trainer's ExecutionPlan), the
System the study measured (catalog GPUs or CPU ranks, measured bus bandwidth) and its measured
tokens/s. `profile_fit.fit_one` fits the profile's time factors with its own leave-one-run-out
cross-validated error; the file is read back by `--catalog DIR --stack bundled`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import TrialState

from hardware.catalog import load_catalog
from hardware.stacks import StackProfile, profile_to_toml
from planner import profile_fit
from planner.errors import PlanError
from planner.resolve import resolve_model
from planner.runs import Run
from tuner.study_store import StudyMeta

STACK = "bundled"


def study_runs(study: optuna.Study) -> list[Run]:
    """The study's completed trials as runs of the bundled stack."""
    meta = StudyMeta.load(study)
    system = meta.system
    spec = resolve_model(meta.base())
    runs = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if not t.value or "knobs" not in t.user_attrs:
            continue
        plan = meta.plan(t.user_attrs["knobs"])
        if plan.gpus != system.gpus:
            continue
        runs.append(Run(
            id=f"trial-{t.number}", source=f"plan tune {study.study_name}", spec=spec, plan=plan, system=system,
            outcome="ok", measured_tokens_per_s_per_gpu=float(t.value) / plan.gpus,
            measured_iter_time_s=t.user_attrs.get("step_time_s"),
            measured_peak_mem_gib=t.user_attrs.get("measured_memory_gib"), model=spec.name,
            gpu_type=system.gpu.name))
    return runs


def fit_study_profile(study: optuna.Study, prior: StackProfile | None = None) -> tuple[StackProfile, dict]:
    """(the profile to write, the check): the profile fitted on the trials where its leave-one-run-out error
    (profile_fit.fit_one's own CV) beats the shipped profile's error on the same trials, else the shipped one."""
    runs = study_runs(study)
    if not runs:
        raise PlanError("study", f"{study.study_name!r} has no completed trial to fit a stack profile on")
    prior = prior or load_catalog().stacks.get(STACK) or StackProfile(id=STACK, name=STACK)
    fitted = profile_fit.fit_one(runs, prior)
    scored = [r for r in runs if r.scored and r.layout_stated]  # what fit_one scores
    shipped = round(100 * float(np.mean(np.abs(profile_fit.predict_ratio(scored, {STACK: prior}) - 1))), 1) \
        if scored else None
    check = {"method": "leave-one-run-out", "n": len(scored), "shipped_mean_abs_pct": shipped,
             "held_out_mean_abs_pct": fitted.cv_mape_pct, "kept": "shipped"}
    if fitted.cv_mape_pct is not None and shipped is not None and fitted.cv_mape_pct < shipped:
        return fitted, check | {"kept": "fitted"}
    why = ("one completed trial: a fit on the others needs two at least" if fitted.cv_mape_pct is None else
           f"the fit on {len(scored)} trials predicted the held-out trials worse on average ({fitted.cv_mape_pct:.1f}%) "
           f"than the shipped profile ({shipped:.1f}%)")
    return prior.model_copy(update={"fit_method": f"{prior.fit_method}; not refitted by plan tune {study.study_name}: "
                                                  f"{why}"}), check | {"why": why}


def write_study_profile(study: optuna.Study, out: Path) -> tuple[StackProfile, dict]:
    """Fit and write DIR/stacks/bundled.toml (the file name must be the stack id to be loaded): the fitted
    profile where it beats the shipped one on held-out trials, else the shipped one (and the check says so)."""
    out = Path(out)
    if out.suffix != ".toml" or out.stem != STACK:
        raise PlanError("stack_out", f"{out}: the file must be named {STACK}.toml (under DIR/stacks/ for --catalog DIR)")
    prof, check = fit_study_profile(study)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = profile_to_toml(prof)
    tomllib.loads(text)
    out.write_text(text)
    return prof, check
