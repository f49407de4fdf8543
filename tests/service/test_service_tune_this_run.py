"""GET /tune/STUDY's report.this_run is its worker's trials, told by the worker id the server started it with
(worker.json, and on each trial it runs): a trial of an earlier worker that had the same pid on this host (pids
are reused) is the study's, not this run's. A job an older server started (no worker id) reads the study's totals
only."""

from __future__ import annotations

import json
import uuid

import optuna
from fastapi.testclient import TestClient

from plan_service import ServiceConfig, create_app
from tuner import TuneConfig, create_study
from tuner.storage import HOST

KNOBS = {"sharding": "none", "offload": "none", "activation_checkpointing": "none", "micro_batch": 1, "grad_accum": 1}


def test_this_run_is_told_by_worker_id_not_by_a_reused_pid(tmp_path):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    create_study(TuneConfig(model="tiny", gpus=1, budget_s=600, study="reused", storage=url, progress=False))
    config = ServiceConfig(storage=url, workdir=tmp_path / "work", insecure=True)
    with TestClient(create_app(config)) as client:
        assert client.post("/tune", json={"model": "tiny", "gpus": 1, "budget_s": 600, "study": "reused"}).status_code == 202
        job = client.app.state.jobs.get("reused")
        recorded = json.loads((tmp_path / "work" / "reused" / "worker.json").read_text())
        assert recorded["pid"] == job.pid and len(recorded["worker_id"]) == 32
        # an earlier worker of the study that had the pid this one got: a trial it ran to an outcome
        old = optuna.load_study(study_name="reused", storage=url).add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL, user_attrs={
                "status": "crash", "knobs": KNOBS, "config_key": "earlier-run", "worker_pid": job.pid,
                "worker_host": HOST, "worker_id": uuid.uuid4().hex}))
        study = optuna.load_study(study_name="reused", storage=url)
        old_number = next(t.number for t in study.get_trials() if t.user_attrs.get("config_key") == "earlier-run")
        this_run = client.get("/tune/reused").json()["report"]["this_run"]
        assert old_number not in this_run["trial_numbers"], this_run
        with TestClient(create_app(config)) as later:  # a server started since reads the job from worker.json
            again = later.get("/tune/reused").json()["report"]["this_run"]
            assert old_number not in again["trial_numbers"], again
        client.delete("/tune/reused")
        job.proc.wait(timeout=120)
        mine = {t.number for t in optuna.load_study(study_name="reused", storage=url).get_trials()
                if t.user_attrs.get("worker_id") == recorded["worker_id"]}
        assert set(client.get("/tune/reused").json()["report"]["this_run"]["trial_numbers"]) == mine
    # worker.json as an older server wrote it (pid and start time, no worker id): the study's totals, no this_run
    del recorded["worker_id"]
    (tmp_path / "work" / "reused" / "worker.json").write_text(json.dumps(recorded))
    with TestClient(create_app(config)) as client:
        body = client.get("/tune/reused").json()
        assert body["status"] == "interrupted" and body["report"]["this_run"] is None, body
        assert body["report"]["launched"] >= 1  # the earlier worker's trial, in the study's totals
