"""A `plan tune` killed with -9 between trials (its next trial asked for, not launched yet): that trial counted as
launched ('17 launched of 17 trials' with 16 run) and its row showed its first knob alone. Now it is not launched,
its row says why and shows the configuration its retry runs."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution

from tuner.report import ran, run_summary, status_of, trials_frame
from tuner.worker_id import lock_dir

KNOBS = {"sharding": "zero2", "offload": "none", "activation_checkpointing": "full", "precision": "bf16",
         "micro_batch": 16, "grad_accum": 1}


def test_a_trial_whose_worker_died_before_launching_it_is_not_launched(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAN_TUNE_WORKER_DIR", str(tmp_path))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    dead = "d" * 32
    (lock_dir() / f"{dead}.lock").write_text("12345\n")  # what a killed worker leaves: its lock file, held by no one
    launched = study.ask()  # launched, then its worker killed
    for k, v in (("worker_id", dead), ("config_key", "a"), ("knobs", KNOBS | {"sharding": "none"}),
                 ("status", "running"), ("workdir", str(tmp_path / "trial-0"))):
        launched.set_user_attr(k, v)
    study.enqueue_trial(KNOBS)  # the configuration its tuner had decided on (a queued proposal)
    deciding = study.ask()  # killed while deciding it: one knob drawn, no knobs or workdir recorded yet
    deciding.suggest_categorical("sharding", ["zero2"])
    for k, v in (("worker_id", dead), ("config_key", "b"), ("status", "running")):
        deciding.set_user_attr(k, v)
    trials = study.get_trials()
    assert [status_of(t) for t in trials] == ["interrupted", "interrupted"]
    assert [ran(t) for t in trials] == [True, False]
    assert run_summary(study, [0, 1])["launched"] == 1
    row = trials_frame(study).set_index("trial").loc[1].to_dict()
    assert row["reason"] == "not launched: its worker died while deciding it", row
    assert {k: row[k] for k in KNOBS} == KNOBS, row  # the queued configuration, not its first knob alone
