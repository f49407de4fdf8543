"""What a study found: the trial table, the best configuration, prediction errors before and
after calibration, and the winner's DeepSpeed JSON / FSDP launch settings and command."""

from __future__ import annotations

import json
import shlex
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from pydantic import BaseModel

from planner.errors import PlanError
from planner.exports.common import target_for
from planner.resolve import resolve_model
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Calibration
from planner.system import System
from tuner import final
from tuner.calibrate import relative_errors, summarize_errors
from tuner.predict import Predictor
from tuner.space import TUNED_KNOBS
from tuner.activity import running_trials
from tuner.storage import HOST, masked_url
from tuner.study_store import META_KEY, StudyMeta, calibration_check, current_calibration, load
from tuner.worker_id import worker_alive

COLUMNS = (
    "trial", "state", "status", "source", *TUNED_KNOBS,
    "measured_tokens_per_s", "predicted_tokens_per_s_default", "predicted_tokens_per_s",
    "step_time_s", "step_spread_pct", "predicted_memory_gib", "measured_memory_gib", "capacity_gib", "wall_s", "reason",
)


class TuneReport(BaseModel):
    study: str
    storage: str
    model: str
    ranks: int
    device: str
    trials: int  # the study's, every run of it (a resumed study counts the earlier runs' too)
    launched: int  # the study's launched trials, every run of it
    this_run: dict | None = None  # what this `plan tune` run did: launched, by_status, trial numbers, re-measurements
    by_status: dict[str, int]  # decided configurations by outcome (re-draws of one left out)
    duplicates: int = 0  # sampler re-draws of a configuration already decided (not run)
    best: dict | None  # knobs + measured numbers of the winner
    calibration: dict
    error_before: dict  # |predicted - measured| / measured of tokens/s, default calibration
    error_after: dict  # same with the calibration applied (in-sample: see calibration_check)
    stack_profile: dict | None = None  # --stack-out: its held-out error vs the shipped profile's, n, which was written
    calibration_check: dict | None = None  # the fit's held-out error vs the starting one, n, which was kept
    deepspeed_config: dict | None = None
    launch_settings: dict | None = None
    launch_command: str | None = None
    # the export that writes the winner (an FSDP study's plain-DDP winner: DeepSpeed's ZeRO stage 0) and its command
    export_format: str | None = None
    export_command: str | None = None
    stop_reason: str | None = None
    interrupted_by: str | None = None  # "SIGINT" (Ctrl-C) or "SIGTERM": the CLI exits 130 / 143 after the report
    network: str | None = None
    network_effect: str | None = None  # what the measured busbw changed in the planner's ranking
    by_backend: dict[str, dict[str, int]] = {}  # backend -> launched trials by outcome
    no_result: list[str] = []  # backends of the space with no completed trial
    winner: str | None = None  # which backend won and why
    final_ranking: dict | None = None  # the re-measured top candidates, noise and tie window
    running: list[dict] = []  # trials running now: trial, for_s, doing (tuner/activity.py; their log on this host)
    # a study whose network is being measured (no StudyMeta yet): phase, doing, for_s, worker alive|dead, bench step
    setup: dict | None = None


def status_of(t: FrozenTrial) -> str:
    """A trial's outcome; a failed trial that never got one was interrupted (worker died), and so is a trial still
    running in the storage whose worker is known dead here (its liveness lock free: killed, tuner/worker_id.py)
    until the next run of the study fails it and queues it again."""
    s = t.user_attrs.get("status")
    if t.state == TrialState.FAIL and s in (None, "running"):
        return "interrupted"
    if t.state == TrialState.RUNNING and worker_alive(t.user_attrs.get("worker_id")) is False:
        return "interrupted"
    return s or t.state.name.lower()


def ran(t: FrozenTrial) -> bool:
    """Launched: it ran to an outcome, was interrupted, or is running now (not: a trial whose worker died before it
    launched it, with no workdir: it counted as launched, a row of its first knob alone)."""
    if status_of(t) == "interrupted" and not t.user_attrs.get("workdir") and worker_alive(t.user_attrs.get("worker_id")) \
            is not True:  # its worker died while deciding it (a kill -9 between trials): never launched
        return False
    return t.state == TrialState.RUNNING or status_of(t) in (
        "ok", "oom", "timeout", "crash", "bad_config", "interrupted")


def trials_frame(study: optuna.Study):
    """One row per trial that was decided (duplicates left out), best measured first."""
    import pandas as pd

    rows = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        if a.get("status") == "duplicate" or "config_key" not in a:
            continue
        # a trial queued to run (a stopped run's, re-queued): its knobs are the fixed params it was queued with
        knobs = a.get("knobs") or t.system_attrs.get("fixed_params") or t.params or {}
        row = {"trial": t.number, "state": t.state.name, "status": status_of(t), "source": a.get("source")}
        row.update({k: knobs.get(k) for k in TUNED_KNOBS})
        for col in COLUMNS[len(row):]:
            row[col] = a.get(col)
        row["reason"] = a.get("reason") or a.get("error") or ("not launched: its worker died while deciding it"
                                                              if row["status"] == "interrupted" and not ran(t) else "")
        rows.append(row)
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    if not df.empty:
        df = df.sort_values(["measured_tokens_per_s", "trial"], ascending=[False, True], na_position="last")
    return df.reset_index(drop=True)


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The winner (tuner/final.py): first of the re-measured final ranking, else the best
    measurement with the planner's tie rule."""
    return final.best_trial(study)


def best_plan(study_name: str, storage_url: str | None = None, *, list_studies: bool = True) -> ExecutionPlan:
    """The winning configuration of a study, as an ExecutionPlan."""
    return chosen_from_study(study_name, storage_url, list_studies=list_studies).plan


def chosen_from_study(study_name: str, storage_url: str | None = None, *, list_studies: bool = True):
    """The winner as an export input: its plan, the system it ran on and, for a DeepSpeed
    plan, the exact JSON text the trial ran (exported byte for byte)."""
    from planner.exports.bundle import Chosen

    study = load(study_name, storage_url, list_studies=list_studies)
    meta = StudyMeta.load(study)
    best = best_trial(study)
    if best is None:
        raise PlanError("study", f"{study_name!r} has no completed trial yet")
    return Chosen(plan=meta.plan(best.user_attrs["knobs"]), model_ref=meta.model, system=meta.system,
                  step_time_s=best.user_attrs.get("step_time_s"), source=f"study {study_name} trial {best.number}",
                  deepspeed_json=best.user_attrs.get("deepspeed_config_json"),
                  fsdp_json=best.user_attrs.get("fsdp_config_json"))


def predictor_of(study: optuna.Study) -> Predictor:
    return StudyMeta.load(study).predictor()


def prediction_errors(study: optuna.Study, cal: Calibration) -> tuple[dict, dict]:
    """Tokens/s prediction error over completed trials: shipped model vs calibrated model
    (the calibrated numbers come from the planner itself, with the fitted factors)."""
    pred = predictor_of(study)
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    measured = [t.value for t in done]
    before = [t.user_attrs.get("predicted_tokens_per_s_default") for t in done]
    after = [pred(t.user_attrs["knobs"], cal).tokens_per_s for t in done]
    return summarize_errors(relative_errors(before, measured)), summarize_errors(relative_errors(after, measured))


def exports_for(plan: ExecutionPlan, system: System, model: str,
                ds_json: str | None = None) -> tuple[dict | None, dict | None, str]:
    """DeepSpeed JSON (ZeRO plans: the trial's own when given) or FSDP/DDP launch settings,
    and the launch command."""
    from planner.exports import torchrun
    from planner.exports.accelerate import accelerate_config
    from planner.exports.deepspeed_json import deepspeed_config

    target = target_for(system)
    ds = settings = None
    ds_file = None
    if ds_json or plan.sharding.startswith("zero"):
        ds = json.loads(ds_json) if ds_json else deepspeed_config(plan, target=target, model=resolve_model(Scenario(model=model)))
        ds_file = "ds_config.json"
    else:
        settings = accelerate_config(plan, system, target=target)
    cmd = torchrun.torchrun_command(plan, system, model=model, deepspeed_config_file=ds_file)
    return ds, settings, torchrun.render(cmd)


def run_summary(study: optuna.Study, numbers: list[int], remeasurements: int = 0) -> dict:
    """What one run of a study did: its own trials (`numbers`) by outcome, apart from the study's totals."""
    numbers = set(numbers)
    mine = [t for t in study.get_trials(deepcopy=False) if t.number in numbers]
    by_status: dict[str, int] = {}
    for t in mine:
        if status_of(t) != "duplicate":
            by_status[status_of(t)] = by_status.get(status_of(t), 0) + 1
    return {"trials": len([t for t in mine if status_of(t) != "duplicate"]), "launched": sum(1 for t in mine if ran(t)),
            "by_status": by_status, "trial_numbers": sorted(t.number for t in mine if status_of(t) != "duplicate"),
            "remeasurements": remeasurements}


def worker_trials(study: optuna.Study, worker: str) -> list[int]:
    """The trials one worker process ran (their `worker_id`, tuner/worker_id.py, set as each starts): a running
    `plan serve` worker's own, apart from the earlier runs of a resumed study. Matched by the worker's unique id,
    never by pid and host: a later worker that got an earlier one's pid does not take its trials."""
    return [t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get("worker_id") == worker]


def build_report(study: optuna.Study, storage_url: str | None, stop_reason: str | None = None,
                 this_run: dict | None = None) -> TuneReport:
    if (early := setup_report(study, storage_url, this_run)) is not None:
        return early
    meta = StudyMeta.load(study)
    trials = study.get_trials(deepcopy=False)
    by_status: dict[str, int] = {}
    for t in trials:
        s = status_of(t)
        by_status[s] = by_status.get(s, 0) + 1
    dups = by_status.pop("duplicate", 0)
    cal = current_calibration(study)
    before, after = prediction_errors(study, cal)
    best = best_trial(study)
    report = TuneReport(
        study=study.study_name, storage=masked_url(storage_url), model=meta.model, ranks=meta.nproc,
        device=meta.system.gpu.name, trials=len(trials),
        launched=sum(1 for t in trials if ran(t)), by_status=by_status, duplicates=dups, best=None,
        calibration=cal.model_dump(mode="json"), error_before=before, error_after=after,
        calibration_check=calibration_check(study), this_run=this_run,
        stop_reason=stop_reason, network=meta.network_note, network_effect=meta.network_effect,
        winner=final.why_it_won(study) or None, final_ranking=final.final_ranking(study),
        running=running_trials(trials, HOST, worker_alive),
    )
    report.by_backend, report.no_result = backend_counts(study, meta)
    if best is not None:
        plan = meta.plan(best.user_attrs["knobs"])
        ds, settings, cmd = _safe_exports(plan, meta.system, meta.model, best.user_attrs.get("deepspeed_config_json"))
        row = next((r for r in (report.final_ranking or {}).get("rows", []) if r["trial"] == best.number), {})
        runs = len(row.get("samples_tokens_per_s") or [best.value])
        report.best = {"trial": best.number, **best.user_attrs["knobs"], "tokens_per_s": best.value,  # its first run
                       "median_tokens_per_s": row.get("median_tokens_per_s"), "runs": runs,
                       # what the winner (and so the export) was chosen by: its re-measured median where it has one
                       "chosen_tokens_per_s": row["median_tokens_per_s"] if runs > 1 else best.value,
                       "chosen_by": f"the median of {runs} runs" if runs > 1 else "one run",
                       "spread_pct": row.get("spread_pct"),  # None: measured once, its spread is unknown
                       "step_spread_pct": best.user_attrs.get("step_spread_pct"),
                       "step_time_s": best.user_attrs.get("step_time_s"),
                       "measured_memory_gib": best.user_attrs.get("measured_memory_gib"),
                       "predicted_tokens_per_s_default": best.user_attrs.get("predicted_tokens_per_s_default")}
        report.deepspeed_config, report.launch_settings, report.launch_command = ds, settings, cmd
        report.export_format = export_format_of(plan)
        report.export_command = (f"plan export {report.export_format} --from-study {shlex.quote(study.study_name)}"
                                 + (f" --storage {shlex.quote(report.storage)}" if storage_url else ""))
    return report


def export_format_of(plan: ExecutionPlan) -> str:
    """The JSON export that writes a study's winner: FSDP settings for an FSDP plan, else a DeepSpeed config (a plain
    data-parallel winner, e.g. an FSDP study's sharding none, as ZeRO stage 0: fsdp_settings refuses it)."""
    from planner.exports.common import is_fsdp

    return "fsdp" if is_fsdp(plan) else "deepspeed"


def setup_report(study: optuna.Study, storage_url: str | None, this_run: dict | None = None) -> TuneReport | None:
    """The report of a study still being set up (tuner/study_setup.py: its network measured, no StudyMeta yet), or
    whose set-up was stopped; None for a study set up."""
    from tuner.study_setup import describe, setup_record

    rec = setup_record(study)
    if rec is None or META_KEY in study.user_attrs:
        return None
    none = summarize_errors([])
    return TuneReport(study=study.study_name, storage=masked_url(storage_url), model=str(rec.get("model")),
                      ranks=int(rec.get("nproc") or 0), device="GPUs" if rec.get("on_gpu") else "CPU ranks", trials=0,
                      launched=0, this_run=this_run, by_status={}, best=None, calibration={}, error_before=none,
                      error_after=none, setup=describe(rec))


def backend_counts(study: optuna.Study, meta: StudyMeta) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Launched trials per backend by outcome, and the backends of the space with no result."""
    counts: dict[str, dict[str, int]] = {}
    for t in study.get_trials(deepcopy=False):
        knobs = t.user_attrs.get("knobs")
        if not knobs or not ran(t):
            continue
        row = counts.setdefault(meta.run_backend(knobs), {})
        row[status_of(t)] = row.get(status_of(t), 0) + 1
    space = {meta.run_backend({"sharding": s}) for s in meta.space.get("sharding", [])}
    return counts, sorted(b for b in space if not counts.get(b, {}).get("ok"))


def _safe_exports(plan: ExecutionPlan, system: System, model: str, ds_json: str | None = None) -> tuple[Any, Any, str | None]:
    try:
        return exports_for(plan, system, model, ds_json)
    except PlanError as e:  # an export that refuses this plan: say why, keep the report
        return None, {"note": str(e)}, None
