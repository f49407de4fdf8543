"""The tuner's decisions under noise and cut-offs: the planner's tie rule (one implementation),
the planner's own top-k, start-up timeouts and budget cuts retried as "interrupted", the top
candidates re-measured interleaved. The trial runner here replays scripted outcomes (what
the trainer would report) so that the loop's decisions are tested exactly; real runs are in
test_tune_cli.py / test_tune_export.py."""

from __future__ import annotations

import pytest

from planner import api
from tuner.budget import Budget
from tuner.config import TuneConfig
from tuner.final import tie_order
from tuner.loop import Tuner
from tuner.runner import TrialOutcome
from tuner.setup import open_study

K = {"offload": "none", "activation_checkpointing": "none", "precision": "fp32", "grad_accum": 1}


def test_tie_rule_is_the_planners():
    a = K | {"sharding": "zero3", "micro_batch": 4}
    b = K | {"sharding": "none", "micro_batch": 4}
    # within the planner's 2%: the simpler plan (no sharding) wins although it measured slower
    assert tie_order([a, b], [100.0, 99.0]) == [1, 0]
    # beyond it: the faster one
    assert tie_order([a, b], [100.0, 95.0]) == [0, 1]
    # a wider noise window makes that a tie too
    assert tie_order([a, b], [100.0, 95.0], window=0.10) == [1, 0]
    assert api.TIE_FRACTION == 0.02


def _ctx(tmp_path, **kw):
    cfg = TuneConfig(model="tiny", gpus=2, budget_s=kw.pop("budget_s", 3600), steps=4, seq_len=32,
                     storage=f"sqlite:///{tmp_path}/n.db", study="n", measure_network=False, progress=False,
                     choices={"sharding": ("none", "zero1"), "offload": ("none",), "activation_checkpointing": ("none",),
                              "precision": ("fp32",), "micro_batch": (2, 4)}, **kw)
    return open_study(cfg)


class Script:
    """Outcomes per configuration, in order; records each call."""

    def __init__(self, outcomes: dict):
        self.outcomes = {k: list(v) for k, v in outcomes.items()}
        self.calls: list[tuple[tuple, float, bool]] = []

    def __call__(self, knobs, *, trial_number, timeout_s, on_start, deepspeed_json=None):
        key = (knobs["sharding"], knobs["micro_batch"])
        self.calls.append((key, timeout_s, deepspeed_json is not None))
        todo = self.outcomes[key]
        return todo.pop(0) if len(todo) > 1 else todo[0]


def ok(tps: float) -> TrialOutcome:
    return TrialOutcome(status="ok", tokens_per_s=tps, step_time_s=1000 / tps, step_time_s_p90=1100 / tps,
                        wall_s=10.0, startup_s=8.0, log_tail="[trainer] step 1/4 0.1 s")


def startup_timeout() -> TrialOutcome:
    return TrialOutcome(status="timeout", error="killed", wall_s=60.0, log_tail="importing deepspeed ...")


def test_planner_top_k_comes_from_one_estimate_and_is_tried_first(tmp_path):
    ctx = _ctx(tmp_path, top_k=2, remeasure_rounds=0)
    top = ctx.meta.planner_top_k
    assert 1 <= len(top) <= 2 and all(k["precision"] == "fp32" for k in top)
    script = Script({(s, m): [ok(1000.0 * m)] for s in ("none", "zero1") for m in (2, 4)})
    Tuner(ctx, Budget(3600), runner=script).run()
    first = [c[0] for c in script.calls[:len(top)]]
    assert first == [(k["sharding"], k["micro_batch"]) for k in top]
    # every DeepSpeed trial ran from a stored config; DDP ones did not
    assert all(ds == (key[0] == "zero1") for key, _, ds in script.calls)


def test_startup_timeout_is_interrupted_and_retried_with_more_time(tmp_path):
    ctx = _ctx(tmp_path, top_k=0, remeasure_rounds=0)
    script = Script({("zero1", 2): [startup_timeout(), ok(3000.0)], ("zero1", 4): [ok(2500.0)],
                     ("none", 2): [ok(1000.0)], ("none", 4): [ok(1500.0)]})
    Tuner(ctx, Budget(3600), runner=script).run()
    tries = [(t, ds) for key, t, ds in script.calls if key == ("zero1", 2)]
    assert len(tries) == 2 and tries[1][0] >= 2 * tries[0][0]  # retried, with a doubled timeout
    trials = ctx.study.get_trials()
    statuses = sorted(t.user_attrs["status"] for t in trials if t.user_attrs.get("knobs", {}).get("sharding") == "zero1"
                      and t.user_attrs["knobs"]["micro_batch"] == 2 and t.user_attrs["status"] != "duplicate")
    assert statuses == ["interrupted", "ok"]
    from tuner.report import build_report

    rep = build_report(ctx.study, ctx.config.storage)
    assert rep.by_backend["deepspeed"] == {"interrupted": 1, "ok": 2} and rep.no_result == []
    assert rep.best["sharding"] == "zero1" and rep.winner.startswith("deepspeed won")


def test_backend_without_result_is_stated(tmp_path):
    ctx = _ctx(tmp_path, top_k=0, remeasure_rounds=0)
    crash = TrialOutcome(status="crash", error="boom", wall_s=5.0, log_tail="[trainer] step 1/4")
    script = Script({("zero1", 2): [crash], ("zero1", 4): [crash], ("none", 2): [ok(1000.0)], ("none", 4): [ok(900.0)]})
    Tuner(ctx, Budget(3600), runner=script).run()
    from tuner.report import build_report

    rep = build_report(ctx.study, ctx.config.storage)
    assert rep.no_result == ["deepspeed"] and rep.by_backend["deepspeed"] == {"crash": 2}


def test_top_candidates_are_remeasured_interleaved_and_ranked_with_noise(tmp_path):
    ctx = _ctx(tmp_path, top_k=0, remeasure_rounds=2)
    # zero1 mb4 got lucky once (2000), its repeats are ~1000; none mb4 is steady at 1500
    script = Script({("zero1", 4): [ok(2000.0), ok(1000.0), ok(1050.0)], ("none", 4): [ok(1500.0)],
                     ("zero1", 2): [ok(800.0)], ("none", 2): [ok(700.0)]})
    Tuner(ctx, Budget(3600), runner=script).run()
    tail = [c[0] for c in script.calls[4:]]
    assert tail[:3] == tail[3:6] and len(set(tail[:3])) == 3  # A B C A B C
    final = ctx.study.user_attrs["final_ranking"]
    assert final["rows"][0]["knobs"]["sharding"] == "none" and final["rows"][0]["knobs"]["micro_batch"] == 4
    assert all(len(r["samples_tokens_per_s"]) == 3 and r["spread_pct"] >= 0 for r in final["rows"])
    from tuner.report import build_report

    rep = build_report(ctx.study, ctx.config.storage)
    assert rep.best["sharding"] == "none" and rep.best["median_tokens_per_s"] == pytest.approx(1500.0)


def test_remeasurements_print_their_own_lines(tmp_path):
    """Each re-measurement prints which trial it re-ran and what it measured; before, the progress printed
    the study's last trial again after each one ('#3 ok ...' six times while the top 3 were re-run)."""
    import io
    import re

    from rich.console import Console

    from tuner.api import start_study

    buf = io.StringIO()
    cfg = TuneConfig(model="tiny", gpus=2, budget_s=3600, steps=4, seq_len=32, storage=f"sqlite:///{tmp_path}/n.db",
                     study="n", measure_network=False, progress=True, top_k=0, remeasure_rounds=2,
                     choices={"sharding": ("none", "zero1"), "offload": ("none",), "activation_checkpointing": ("none",),
                              "precision": ("fp32",), "micro_batch": (2, 4)})
    crash = TrialOutcome(status="crash", error="exit 1: boom", wall_s=5.0, log_tail="")
    script = Script({("zero1", 4): [ok(2000.0), ok(1000.0), crash], ("none", 4): [ok(1500.0)],
                     ("zero1", 2): [ok(800.0)], ("none", 2): [ok(700.0)]})
    start_study(cfg, runner=script, console=Console(file=buf, width=200))
    out = buf.getvalue()
    ran = re.findall(r"^  #(\d+) ok .* sharding=(\w+) .* micro_batch=(\d+)", out, re.M)
    first = {(s, int(m)): int(n) for n, s, m in ran}  # the trial number of each configuration
    again = re.findall(r"re-measured #(\d+): (.*)", out)
    assert [int(n) for n, _ in again] == [first[key] for key, _, _ in script.calls[4:]]  # one line per re-run, its own trial
    z = first[("zero1", 4)]
    assert (str(z), "1,000 tok/s (its run 2)") in again and (str(z), "crash: exit 1: boom (not counted)") in again
    assert len(ran) == 4 and len(first) == 4  # the four trials, each printed once


def test_the_budget_stop_line_adds_up():
    from tuner.loop import stop_line

    assert stop_line(17.2, 18.4, 5.0) == ("budget: 17 s left, all of it kept to re-measure the top candidates "
                                          "(they need ~18 s)")  # was '17 s left (~18 s of it re-measure ...)'
    assert stop_line(36.0, 30.0, 7.0) == ("budget: 36 s left (~30 s of it kept to re-measure the top candidates), "
                                          "the shortest untried trial needs ~7 s")
    assert stop_line(3.0, 0.0, 7.0) == "budget: 3 s left, the shortest untried trial needs ~7 s"
