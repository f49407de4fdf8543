"""A POST /tune study's worker, for the user watching it: GET /tune/STUDY says it is starting, and what it is doing
(its imports, measuring this machine, launching its first trial), until its first trial has ended (it said only
'running' for minutes); and the server's own Ctrl-C stops the workers it adopted from a `kill -9`'d server as it
stops its own (they were left running), resumably. Real servers (the app, its lifespan) and real workers."""

from __future__ import annotations

import json
import os
import signal
import time

from fastapi.testclient import TestClient

from plan_service import ServiceConfig, create_app

MARK = "[plan serve worker] "


def _config(tmp_path) -> ServiceConfig:
    return ServiceConfig(storage=f"sqlite:///{tmp_path / 'tune.db'}", workdir=tmp_path / "work", insecure=True)


def _phases(folder) -> list[str]:
    """The worker's phase lines, in order (its log)."""
    text = (folder / "worker.log").read_text(errors="replace")
    return [line[len(MARK):] for line in text.splitlines() if line.startswith(MARK)]


def _until(what: str, check, deadline_s: float = 300):
    """Poll `check` (a condition, not a delay) until it is true or the deadline."""
    deadline = time.monotonic() + deadline_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"waited {deadline_s:g} s for {what}"
        time.sleep(0.2)
    return found


def test_a_study_reads_starting_with_what_its_worker_does_until_its_first_trial_has_ended(tmp_path):
    body = {"model": "tiny", "gpus": 1, "budget_s": 600, "max_trials": 1, "backend": "fsdp", "study": "phases"}
    with TestClient(create_app(_config(tmp_path))) as client:
        assert client.post("/tune", json=body).status_code == 202
        job = client.app.state.jobs.get("phases")
        os.kill(job.pid, signal.SIGSTOP)  # held wherever it is: its first trial cannot have ended
        try:
            status = client.get("/tune/phases").json()
        finally:
            os.kill(job.pid, signal.SIGCONT)
        assert status["status"] == "running" and status["phase"] == "starting", status
        assert status["doing"] in ("launching its worker process", "loading the tuner (Python imports)",
                                   "opening the study", "measuring this machine: its CPU peak (a matmul per rank)") \
            or status["doing"].startswith("its first trial #0"), status
        assert status["phase_s"] >= 0, status
        job.proc.wait(timeout=600)
        status = client.get("/tune/phases").json()
        assert status["status"] == "finished" and status["phase"] is None and status["doing"] is None, status
        assert status["report"]["running"] == [], status
        best = status["report"]["best"]  # one trial, measured once: chosen by that run
        assert best["chosen_by"] == "one run" and best["chosen_tokens_per_s"] == best["tokens_per_s"], best
    said = _phases(tmp_path / "work" / "phases")
    assert said[:3] == ["starting: loading the tuner (Python imports)", "starting: opening the study",
                        "starting: measuring this machine: its CPU peak (a matmul per rank)"], said
    assert said[3].startswith("starting: its first trial #0 (") and "launching the trainer" in said[3], said
    assert said[4].startswith("trials: trial #0 ended (ok)"), said
    assert said[5:] == ["ending: launched 1 trial (--max-trials): writing its report"], said


def test_the_next_servers_ctrl_c_stops_the_worker_it_adopted_from_a_killed_server_resumably(tmp_path):
    config = _config(tmp_path)
    first = TestClient(create_app(config))  # never shut down, as a `kill -9`'d server: its worker lives on
    assert first.post("/tune", json={"model": "tiny", "gpus": 1, "budget_s": 600, "study": "adopted"}).status_code == 202
    worker = first.app.state.jobs.get("adopted").proc
    folder = tmp_path / "work" / "adopted"
    try:
        _until("the worker to be in its main (its signal handlers set)", lambda: _phases(folder))
        with TestClient(create_app(config)) as second:  # the next server: shows it running, can stop it
            assert second.get("/tune/adopted").json()["status"] == "running"
            assert second.app.state.jobs.running() == 1
        # the second server stopped (its lifespan's end: a Ctrl-C or SIGTERM of `plan serve`): the adopted worker too
        assert worker.poll() is not None, "the adopted worker was left running by the server's shutdown"
        assert worker.returncode == 130, worker.returncode  # SIGINT, as the server's own workers get
        assert json.loads((folder / "stop.json").read_text())["by"] == "the server stopping"
        with TestClient(create_app(config)) as third:
            status = third.get("/tune/adopted").json()
        assert status["status"] == "interrupted" and status["exit_code"] == 130, status
        assert status["stopped_by"].startswith("the server stopping at ") and "SIGINT" in status["stopped_by"], status
        assert status["resume"] == "POST /tune with study 'adopted'", status
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()


def test_an_adopted_worker_that_does_not_stop_on_sigint_is_killed_and_reads_so(tmp_path):
    """A worker of an earlier server that ignores the SIGINT (stuck) is killed after the wait, as the server's own
    are, and reads as killed by the server stopping (not 'ended without an outcome, no one known')."""
    import subprocess
    import sys

    from plan_service.tune_jobs import TuneJobs, start_ticks

    folder = tmp_path / "work" / "stuck"
    folder.mkdir(parents=True)
    ready = tmp_path / "ready"
    code = (f"import signal, time, pathlib; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            f"pathlib.Path({str(ready)!r}).write_text('1'); time.sleep(300)")
    # a worker's command line (module and config path), in its own session as the server starts its workers
    proc = subprocess.Popen([sys.executable, "-c", code, "-m", "plan_service.tune_worker", str(folder / "tune_config.json")],
                            start_new_session=True)
    try:
        (folder / "worker.json").write_text(json.dumps({"pid": proc.pid, "start_ticks": start_ticks(proc.pid)}))
        _until("the stuck worker's SIGINT to be ignored", ready.exists, deadline_s=60)
        jobs = TuneJobs(f"sqlite:///{tmp_path / 'tune.db'}", tmp_path / "work")
        assert jobs.running() == 1
        jobs.stop_all(timeout_s=1)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        ended = TuneJobs(f"sqlite:///{tmp_path / 'tune.db'}", tmp_path / "work").get("stuck").ended()
        assert ended.status == "interrupted" and ended.code == -9, ended
        assert ended.stopped_by.startswith("the server stopping (its worker had not stopped 1 s after its SIGINT) at ")
        assert ended.stopped_by.endswith("(SIGKILL to its worker)"), ended
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
