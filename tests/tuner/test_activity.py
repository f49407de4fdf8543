"""What a running study says it is doing (tuner/activity.py): the tuner's phases in order (starting until its
first trial has ended, then trials, re-measuring, ending), each running trial's progress read from its trainer
log (no step yet, DeepSpeed building an op, step k of N), and the winner's speed by the value it was chosen by
(its re-measured median; the page showed its first run). The trial runner replays scripted trainer outcomes so the
loop's phases are exact; real runs: tests/service/test_service_tune_phase.py."""

from __future__ import annotations

import optuna
import pytest

from tuner.activity import log_progress, measuring_line, running_trials
from tuner.budget import Budget
from tuner.config import TuneConfig
from tuner.loop import Tuner
from tuner.report import build_report
from tuner.runner import TrialOutcome
from tuner.setup import open_study


def _ok(tps: float) -> TrialOutcome:
    return TrialOutcome(status="ok", tokens_per_s=tps, step_time_s=1000 / tps, step_time_s_p90=1100 / tps,
                        wall_s=10.0, startup_s=8.0, log_tail="[trainer] step 1/4 0.1 s")


def scripted_study(tmp_path, outcomes: dict, phases: list | None = None, rounds: int = 2):
    """A real study on SQLite, its trials told by `outcomes` ((sharding, micro_batch) -> outcomes in order)."""
    cfg = TuneConfig(model="tiny", gpus=2, budget_s=3600, steps=4, seq_len=32, storage=f"sqlite:///{tmp_path}/a.db",
                     study="a", measure_network=False, progress=False, top_k=0, remeasure_rounds=rounds,
                     choices={"sharding": ("none", "zero1"), "offload": ("none",), "activation_checkpointing": ("none",),
                              "precision": ("fp32",), "micro_batch": (2, 4)})
    todo = {k: list(v) for k, v in outcomes.items()}

    def runner(knobs, *, trial_number, timeout_s, on_start, **kw):
        left = todo[(knobs["sharding"], knobs["micro_batch"])]
        return left.pop(0) if len(left) > 1 else left[0]

    ctx = open_study(cfg)
    hook = (lambda phase, doing: phases.append((phase, doing))) if phases is not None else None
    Tuner(ctx, Budget(3600), runner=runner, **({"on_phase": hook} if hook else {})).run()
    return ctx


def test_the_phases_say_starting_until_the_first_trial_ended_then_trials_re_measuring_and_ending(tmp_path):
    phases: list = []
    scripted_study(tmp_path, {("zero1", 4): [_ok(2000.0)], ("none", 4): [_ok(1500.0)], ("zero1", 2): [_ok(800.0)],
                              ("none", 2): [_ok(700.0)]}, phases)
    names = [p for p, _ in phases]
    assert names[0] == "starting" and names.count("starting") == 1, phases  # the first trial's launch
    assert phases[0][1].startswith("its first trial #") and "launching the trainer" in phases[0][1], phases
    assert names[1] == "trials" and phases[1][1].endswith("ended (ok): recording it, choosing the next"), phases
    assert names.count("re-measuring") == 6 and names[-1] == "ending", phases  # 3 candidates x 2 rounds
    assert phases[-1][1] == "every configuration of the space has been tried or ruled out: writing its report"
    assert names.index("re-measuring") > max(i for i, n in enumerate(names) if n == "trials")


def test_the_winner_reads_as_the_median_it_was_chosen_by(tmp_path):
    # none mb4 measured 1500 first, then 1200 and 1300: ranked (and exported) by its median 1300
    ctx = scripted_study(tmp_path, {("none", 4): [_ok(1500.0), _ok(1200.0), _ok(1300.0)],
                                    ("zero1", 4): [_ok(900.0)], ("zero1", 2): [_ok(800.0)], ("none", 2): [_ok(700.0)]})
    best = build_report(ctx.study, ctx.config.storage).best
    assert (best["sharding"], best["micro_batch"]) == ("none", 4), best
    assert best["tokens_per_s"] == pytest.approx(1500.0) and best["runs"] == 3, best  # its first run, kept as it was
    assert best["chosen_tokens_per_s"] == pytest.approx(1300.0) and best["chosen_by"] == "the median of 3 runs", best


def test_a_winner_measured_once_says_so(tmp_path):
    ctx = scripted_study(tmp_path, {("none", 4): [_ok(1500.0)], ("zero1", 4): [_ok(900.0)],
                                    ("zero1", 2): [_ok(800.0)], ("none", 2): [_ok(700.0)]}, rounds=0)
    best = build_report(ctx.study, ctx.config.storage).best
    assert best["chosen_tokens_per_s"] == pytest.approx(1500.0) and best["chosen_by"] == "one run", best


def test_a_running_trials_log_says_where_it_is():
    assert log_progress("") == "starting: no step done yet (launch, imports, process group)"
    build = ("Using /root/.cache/torch_extensions/py311_cpu as PyTorch extensions root...\n"
             "Emitting ninja build file /root/.cache/torch_extensions/py311_cpu/cpu_adam/build.ninja...\n"
             "Building extension module cpu_adam...\nAllowing ninja to set a default number of workers...\n")
    assert log_progress(build) == "starting: DeepSpeed building its op cpu_adam (first run on this machine)"
    loaded = build + "Loading extension module cpu_adam...\nTime to load cpu_adam op: 31.2 seconds\n"
    assert log_progress(loaded) == "starting: no step done yet (launch, imports, process group)"
    assert log_progress(loaded + "[trainer] step 1/4 0.2100 s\n[trainer] step 2/4 0.2000 s\n") == "step 2 of 4 done"
    assert measuring_line(1, False, True) == "measuring this machine: its CPU peak (a matmul per rank)"
    assert measuring_line(2, False, True) == ("measuring this machine: its CPU peak (a matmul per rank) and an "
                                              "all-reduce bench of 2 ranks")


def test_running_trials_are_read_from_their_logs_on_this_host(tmp_path):
    study = optuna.create_study()
    logs = []
    for i, (host, text) in enumerate((("here", "[trainer] step 3/4 0.1 s\n"), ("here", ""), ("there", ""))):
        t = study.ask()
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "trainer.log").write_text(text)
        for k, v in (("status", "running"), ("workdir", str(tmp_path / str(i))), ("host", host),
                     ("worker_id", f"{i:032x}")):
            t.set_user_attr(k, v)
        logs.append(t)
    dead = study.ask()  # its worker is known dead here: not running (the report reads it interrupted)
    dead.set_user_attr("status", "running")
    dead.set_user_attr("worker_id", "f" * 32)
    done = study.ask()
    study.tell(done, 1.0)
    trials = study.get_trials(deepcopy=False)
    t0 = trials[0].datetime_start.timestamp()
    rows = running_trials(trials, "here", lambda wid: wid != "f" * 32, now=t0 + 40)
    assert [r["trial"] for r in rows] == [0, 1, 2], rows
    assert rows[0]["doing"] == "step 3 of 4 done" and rows[0]["for_s"] == pytest.approx(40, abs=1)
    assert rows[1]["doing"].startswith("starting: no step done yet")
    assert rows[2]["doing"] == "running on there (its log is not on this host)"


def test_a_first_deepspeed_trial_mentions_the_op_build_only_where_the_ops_are_not_built(tmp_path):
    from tuner.activity import deepspeed_ops_built, trial_line

    knobs = {"sharding": "zero1", "micro_batch": 16, "grad_accum": 1}
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path)}
    assert not deepspeed_ops_built(False, env)
    assert trial_line(0, "deepspeed", knobs, True, False).endswith(
        "launching the trainer (imports, process group; DeepSpeed's first run on a machine builds its ops (minutes))")
    (tmp_path / "py311_cpu" / "deepspeed_shm_comm").mkdir(parents=True)
    (tmp_path / "py311_cpu" / "deepspeed_shm_comm" / "deepspeed_shm_comm.so").write_bytes(b"")
    assert deepspeed_ops_built(False, env) and not deepspeed_ops_built(True, env)  # GPU: not told by this op
    assert trial_line(2, "deepspeed", knobs, True, True) == ("its first trial #2 (deepspeed, zero1, mb 16 x ga 1): "
                                                             "launching the trainer (imports, process group)")
    assert trial_line(3, "deepspeed", knobs, False) == "trial #3 (deepspeed, zero1, mb 16 x ga 1)"
