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


def test_worker_trials_are_the_trials_of_that_pid_on_that_host():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for pid, host in ((10, "a"), (11, "a"), (10, "b"), (10, "a")):
        study.add_trial(optuna.trial.create_trial(value=1.0, user_attrs={"worker_pid": pid, "worker_host": host}))
    assert worker_trials(study, 10, "a") == [0, 3]
