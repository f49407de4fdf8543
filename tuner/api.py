"""Programmatic entry points (the CLI and the HTTP service call these)."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from pathlib import Path

from optuna.trial import TrialState

from tuner.activity import STARTING, PhaseHook, no_phase
from tuner.budget import Budget
from tuner.config import TuneConfig
from tuner.loop import Runner, Tuner
from tuner.progress import TuneProgress
from tuner.report import TuneReport, build_report, ran, run_summary, trials_frame
from tuner.setup import StudyContext, open_study


def create_study(config: TuneConfig) -> StudyContext:
    """Create the study (measuring this machine once) without running trials: do this once
    before starting several workers on one storage."""
    with _sigterm_as_interrupt():  # a SIGTERM in the network bench: its ranks are killed too
        return open_study(config, create=True)


def start_study(config: TuneConfig, *, runner: Runner | None = None, console=None,
                on_phase: PhaseHook = no_phase) -> TuneReport:
    """Run (or resume) a study until its budget, trial cap or space is used up, or Ctrl-C.

    Everything is in the storage after every trial; a Ctrl-C or a SIGTERM (`kill`, `timeout`, a
    batch system's time limit, `docker stop`) kills the running trial's process group, marks it
    interrupted, queues it again and returns the report of what was done. `on_phase(phase, doing)` is told what
    it is doing (tuner/activity.py: `plan serve`'s worker shows it while the study starts).
    """
    with _sigterm_as_interrupt():
        return _run_study(config, runner, console, on_phase)


def _run_study(config: TuneConfig, runner: Runner | None, console, on_phase: PhaseHook = no_phase) -> TuneReport:
    budget = Budget(config.budget_s)
    on_phase(STARTING, "opening the study")
    # a SIGTERM in its network bench: the bench's ranks are killed
    ctx = open_study(config, create=True, on_phase=on_phase)
    if ctx.device_note and console is not None:
        console.print(f"note: {ctx.device_note}", highlight=False, soft_wrap=True)
    progress = TuneProgress(budget, console=console, enabled=config.progress)

    def after_trial(tuner: Tuner, line: str | None = None) -> None:
        """`line`: what just ran when it is not the study's last trial (a re-measurement)."""
        trials = tuner.study.get_trials(deepcopy=False)
        last = trials[-1] if trials else None
        done = [t for t in trials if t.state == TrialState.COMPLETE and t.value]
        best = max((t.value for t in done), default=None)
        progress.update(sum(1 for t in trials if ran(t)), len(trials), best, _line(last) if line is None else line,
                        mine=tuner.launched)

    tuner = Tuner(ctx, budget, runner=runner, on_trial=after_trial, on_phase=on_phase)
    signal_name = None
    with progress:
        try:
            stop = tuner.run()
        except Terminated:
            stop, signal_name = "stopped by SIGTERM (everything is kept; run the same command to resume)", "SIGTERM"
        except KeyboardInterrupt:
            stop, signal_name = "stopped by Ctrl-C (everything is kept; run the same command to resume)", "SIGINT"
    tuner.refit()
    report = build_report(ctx.study, config.storage, stop_reason=stop,
                          this_run=run_summary(ctx.study, tuner.trial_numbers, tuner.remeasurements))
    report.interrupted_by = signal_name
    if config.csv:
        Path(config.csv).parent.mkdir(parents=True, exist_ok=True)
        trials_frame(ctx.study).to_csv(config.csv, index=False)
    return report


class Terminated(KeyboardInterrupt):
    """A SIGTERM, handled as a Ctrl-C: the running trial's group is killed, the trial queued again."""


@contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises `Terminated` in the main thread while the study runs (it used to end the
    process at once: no report, the running trial left 'running' in the storage until a resume)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    before = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _line(t) -> str:
    if t is None or t.user_attrs.get("status") in (None, "duplicate"):
        return ""
    a = t.user_attrs
    knobs = a.get("knobs") or t.params
    what = " ".join(f"{k}={v}" for k, v in knobs.items())
    notes = "".join(f"\n  note: {n}" for n in a.get("notes") or [])  # e.g. a stale build lock removed
    if t.state == TrialState.COMPLETE:
        return f"  #{t.number} ok {t.value:,.0f} tok/s  {what}{notes}"
    return f"  #{t.number} {a.get('status')}: {str(a.get('reason') or a.get('error') or '')[:100]}  {what}{notes}"
