"""What the tuning loop runs next: the configurations decided already, those left, the planner's proposals
re-ranked by what the trials measured, and the next one queued (tuner/loop.py's Tuner mixes this in).

It reads the Tuner's study, context, config, calibration, budget and timing (`expected_s`, `reserve_s`);
it imports nothing of tuner/loop.py.
"""

from __future__ import annotations

import math

from optuna.trial import FrozenTrial, TrialState

from tuner import final
from tuner.residual import ResidualModel
from tuner.space import complete, config_key

# Trial statuses that are results: a configuration with one of these is never run again.
FINAL = ("ok", "oom", "timeout", "crash", "bad_config", "predicted_infeasible")


class Proposals:
    """The proposal half of the Tuner (needs: study, ctx, cfg, configs, distributions, calibration, budget,
    expected_s, reserve_s)."""

    def _waiting(self) -> bool:
        return bool(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    # ---- proposals ------------------------------------------------------------------------
    def decided_keys(self) -> set[str]:
        keys = set()
        for t in self.study.get_trials(deepcopy=False):
            key = t.user_attrs.get("config_key")
            if key is None:
                continue
            status = t.user_attrs.get("status")
            if t.state in (TrialState.RUNNING, TrialState.WAITING) or status in FINAL:
                keys.add(key)
        return keys

    def interrupts(self, key: str) -> int:
        return sum(1 for t in self.study.get_trials(deepcopy=False)
                   if t.user_attrs.get("config_key") == key and t.user_attrs.get("status") == "interrupted")

    def untried(self, *, launchable_only: bool) -> list[dict]:
        done = self.decided_keys()
        out = [k for k in self.configs if config_key(k) not in done]
        if launchable_only:
            out = [k for k in out if self.ctx.predictor(k).launchable(self.cfg.infeasible_margin)]
        return out

    def ranked_proposals(self) -> list[dict]:
        """The planner's top-k (one `estimate` call when the study was made: tuner/proposals.py)
        not tried yet, re-ranked by the calibrated planner and the per-backend and per-knob
        corrections learned from the trials; ties (the planner's 2% rule) go to the simpler plan."""
        top = [complete(k, global_batch=self.ctx.meta.global_batch, dp=self.ctx.nproc)
               for k in self.ctx.meta.planner_top_k]
        # what needs as much memory (by the planner's model) as a configuration that ran out
        # of it is not proposed: the model under-counts here (the sampler may still try it)
        oom_bytes = min((self.ctx.predictor(k).total_bytes for k in self._failed(("oom",))), default=math.inf)
        untried = [k for k in self.untried(launchable_only=True) if self.ctx.predictor(k).total_bytes < oom_bytes]
        keys = {config_key(k) for k in untried}
        pool = [k for k in top if config_key(k) in keys and self.ctx.predictor(k).fits]
        if not pool and self._completed():  # top-k done: the corrected planner over the space
            pool = [k for k in untried if self.ctx.predictor(k).fits]
        if not self._completed():
            return pool  # nothing measured yet: the planner's own order
        cal, model = self.calibration, self.residual_model()

        def ranked(cands: list[dict]) -> list[dict]:
            scores = [math.exp(model.score(k, math.log(self.ctx.predictor(k).calibrated_tokens_per_s(cal) or 1e-30)))
                      for k in cands]
            return [cands[i] for i in final.tie_order(cands, scores)]

        # a backend not measured yet: its best plan of the whole space first (tuner/residual.py)
        return model.backends_first(ranked(pool), ranked([k for k in untried if self.ctx.predictor(k).fits]))

    def residual_model(self) -> ResidualModel:
        """Per-knob corrections of the calibrated planner, from the completed trials."""
        knobs, ratios = [], []
        for t in self._completed():
            k = t.user_attrs.get("knobs")
            pred = self.ctx.predictor(k).calibrated_tokens_per_s(self.calibration) if k else None
            if pred and t.value:
                knobs.append(k)
                ratios.append(math.log(t.value / pred))
        return ResidualModel(self.ctx.space.choices, study_backend=self.ctx.meta.backend).fit(
            knobs, ratios, tried=self._failed(("oom", "crash", "timeout")))

    def _failed(self, statuses: tuple[str, ...]) -> list[dict]:
        """The knobs of the trials that ran and ended with one of `statuses` (no speed)."""
        return [t.user_attrs["knobs"] for t in self.study.get_trials(deepcopy=False)
                if t.user_attrs.get("status") in statuses and t.user_attrs.get("knobs")]

    def _enqueue_next_proposal(self) -> None:
        trials = self.study.get_trials(deepcopy=False)
        if self._waiting():
            return  # a retry or a proposal is already queued
        run = [t for t in trials if t.user_attrs.get("status") not in ("skipped_budget", "duplicate")]
        if sum(1 for t in run if t.user_attrs.get("source") == "planner") >= self.cfg.top_k:
            # after the planner's top-k: every other trial from the corrected planner, the
            # others from the sampler (it explores what the planner's model cannot see)
            if self.cfg.top_k == 0 or sum(1 for t in run if t.user_attrs.get("source") in ("model", self.cfg.sampler)) % 2:
                return
        reserve = self.reserve_s()
        ranked = [k for k in self.ranked_proposals() if self.budget.allows(self.expected_s(k) + reserve)]
        if not ranked:
            return
        best = ranked[0]
        params = {k: best[k] for k in self.distributions}
        tops = {config_key(complete(k, global_batch=self.ctx.meta.global_batch, dp=self.ctx.nproc))
                for k in self.ctx.meta.planner_top_k}
        source = "planner" if config_key(best) in tops else "model"
        self.study.enqueue_trial(params, user_attrs={"source": source, "config_key": config_key(best)},
                                 skip_if_exists=False)

    def _completed(self) -> list[FrozenTrial]:
        return self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
