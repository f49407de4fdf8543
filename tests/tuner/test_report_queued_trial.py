"""The trial table shows a trial queued to run again (a stopped run's, re-queued for the next POST /tune or
`plan tune` of the study) with the configuration it will run: its row read 'waiting' and nothing else."""

from __future__ import annotations

import optuna

from tuner.report import run_summary, status_of, trials_frame, worker_trials
from tuner.worker_id import lock_dir, worker_id

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


def test_a_trial_running_in_the_storage_whose_worker_is_dead_here_reads_interrupted(tmp_path, monkeypatch):
    """A `plan serve` worker killed with -9: its trial stays RUNNING in the storage until the next run fails it; the
    report said 'running 1' for a study nothing was running."""
    monkeypatch.setenv("PLAN_TUNE_WORKER_DIR", str(tmp_path))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    dead, elsewhere = "d" * 32, "e" * 32
    (lock_dir() / f"{dead}.lock").write_text("12345\n")  # what a killed worker leaves: its lock file, held by no one
    for wid in (dead, elsewhere, worker_id()):  # dead here; another machine's (unknown here); this live process
        t = study.ask()
        t.set_user_attr("status", "running")
        t.set_user_attr("worker_id", wid)
    assert [status_of(t) for t in study.get_trials()] == ["interrupted", "running", "running"]
    assert run_summary(study, [0, 1, 2])["by_status"] == {"interrupted": 1, "running": 2}
