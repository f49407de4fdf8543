"""`plan tune`: Optuna-driven search over execution plans, every trial a real trainer run.

    plan tune --model tiny --gpus 2 --budget 3m            # 2 CPU ranks on a machine with no GPU
    plan tune --model 7b --budget 2h --storage postgresql://user@host/db --study s7b
    plan tune report --study s7b --storage postgresql://user@host/db [--csv trials.csv]
    optuna-dashboard sqlite:///plan-tune.db                # the default storage, in a browser

Flow: measure all-reduce bus bandwidth on the ranks (`plan allreduce-bench`) -> the planner's
top-k from one `estimate` call (tuner/proposals.py) -> then the calibrated planner with per-knob
residuals and an Optuna sampler (TPE) take turns -> each trial `python -m trainer` in its own
process group (tuner/trial.py: a DeepSpeed trial runs from the shared builder's JSON, stored on
the trial; stale build locks cleared), with a per-backend timeout (a start-up or budget cut is
"interrupted" and retried) and (CPU) an RLIMIT_AS cap -> predicted vs measured stored on the
trial -> calibration fitted and saved -> at the end the top candidates re-measured interleaved
and ranked with the planner's tie rule (tuner/final.py). Several workers may share one RDB
storage (create the study once first: `plan tune ... --init-only`); a configuration is never
run twice (claims table).

Programmatic use: `start_study(TuneConfig(...))`, `create_study(...)`, `best_plan(name, url)`,
`build_report(load(name, url), url)`. The trainer is only ever launched as a subprocess.
Optuna's storage is read and written only through tuner/study_store.py (`StudyMeta`: what a
study records about itself).
"""

from tuner.api import create_study, start_study
from tuner.config import TuneConfig
from tuner.report import TuneReport, best_plan, build_report, load, trials_frame

__all__ = ["TuneConfig", "TuneReport", "best_plan", "build_report", "create_study", "load", "start_study",
           "trials_frame"]
