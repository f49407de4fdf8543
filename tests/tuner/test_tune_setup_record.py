"""A brand-new study exists from its first second: `plan tune report` shows it while its network bench runs (with
the bench's step), and a kill -9 during the bench leaves a study that the same command sets up again (measuring
again) instead of "no such study" / a half-made study. Real processes: `plan tune`, its bench's ranks, SQLite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import optuna
import pytest
from fastapi.testclient import TestClient

from plan_service import ServiceConfig, create_app

from tune_helpers import FAST, PLAN, env, plan

pytestmark = pytest.mark.slow

# FAST without --no-network-bench: this test is about the bench
WITH_BENCH = [a for a in FAST if a != "--no-network-bench"]


def _setup_rec(db: str, name: str) -> dict | None:
    try:
        st = optuna.load_study(study_name=name, storage=db)
    except Exception:  # noqa: BLE001 - not created yet (or the schema being made)
        return None
    return st.user_attrs.get("plan_tune_setup")


def test_a_study_measuring_its_network_is_reported_and_a_kill_9_in_the_bench_resumes(tmp_path):
    db = f"sqlite:///{tmp_path}/s.db"
    args = ["tune", *WITH_BENCH, "--budget", "3m", "--storage", db, "--study", "fresh", "--init-only"]
    proc = subprocess.Popen([*PLAN, *args], cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:  # the bench has started (its ranks launching or measuring): report, then kill -9
            rec = _setup_rec(db, "fresh")
            if rec and "bench" in (rec.get("doing") or "") or (rec or {}).get("bench"):
                break
            assert proc.poll() is None, "plan tune ended before its bench was seen"
            assert time.monotonic() < deadline, "the bench never started"
            time.sleep(0.1)
        r = plan(["tune", "report", "--study", "fresh", "--storage", db, "--json"], tmp_path)
        rep = json.loads(r.stdout)
        assert rep["trials"] == 0 and rep["setup"]["phase"] == "measuring the network", rep
        assert rep["setup"]["worker"] == "alive" and "all-reduce bench" in rep["setup"]["doing"], rep["setup"]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "plan_tune" not in optuna.load_study(study_name="fresh", storage=db).user_attrs  # killed mid-set-up
    r = plan(["tune", "report", "--study", "fresh", "--storage", db], tmp_path)
    assert "its set-up stopped while measuring the network" in r.stdout and "run the same" in r.stdout, r.stdout
    r = plan(["export", "deepspeed", "--from-study", "fresh", "--storage", db], tmp_path, check=False)
    assert r.returncode == 2 and "was stopped while being set up" in r.stderr, r.stderr
    with TestClient(create_app(ServiceConfig(storage=db, workdir=tmp_path / "work"))) as client:  # as plan serve reads it
        got = client.get("/tune/fresh")
        assert got.status_code == 200 and got.json()["status"] == "stored", got.text
        assert got.json()["report"]["setup"]["worker"] == "dead", got.json()
        got = client.get("/export/fresh/deepspeed")
        assert got.status_code == 422 and "was stopped while being set up" in got.text, got.text
    plan(args, tmp_path)  # the same command: measures again, saves the study's record
    st = optuna.load_study(study_name="fresh", storage=db)
    assert st.user_attrs["plan_tune"]["network_note"].startswith("measured"), st.user_attrs["plan_tune"]
    rec = st.user_attrs["plan_tune_setup"]
    assert rec["attempt"] == 2 and "stopped (its worker died)" in rec["resumed_from"], rec
    rep = json.loads(plan(["tune", "report", "--study", "fresh", "--storage", db, "--json"], tmp_path).stdout)
    assert rep["setup"] is None and rep["network"].startswith("measured"), rep


def test_the_bench_tells_its_step_as_it_goes():
    from tuner.network import measure_busbw
    from tuner.study_setup import bench_step

    seen: list[dict | None] = []
    busbw, note = measure_busbw(2, on_progress=seen.append)
    assert busbw and note.startswith("measured"), note
    assert seen[0] is None  # launching the ranks
    last = seen[-1]  # read once more after the bench ended: every size done, with its busbw
    assert last["of"] == 3 and last["now"] is None and [d["size"] for d in last["done"]] == ["4 MiB", "16 MiB", "64 MiB"]
    assert all(d["busbw_gbps"] > 0 for d in last["done"]), last
    assert all(s["of"] == 3 and len(s["done"]) <= 3 for s in seen[1:]), seen
    assert bench_step(last).startswith("all 3 message sizes done: 4 MiB "), bench_step(last)
