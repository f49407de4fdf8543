"""The study's calibration is judged on trials it was not fitted on (leave one trial out) and applied only where
that beats the uncalibrated planner (a short CPU study's in-sample fit made predictions worse and was applied);
a candidate measured once has no spread (it showed 0.0); a resumed run's own trials apart from the study's.

The trial runner replays what the trainer would measure: the planner's own default prediction times a factor per
configuration (the loop, the calibration, the report and the CLI are the real ones)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from planner.settings import Calibration
from tuner.api import start_study
from tuner.config import TuneConfig
from tuner.runner import TrialOutcome
from tuner.setup import open_study

runner = CliRunner()
SPACE = {"sharding": ("none", "zero1"), "offload": ("none",), "activation_checkpointing": ("none",),
         "precision": ("fp32",), "micro_batch": (2, 4)}


def _cfg(tmp_path, **kw) -> TuneConfig:
    return TuneConfig(**{"model": "tiny", "gpus": 2, "budget_s": 3600, "steps": 4, "seq_len": 32,
                         "storage": f"sqlite:///{tmp_path}/c.db", "study": "c", "measure_network": False,
                         "progress": False, "top_k": 0, "remeasure_rounds": 0, "seed": 0, "choices": SPACE} | kw)


class Measures:
    """The planner's default prediction of the configuration, `factor(knobs)` times faster (a repeat 10% more
    each time); `fail`: keys that crash from their second run on (a re-measurement that does not count)."""

    def __init__(self, cfg: TuneConfig, factor, fail=()):
        self.predictor = open_study(cfg).predictor  # creates the study; start_study resumes it
        self.factor, self.fail, self.seen = factor, set(fail), {}

    def __call__(self, knobs, *, trial_number, timeout_s, on_start, **kw) -> TrialOutcome:
        key = (knobs["sharding"], knobs["micro_batch"])
        self.seen[key] = self.seen.get(key, 0) + 1
        if key in self.fail and self.seen[key] > 1:
            return TrialOutcome(status="crash", error="exit 1", wall_s=5.0)
        p, f = self.predictor(knobs), self.factor(knobs) * (1 + 0.1 * (self.seen[key] - 1))  # repeats differ
        return TrialOutcome(status="ok", tokens_per_s=p.tokens_per_s * f, step_time_s=p.step_time_s / f,
                            step_time_s_p90=1.1 * p.step_time_s / f, wall_s=10.0, startup_s=8.0)


def _report_json(tmp_path) -> dict:
    r = runner.invoke(app, ["tune", "report", "--study", "c", "--storage", f"sqlite:///{tmp_path}/c.db", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_a_fit_that_predicts_held_out_trials_worse_is_not_applied(tmp_path):
    # noise tied to the configuration: micro batch 2 runs 1.6x the planner, 4 runs 0.6x; a fit to all four
    # trials cannot predict one it has not seen better than the planner as shipped
    out = tmp_path / "cal.json"
    cfg = _cfg(tmp_path, calibration_out=str(out))
    rep = start_study(cfg, runner=Measures(cfg, lambda k: 1.6 if k["micro_batch"] == 2 else 0.6))
    chk = rep.calibration_check
    assert chk["n"] == 4 and chk["method"] == "leave-one-trial-out" and chk["kept"] == "baseline", chk
    assert chk["held_out_mean_abs_pct"] > chk["baseline_mean_abs_pct"] > 0
    assert chk["baseline_mean_abs_pct"] == pytest.approx(rep.error_before["mean_abs_pct"])
    # not applied: the planner as shipped, in the study, the report and --calibration-out
    assert (rep.calibration["compute"], rep.calibration["network"]) == (1.0, 1.0)
    written = Calibration.model_validate_json(out.read_text())
    assert (written.compute, written.network) == (1.0, 1.0) and "not applied" in written.source
    assert rep.error_after == rep.error_before
    text = runner.invoke(app, ["tune", "report", "--study", "c", "--storage", cfg.storage]).output
    assert "not fitted on (leave-one-trial-out, 4 trials)" in text and "not applied, the uncalibrated planner is kept" \
        in " ".join(text.split())
    assert _report_json(tmp_path)["calibration_check"] == chk
    # --stack-out: the profile fitted on these trials predicts held-out ones worse than the shipped one: not written
    out = tmp_path / "mine" / "stacks" / "bundled.toml"
    r = runner.invoke(app, ["tune", "report", "--study", "c", "--storage", cfg.storage, "--stack-out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    sp = json.loads(r.stdout)["stack_profile"]
    assert sp["n"] == 4 and sp["kept"] == "shipped" and sp["held_out_mean_abs_pct"] > sp["shipped_mean_abs_pct"], sp
    assert "the shipped stack profile written, not the fit" in " ".join(r.stderr.split())
    from hardware.catalog import load_catalog

    written, shipped = load_catalog([tmp_path / "mine"]).stacks["bundled"], load_catalog().stacks["bundled"]
    assert written.gemm_time_factor == shipped.gemm_time_factor and "not refitted by plan tune c" in written.fit_method


def test_a_fit_that_predicts_held_out_trials_better_is_applied(tmp_path):
    # this machine runs every configuration 2.5x the planner's speed: one factor, seen from any three trials
    cfg = _cfg(tmp_path)
    rep = start_study(cfg, runner=Measures(cfg, lambda k: 2.5))
    chk = rep.calibration_check
    assert chk["kept"] == "fitted" and chk["n"] == 4, chk
    assert chk["held_out_mean_abs_pct"] < 0.5 * chk["baseline_mean_abs_pct"]
    assert rep.calibration["compute"] != 1.0 and rep.error_after["mean_abs_pct"] < rep.error_before["mean_abs_pct"]
    text = " ".join(runner.invoke(app, ["tune", "report", "--study", "c", "--storage", cfg.storage]).output.split())
    assert "uncalibrated planner" in text and ": applied (compute x" in text
    out = tmp_path / "mine" / "stacks" / "bundled.toml"
    r = runner.invoke(app, ["tune", "report", "--study", "c", "--storage", cfg.storage, "--stack-out", str(out), "--json"])
    sp = json.loads(r.stdout)["stack_profile"]
    assert sp["kept"] == "fitted" and sp["held_out_mean_abs_pct"] < sp["shipped_mean_abs_pct"], sp
    assert "stack profile fitted on the trials written" in " ".join(r.stderr.split())


def test_one_trial_is_not_calibrated(tmp_path):
    cfg = _cfg(tmp_path, max_trials=1)
    rep = start_study(cfg, runner=Measures(cfg, lambda k: 2.5))
    chk = rep.calibration_check
    assert chk["n"] == 1 and chk["held_out_mean_abs_pct"] is None and chk["kept"] == "baseline", chk
    assert chk["baseline_mean_abs_pct"] == pytest.approx(60.0)  # 2.5x faster: the planner 60% low
    assert (rep.calibration["compute"], rep.calibration["network"]) == (1.0, 1.0)


def test_a_candidate_measured_once_has_no_spread(tmp_path):
    # re-measurements of (none, 4) all crash: it has its first run only; one timed step has no step spread either
    cfg = _cfg(tmp_path, remeasure_rounds=2, steps=2)
    rep = start_study(cfg, runner=Measures(cfg, lambda k: 1.0 + 0.1 * k["micro_batch"], fail={("none", 4)}))
    rows = {(r["knobs"]["sharding"], r["knobs"]["micro_batch"]): r for r in rep.final_ranking["rows"]}
    once = rows[("none", 4)]
    assert once["runs"] == 1 and once["spread_pct"] is None
    assert all(r["runs"] == 3 and r["spread_pct"] is not None for k, r in rows.items() if k != ("none", 4))
    data = _report_json(tmp_path)
    assert [r for r in data["final_ranking"]["rows"] if r["trial"] == once["trial"]][0]["spread_pct"] is None
    assert data["best"]["step_spread_pct"] is None  # one timed step (steps 2, warm-up 1): no spread to show
    text = " ".join(runner.invoke(app, ["tune", "report", "--study", "c", "--storage", cfg.storage]).output.split())
    assert f"#{once['trial']} " in text and "(1 run)" in text and "±0%" not in text
    import pandas as pd

    csv = tmp_path / "t.csv"
    runner.invoke(app, ["tune", "report", "--study", "c", "--storage", cfg.storage, "--csv", str(csv)])
    assert pd.read_csv(csv)["step_spread_pct"].isna().all()


def test_a_resumed_run_says_what_it_did_apart_from_the_study(tmp_path):
    first = start_study(_cfg(tmp_path, max_trials=2), runner=Measures(_cfg(tmp_path), lambda k: 1.0))
    assert first.this_run["launched"] == 2 and first.launched == 2
    again = start_study(_cfg(tmp_path, max_trials=1), runner=Measures(_cfg(tmp_path), lambda k: 1.0))
    assert again.launched == 3 and again.this_run["launched"] == 1, again.this_run  # it said 3 for this run
    assert again.this_run["by_status"] == {"ok": 1} and len(again.this_run["trial_numbers"]) == 1
    assert again.this_run["trial_numbers"][0] > max(first.this_run["trial_numbers"])
    from plan_cli.tune import this_run_line

    assert this_run_line(again) == (f"this run: launched 1 trial (1 ok); the study in all: 3 launched of "
                                    f"{again.trials} trials")
    # `plan tune report` is no run of the study: no this_run
    assert _report_json(tmp_path)["this_run"] is None
