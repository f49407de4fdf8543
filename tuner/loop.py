"""The tuning loop: planner proposals first, then an Optuna sampler; every trial a real run.

Per trial: sample (or pop an enqueued proposal) -> dedupe on the configuration (claims table)
-> skip what the planner predicts will not fit (recorded, not launched) -> skip what cannot
finish inside the budget -> run the trainer -> store predicted and measured numbers -> refit
the calibration -> enqueue the best untried proposal under the new calibration.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from planner.settings import Calibration
from tuner import storage as st
from tuner.worker_id import worker_id
from tuner.budget import Budget, trial_duration_s, trial_timeout_s
from tuner import calibration_check
from tuner.calibrate import Observation
from tuner.calibration_check import Measured
from tuner.proposing import FINAL, Proposals
from tuner.runner import TrialOutcome
from tuner.setup import StudyContext, export_calibration
from tuner.study_store import current_calibration, save_calibration
from tuner.space import complete, config_key
from tuner import final
from tuner.activity import ENDING, STARTING, TRIALS, PhaseHook, deepspeed_ops_built, no_phase, trial_line
from tuner.trial import DEFAULT_STARTUP_S, SubprocessRunner, deepspeed_json, fsdp_json, run_backend, started_steps

GIB = 2**30
# A trial cut by the budget or killed before its first step is "interrupted" and run again,
# with a longer start-up allowance; after this many interruptions it is a final "timeout".
MAX_INTERRUPTS = 3


def stop_line(left_s: float, reserve_s: float, shortest_s: float) -> str:
    """Why the search stops on the budget, in numbers that add up ('17 s left (~18 s of it re-measure ...)'
    was printed when the re-measurements needed all of what was left and more)."""
    if reserve_s and reserve_s >= left_s:
        return (f"budget: {left_s:.0f} s left, all of it kept to re-measure the top candidates (they need "
                f"~{reserve_s:.0f} s)")
    kept = f" (~{reserve_s:.0f} s of it kept to re-measure the top candidates)" if reserve_s else ""
    return f"budget: {left_s:.0f} s left{kept}, the shortest untried trial needs ~{shortest_s:.0f} s"


class TrialFailed(Exception):
    """A trial that ran and failed (OOM, timeout, crash, bad config): recorded, study goes on."""


Runner = Callable[..., TrialOutcome]


class Tuner(Proposals):
    """The loop, one trial, timing and calibration; what to run next: tuner/proposing.py."""

    def __init__(self, ctx: StudyContext, budget: Budget, runner: Runner | None = None,
                 on_trial: Callable[..., None] | None = None, on_phase: PhaseHook = no_phase):
        self.ctx = ctx
        self.study = ctx.study
        self.store = ctx.store
        self.cfg = ctx.config
        self.budget = budget
        self.runner = runner or SubprocessRunner(ctx)
        self.on_trial = on_trial
        self.on_phase = on_phase
        self.outcomes = 0  # this run's launched trials that have ended: 'starting' until its first did
        self.calibration = current_calibration(self.study)
        self._startup_memo: dict[str, float] = {}
        self.launched = 0
        self.trial_numbers: list[int] = []  # the trials this run made (a resumed study has others before)
        self.remeasurements = 0  # re-runs of the top candidates by this run (tuner/final.py)
        self.skipped_in_a_row = 0
        self.stop_reason = ""
        self.configs = [complete(p, global_batch=ctx.meta.global_batch, dp=ctx.nproc)
                        for p in ctx.space.configs()]
        self.distributions = ctx.space.distributions()

    # ---- the loop -------------------------------------------------------------------------
    def run(self) -> str:
        self.store.fail_dead_local_trials()
        while True:
            self._startup_memo = {}  # start-up estimates: once per trial, not once per configuration
            reason = self._should_stop()
            if reason:
                if reason.startswith("every configuration"):
                    self._record_the_ruled_out()
                self.stop_reason = reason
                final.remeasure(self, self.cfg.remeasure_rounds)
                self.on_phase(ENDING, f"{reason}: writing its report")
                return reason
            self._enqueue_next_proposal()
            self.study.optimize(self._objective, n_trials=1, catch=(TrialFailed,),
                                gc_after_trial=False, show_progress_bar=False)
            if self.on_trial:
                self.on_trial(self)

    def _should_stop(self) -> str:
        if self.cfg.max_trials is not None and self.launched >= self.cfg.max_trials:
            return f"launched {self.launched} trial{'s' if self.launched != 1 else ''} (--max-trials)"
        if self.budget.left_s < 1.0:
            return "budget used up"
        untried = self.untried(launchable_only=not self.cfg.explore_infeasible)
        if not untried and not self._waiting():
            return "every configuration of the space has been tried or ruled out"
        shortest = min((self.expected_s(k) for k in untried), default=0.0)
        reserve = self.reserve_s()
        if not self.budget.allows(shortest + reserve):
            return stop_line(self.budget.left_s, reserve, shortest)
        if self.skipped_in_a_row >= 200:
            return "the sampler keeps proposing configurations already tried"
        return ""

    def _record_the_ruled_out(self) -> None:
        """Configurations the sampler never drew but the planner rules out: record each one
        (status predicted_infeasible, with the reason), so the table shows the whole space."""
        rest = self.untried(launchable_only=False)
        for knobs in rest:
            self.study.enqueue_trial({k: knobs[k] for k in self.distributions},
                                     user_attrs={"source": "planner-ruled-out", "config_key": config_key(knobs)})
        if rest:
            self.study.optimize(self._objective, n_trials=len(rest), catch=(TrialFailed,),
                                gc_after_trial=False, show_progress_bar=False)

    # ---- timing ---------------------------------------------------------------------------
    def reserve_s(self) -> float:
        """Budget kept for re-measuring the top candidates at the end (tuner/final.py)."""
        return final.reserve_s(self, self.cfg.remeasure_rounds)

    def startup_s(self, knobs: dict | None = None) -> float:
        """Start-up of a trial of this backend: the median measured on completed trials of the
        same backend; before any, the backend's default, doubled for each start-up timeout."""
        def of(k: dict | None) -> str:
            return self.ctx.meta.run_backend(k or {})

        backend = of(knobs)
        if backend in self._startup_memo:
            return self._startup_memo[backend]
        self._startup_memo[backend] = value = self._measured_startup_s(backend, of)
        return value

    def _measured_startup_s(self, backend: str, of) -> float:
        trials = self.study.get_trials(deepcopy=False)
        walls = [t.user_attrs["startup_s"] for t in self._completed()
                 if t.user_attrs.get("startup_s") and of(t.user_attrs.get("knobs")) == backend]
        if walls:
            return statistics.median(walls)
        cut = sum(1 for t in trials if t.user_attrs.get("interrupted_in") == "startup" and of(t.user_attrs.get("knobs")) == backend)
        base = self.cfg.startup_s or DEFAULT_STARTUP_S["gpu" if self.ctx.on_gpu else "cpu"][backend]
        return base * 2.0 ** min(cut, 4)

    def step_time_s(self, knobs: dict) -> float:
        step = self.ctx.predictor(knobs).calibrated_step_s(self.calibration)
        return step if step and math.isfinite(step) else 1.0

    def expected_s(self, knobs: dict) -> float:
        return trial_duration_s(self.startup_s(knobs), self.ctx.steps, 0, self.step_time_s(knobs))

    # ---- one trial ------------------------------------------------------------------------
    def _objective(self, trial: Trial) -> float:
        self.trial_numbers.append(trial.number)
        trial.set_user_attr("worker_id", worker_id())  # identity (tuner/worker_id.py)
        trial.set_user_attr("worker_host", st.HOST)  # for people reading the trial
        trial.set_user_attr("worker_pid", os.getpid())
        params = {k: trial.suggest_categorical(k, d.choices) for k, d in self.distributions.items()}
        knobs = complete(params, global_batch=self.ctx.meta.global_batch, dp=self.ctx.nproc)
        key = config_key(knobs)
        trial.set_user_attr("config_key", key)
        trial.set_user_attr("knobs", knobs)
        if self.store.is_retry(trial.number):
            trial.set_user_attr("source", "retry")
        elif "source" not in trial.user_attrs:
            trial.set_user_attr("source", self.cfg.sampler)
        trial.set_user_attr("status", "running")
        pred0 = self.ctx.predictor(knobs)  # default calibration: the planner as shipped
        pred = self.ctx.predictor(knobs, self.calibration)
        self._store_prediction(trial, pred0, pred)

        if not pred.launchable(self.cfg.infeasible_margin) and not self.cfg.explore_infeasible:
            return self._not_run(trial, key, "predicted_infeasible", pred.reason, claim=True)
        holder = self._claim(trial, key)
        if holder is not None:
            return self._not_run(trial, key, "duplicate", f"same configuration as trial {holder}", claim=False)
        expected = self.expected_s(knobs)
        trial.set_user_attr("expected_s", expected)
        if not self.budget.allows(expected + self.reserve_s()):
            self.store.release(key, trial.number)
            return self._not_run(trial, key, "skipped_budget",
                                 f"needs ~{expected:.0f} s, {self.budget.left_s:.0f} s left", claim=False)
        self.skipped_in_a_row = 0
        pinned = self.cfg.trial_timeout_s is not None
        timeout = self.cfg.trial_timeout_s or trial_timeout_s(expected) * 2.0 ** self.interrupts(key)
        budget_cut = timeout > self.budget.left_s
        timeout = min(timeout, max(1.0, self.budget.left_s))
        trial.set_user_attr("timeout_s", timeout)
        ds_json = deepspeed_json(knobs, dp=self.ctx.nproc, seq_len=self.ctx.seq_len,
                                 model=self.ctx.spec, on_gpu=self.ctx.on_gpu,
                                 study_backend=self.ctx.meta.backend)
        if ds_json is not None:  # the exact config this trial runs: exported byte for byte
            trial.set_user_attr("deepspeed_config_json", ds_json)
        fs_json = fsdp_json(knobs, dp=self.ctx.nproc, seq_len=self.ctx.seq_len, on_gpu=self.ctx.on_gpu,
                            study_backend=self.ctx.meta.backend)
        if fs_json is not None:
            trial.set_user_attr("fsdp_config_json", fs_json)
        self.launched += 1

        def on_start(pid: int, workdir: str) -> None:  # called as the trainer starts, before it ends
            trial.set_user_attr("pgid", pid)
            trial.set_user_attr("host", st.HOST)
            trial.set_user_attr("workdir", workdir)

        kw = {k: v for k, v in (("deepspeed_json", ds_json), ("fsdp_json", fs_json)) if v is not None}
        first = self.outcomes == 0
        backend = self.ctx.meta.run_backend(knobs)
        built = first and backend == "deepspeed" and deepspeed_ops_built(self.ctx.on_gpu)
        self.on_phase(STARTING if first else TRIALS, trial_line(trial.number, backend, knobs, first, built))
        try:
            outcome = self.runner(knobs, trial_number=trial.number, timeout_s=timeout, on_start=on_start, **kw)
            self.outcomes += 1
            self.on_phase(TRIALS, f"trial #{trial.number} ended ({outcome.status}): recording it, choosing the next")
        except KeyboardInterrupt:
            trial.set_user_attr("status", "interrupted")
            self._retry(params, key, trial.number)
            raise
        if outcome.status == "timeout":
            cut = "budget" if budget_cut else ("startup" if not pinned and not started_steps(outcome) else "")
            if cut and self.interrupts(key) + 1 < MAX_INTERRUPTS:
                return self._interrupted(trial, params, key, outcome, cut)
        return self._record(trial, knobs, outcome, pred0)

    def _retry(self, params: dict, key: str, number: int) -> None:
        self.study.enqueue_trial(params, user_attrs={"source": "retry", "config_key": key, "retry_of": number})

    def _interrupted(self, trial: Trial, params: dict, key: str, out: TrialOutcome, cut: str) -> float:
        """Cut by the budget, or killed while still starting up: no verdict, run it again."""
        why = (f"budget ran out after {out.wall_s:.0f} s" if cut == "budget" else
               f"still starting up after {out.wall_s:.0f} s (timeout from the backend's start-up estimate)")
        for k, v in (("status", "interrupted"), ("interrupted_in", cut), ("reason", why), ("wall_s", out.wall_s),
                     ("notes", out.notes), ("log_tail", out.log_tail[-1500:])):
            trial.set_user_attr(k, v)
        if cut == "startup":  # a budget cut is retried by the next run on the same storage
            self._retry(params, key, trial.number)
        raise TrialFailed(f"interrupted: {why}")

    def _claim(self, trial: Trial, key: str) -> int | None:
        def reclaimable(holder: FrozenTrial) -> bool:
            status = holder.user_attrs.get("status")
            if holder.state == TrialState.FAIL and status not in FINAL:
                return True  # interrupted or heartbeat-failed: no result, run it again
            return status == "predicted_infeasible" and self.cfg.explore_infeasible

        return self.store.claim(key, trial.number, is_reclaimable=reclaimable)

    def _not_run(self, trial: Trial, key: str, status: str, reason: str, *, claim: bool) -> float:
        if claim and self._claim(trial, key) is not None:
            status, reason = "duplicate", f"already recorded: {reason}"
        trial.set_user_attr("status", status)
        trial.set_user_attr("reason", reason)
        self.skipped_in_a_row += 1
        raise optuna.TrialPruned(f"{status}: {reason}")

    def _store_prediction(self, trial: Trial, pred0, pred) -> None:
        trial.set_user_attr("predicted_fits", pred.fits)
        trial.set_user_attr("predicted_reason", pred.reason)
        trial.set_user_attr("predicted_memory_gib", pred.total_bytes / GIB)
        trial.set_user_attr("capacity_gib", pred.capacity_bytes / GIB)
        trial.set_user_attr("predicted_tokens_per_s_default", pred0.tokens_per_s)
        trial.set_user_attr("predicted_tokens_per_s", pred.tokens_per_s)
        trial.set_user_attr("predicted_step_time_s", pred.step_time_s)
        trial.set_user_attr("breakdown_default_s", [pred0.compute_s, pred0.comm_s, pred0.rest_s])
        trial.set_user_attr("calibration_used", [self.calibration.compute, self.calibration.network])

    def _record(self, trial: Trial, knobs: dict, out: TrialOutcome, pred0) -> float:
        for k, v in out.model_dump().items():
            if k == "log_tail":
                v = v[-1500:] if out.status != "ok" else ""
            trial.set_user_attr(k if k != "tokens_per_s" else "measured_tokens_per_s", v)
        trial.set_user_attr("measured_memory_gib", out.peak_memory_bytes / GIB if out.peak_memory_bytes else None)
        timed = self.ctx.meta.steps - self.ctx.meta.warmup_steps
        trial.set_user_attr("timed_steps", timed)
        # the spread of the timed steps (warm-up excluded); one timed step has none to show (it read 0.0)
        if out.step_time_s and out.step_time_s_p90 and timed >= 2:
            trial.set_user_attr("step_spread_pct", 100 * (out.step_time_s_p90 / out.step_time_s - 1))
        if out.status != "ok" or not out.tokens_per_s:
            raise TrialFailed(f"{out.status}: {out.error}")
        self.refit(extra=(knobs, pred0, out))
        return out.tokens_per_s

    # ---- calibration ----------------------------------------------------------------------
    def measured(self) -> list[Measured]:
        """The completed trials the calibration is fitted on (knobs, default breakdown, measured step, tokens/s)."""
        out = []
        for t in self._completed():
            b, step, knobs = t.user_attrs.get("breakdown_default_s"), t.user_attrs.get("step_time_s"), t.user_attrs.get("knobs")
            if b and step and knobs and t.value:
                out.append(Measured(knobs, Observation(b[0], b[1], b[2], step), t.value))
        return out

    def refit(self, extra=None) -> Calibration:
        """Fit the calibration on the completed trials; apply it only where it predicts trials it was not
        fitted on better than the study's starting calibration (tuner/calibration_check.py)."""
        trials = self.measured()
        if extra is not None:  # the trial being told now is not COMPLETE in storage yet
            knobs, pred0, out = extra
            trials.append(Measured(knobs, pred0.observation(out.step_time_s), out.tokens_per_s))
        if trials:
            self.calibration, check = calibration_check.choose(
                trials, lambda k, cal: self.ctx.predictor(k, cal, cache=cal == self.ctx.meta.calibration).tokens_per_s,
                self.ctx.meta.calibration)
            save_calibration(self.study, self.calibration, check)
            export_calibration(self.calibration, self.cfg.calibration_out)
        return self.calibration
