"""A POST /tune job's status says how its worker ended: finished only when the study stopped by its own rule;
interrupted (with the signal, resumable) when the server stopping or a signal stopped it, also after a server
restart (it read 'finished' with exit 0 while the server ran, 'stored' after a restart); a killed worker is
interrupted, not failed."""

from __future__ import annotations

import os
import signal
import time

import httpx
import optuna
import pytest
from fastapi.testclient import TestClient
from service_server import running_server, wait_status

from plan_service import ServiceConfig, create_app

TOKEN = "outcome-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_a_killed_worker_reads_interrupted_with_the_signal(tmp_path):
    config = ServiceConfig(storage=f"sqlite:///{tmp_path / 'tune.db'}", workdir=tmp_path / "work", insecure=True)
    with TestClient(create_app(config)) as client:
        r = client.post("/tune", json={"model": "tiny", "gpus": 1, "budget_s": 600, "study": "killed"})
        assert r.status_code == 202, r.text
        job = client.app.state.jobs.get("killed")
        os.killpg(job.proc.pid, signal.SIGKILL)  # whenever it lands: no outcome written
        job.proc.wait(timeout=60)
        status = client.get("/tune/killed").json()
        assert status["status"] == "interrupted" and status["exit_code"] == -9, status
        assert "SIGKILL" in status["why"] and "resumes" in status["why"], status
    with TestClient(create_app(config)) as later:  # a server started since: no exit code to read, the same line
        assert later.get("/tune/killed").json() == status


@pytest.mark.slow
def test_a_server_stopped_mid_study_leaves_it_interrupted_and_resumable(tmp_path):
    body = {"model": "tiny", "gpus": 2, "budget_s": 900, "steps": 3, "backend": "fsdp", "study": "stop-me",
            "seed": 0, "trial_timeout_s": 480, "startup_s": 60}
    with running_server(tmp_path, token=TOKEN, stop_timeout_s=180) as base:
        assert httpx.post(base + "/tune", json=body, headers=AUTH, timeout=30).status_code == 202
        # a trial launched: the study is in its loop (a long budget and a space of many configurations: it
        # cannot end by its own rule before the server stops it)
        status = wait_status(base, "stop-me", lambda s: s["status"] != "running" or (s["report"] or {}).get("launched"))
        assert status["status"] == "running", status
    # the server stopped (SIGTERM): it stopped its worker with SIGINT, the worker kept the study
    with running_server(tmp_path, token=TOKEN) as base:
        status = httpx.get(base + "/tune/stop-me", timeout=30).json()
        assert status["status"] == "interrupted" and status["exit_code"] == 130, status
        assert "SIGINT" in status["why"] and "resumes" in status["why"], status
        assert status["stopped_by"].startswith("the server stopping at "), status  # who sent its worker SIGINT
        assert status["why"].count("resume") == 1, status
        stored = optuna.load_study(study_name="stop-me", storage=f"sqlite:///{tmp_path / 'tune.db'}")
        assert not [t for t in stored.get_trials() if t.state == optuna.trial.TrialState.RUNNING]

        r = httpx.post(base + "/tune", json={**body, "max_trials": 1}, headers=AUTH, timeout=30)
        assert r.status_code == 202, r.text
        status = wait_status(base, "stop-me", lambda s: s["status"] != "running")
        assert status["status"] == "finished" and status["exit_code"] == 0, status
        assert "--max-trials" in status["why"] and status["report"]["best"] is not None, status
        assert status["stop_reason"] == "launched 1 trial (--max-trials)", status  # its rule apart (the page's line)
        assert status["report"]["launched"] >= 2  # the interrupted trial and the resumed run's


@pytest.mark.slow
def test_a_worker_stopped_by_sigterm_mid_study_reads_interrupted_not_finished(tmp_path):
    config = ServiceConfig(storage=f"sqlite:///{tmp_path / 'tune.db'}", workdir=tmp_path / "work", insecure=True)
    body = {"model": "tiny", "gpus": 2, "budget_s": 900, "steps": 3, "backend": "fsdp", "study": "termed",
            "seed": 0, "trial_timeout_s": 480, "startup_s": 60}
    with TestClient(create_app(config)) as client:
        assert client.post("/tune", json=body).status_code == 202
        deadline = time.monotonic() + 600
        while not (client.get("/tune/termed").json()["report"] or {}).get("launched"):  # in its loop
            assert client.app.state.jobs.get("termed").proc.poll() is None and time.monotonic() < deadline
            time.sleep(1)
        job = client.app.state.jobs.get("termed")
        os.kill(job.proc.pid, signal.SIGTERM)  # a batch system's or an operator's kill of the worker
        job.proc.wait(timeout=300)
        status = client.get("/tune/termed").json()
        assert status["status"] == "interrupted" and status["exit_code"] == 143, status
        assert "SIGTERM" in status["why"] and "resumes" in status["why"], status
        # the server did not send it (no DELETE /tune/STUDY, not the server stopping): a signal from outside
        assert status["stopped_by"].startswith("a SIGTERM from outside this server"), status
        assert "server stopping" not in status["why"] and "DELETE" not in status["why"], status
