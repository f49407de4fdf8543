"""The trial table shows a trial queued to run again (a stopped run's, re-queued for the next POST /tune or
`plan tune` of the study) with the configuration it will run: its row read 'waiting' and nothing else."""

from __future__ import annotations

import optuna

from tuner.report import trials_frame, worker_trials

KNOBS = {"sharding": "zero2", "offload": "none", "activation_checkpointing": "none", "micro_batch": 4, "grad_accum": 2}


def test_a_requeued_trial_shows_its_configuration():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial(KNOBS, user_attrs={"source": "retry", "config_key": "zero2-4-2", "retry_of": 0})
    df = trials_frame(study)
    row = df.iloc[0].to_dict()
    assert row["state"] == "WAITING" and row["status"] == "waiting"
    assert {k: row[k] for k in KNOBS} == KNOBS, row


def test_worker_trials_are_that_workers_by_its_id_not_a_reused_pid():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    old, new = "a" * 32, "b" * 32
    # the same pid on the same host: a later worker got the earlier one's pid; a trial from before ids were recorded
    for wid in (old, new, old, new, None):
        attrs = {"worker_pid": 10, "worker_host": "a"} | ({"worker_id": wid} if wid else {})
        study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs=attrs))
    assert worker_trials(study, new) == [1, 3]
    assert worker_trials(study, old) == [0, 2]
