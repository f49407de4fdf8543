"""DELETE /tune/STUDY stops a running study's worker: this server's, or one a `kill -9`'d server left running
(it was shown and counted as running by the next server, which could not stop it). A worker of an earlier server
is signalled only while its pid is still that worker (its command line and start time): never a process that
took the pid since. The study stays resumable."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import optuna
import pytest
from fastapi.testclient import TestClient
from service_server import running_server, wait_status

from plan_service import ServiceConfig, create_app
from plan_service.tune_jobs import start_ticks

TOKEN = "stop-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _config(tmp_path, **kw) -> ServiceConfig:
    return ServiceConfig(storage=f"sqlite:///{tmp_path / 'tune.db'}", workdir=tmp_path / "work", **kw)


def test_delete_stops_this_servers_worker_and_it_reads_interrupted(tmp_path):
    with TestClient(create_app(_config(tmp_path, insecure=True))) as client:
        assert client.post("/tune", json={"model": "tiny", "gpus": 1, "budget_s": 600, "study": "own"}).status_code == 202
        job = client.app.state.jobs.get("own")
        r = client.delete("/tune/own")
        assert r.status_code == 202, r.text
        body = r.json()
        assert body["status"] == "stopping" and body["pid"] == job.pid and "resumes" in body["why"], body
        job.proc.wait(timeout=120)  # SIGTERM, whenever it lands: the worker stops
        status = client.get("/tune/own").json()
        assert status["status"] == "interrupted" and status["exit_code"] in (143, -15), status
        # who stopped it, once: the request (its caller's address, when), the signal; and how to resume it, once
        assert status["stopped_by"].startswith("DELETE /tune/own from testclient at "), status
        assert status["stopped_by"].endswith("UTC (SIGTERM to its worker)"), status
        assert status["why"].count("SIGTERM") == 1 and status["why"].count("resume") == 1, status
        assert status["resume"] == "POST /tune with study 'own'", status
        again = client.delete("/tune/own")  # nothing left to stop: a 409 saying so and how it ended
        assert again.status_code == 409 and "not running" in again.json()["detail"], again.text
        assert client.delete("/tune/nope").status_code == 404

        # resumed, then a SIGTERM this server did not send (a kill): the last run's DELETE is not named
        assert client.post("/tune", json={"model": "tiny", "gpus": 1, "budget_s": 600, "study": "own"}).status_code == 202
        job = client.app.state.jobs.get("own")
        os.kill(job.pid, signal.SIGTERM)
        job.proc.wait(timeout=120)
        status = client.get("/tune/own").json()
        assert status["status"] == "interrupted" and status["stopped_by"].startswith(
            "a SIGTERM from outside this server (a kill"), status
        assert "DELETE" not in status["why"] and status["why"].count("resume") == 1, status


def test_delete_needs_the_token(tmp_path):
    with TestClient(create_app(_config(tmp_path))) as client:
        assert client.delete("/tune/any").status_code == 503  # no token configured, not --insecure


def _lookalike(tmp_path, study: str) -> subprocess.Popen:
    """A process whose command line is that of the study's worker (module and config path), as a pid reused by
    another `plan serve` worker-like command would be; it sleeps."""
    folder = tmp_path / "work" / study
    folder.mkdir(parents=True)
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "-m", "plan_service.tune_worker",
                             str(folder / "tune_config.json")])


@pytest.mark.parametrize("same_start", [False, True])
def test_an_earlier_servers_worker_is_signalled_only_while_its_pid_is_that_worker(tmp_path, same_start):
    proc = _lookalike(tmp_path, "orphan")
    try:
        ticks = start_ticks(proc.pid)
        assert ticks is not None
        # the worker the earlier server recorded started at `ticks` (the same process) or before (another one)
        recorded = ticks if same_start else ticks - 100
        (tmp_path / "work" / "orphan" / "worker.json").write_text(json.dumps({"pid": proc.pid, "start_ticks": recorded}))
        with TestClient(create_app(_config(tmp_path, insecure=True))) as client:
            r = client.delete("/tune/orphan")
            if not same_start:  # the pid is another process's now: not signalled, and not shown running
                assert r.status_code == 409 and "not running" in r.text, r.text
                assert client.get("/tune/orphan").json()["status"] == "interrupted"
                time.sleep(0.5)
                assert proc.poll() is None
                return
            assert r.status_code == 202, r.text
            assert proc.wait(timeout=30) == -15  # SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_a_worker_orphaned_by_a_killed_server_is_stopped_by_the_next_one_and_stays_resumable(tmp_path):
    body = {"model": "tiny", "gpus": 2, "budget_s": 900, "steps": 3, "backend": "fsdp", "study": "orphan",
            "seed": 0, "trial_timeout_s": 480, "startup_s": 60}
    started: list = []
    with running_server(tmp_path, token=TOKEN, started=started) as base:
        assert httpx.post(base + "/tune", json=body, headers=AUTH, timeout=30).status_code == 202
        # a trial launched: the study is in its loop (a long budget and a space of many configurations)
        status = wait_status(base, "orphan", lambda s: s["status"] != "running" or (s["report"] or {}).get("launched"))
        assert status["status"] == "running", status
        started[0].kill()  # kill -9 of the server: its worker lives on
        started[0].wait(timeout=60)
    with running_server(tmp_path, token=TOKEN) as base:
        assert httpx.get(base + "/tune/orphan", timeout=30).json()["status"] == "running"
        assert httpx.delete(base + "/tune/orphan", timeout=30).status_code == 401  # the token, as POST /tune
        r = httpx.delete(base + "/tune/orphan", headers=AUTH, timeout=30)
        assert r.status_code == 202, r.text
        status = wait_status(base, "orphan", lambda s: s["status"] != "running", deadline_s=300)
        assert status["status"] == "interrupted" and status["exit_code"] == 143, status
        assert "SIGTERM" in status["why"] and "resumes" in status["why"], status
    stored = optuna.load_study(study_name="orphan", storage=f"sqlite:///{tmp_path / 'tune.db'}")
    states = [t.state for t in stored.get_trials()]
    assert optuna.trial.TrialState.RUNNING not in states  # nothing left running in the storage
    # resumable: the trial it stopped is queued again for the next POST /tune of the study
    assert optuna.trial.TrialState.WAITING in states, [(t.state, t.user_attrs.get("status")) for t in stored.get_trials()]
