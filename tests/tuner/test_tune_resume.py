"""Resume and scale-out: kill -9 of the tuner mid-trial then the same command (finished trials
kept, the interrupted one failed and retried); two workers on a real PostgreSQL server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tune_helpers import FAST, PLAN, env, plan
from tuner_pg import ensure_postgres, throwaway_cluster

pytestmark = pytest.mark.slow


def _wait_for(pred, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _live_members(pgid: int) -> list[str]:
    """Members of the process group that still run (a zombie is dead: where PID 1 does not
    reap orphans, as in some CI containers, killpg(pgid, 0) would still find it)."""
    live = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(f"{d.name} {fields[0]} {cmd[:200]}")
    return live


def test_kill_9_mid_trial_then_resume(tmp_path):
    db = f"sqlite:///{tmp_path}/r.db"
    args = ["tune", *FAST, "--choices", "micro_batch=2,4", "--budget", "4m", "--storage", db,
            "--study", "resume", "--top-k", "2", "--heartbeat-interval", "1", "--grace-period", "2",
            "--workdir", str(tmp_path / "w"), "--remeasure-rounds", "0"]
    proc = subprocess.Popen([*PLAN, *args], cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def running_second():
            try:
                st = optuna.load_study(study_name="resume", storage=db)
            except KeyError:
                return None
            done = st.get_trials(states=(TrialState.COMPLETE,))
            run = [t for t in st.get_trials(states=(TrialState.RUNNING,)) if "pgid" in t.user_attrs]
            return (done, run[0]) if done and run else None

        done, victim = _wait_for(running_second, 200, "one finished trial and a second one running")
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGKILL)  # the tuner dies in the middle of a trial
        proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # its trainer and the trainer's ranks die with it (parent-death signal on each)
    deadline = time.monotonic() + 20
    while _live_members(victim.user_attrs["pgid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _live_members(victim.user_attrs["pgid"]), "ranks outlived the killed tuner"
    finished_key = done[0].user_attrs["config_key"]
    victim_key = victim.user_attrs["config_key"]

    r = plan([*args, "--json", "--no-progress"], tmp_path)
    rep = json.loads(r.stdout)
    assert not _live_members(victim.user_attrs["pgid"]), "the interrupted trial's ranks still run"
    st = optuna.load_study(study_name="resume", storage=db)
    old = st.trials[victim.number]
    assert old.state == TrialState.FAIL and old.user_attrs["status"] == "interrupted"
    complete = st.get_trials(states=(TrialState.COMPLETE,))
    keys = Counter(t.user_attrs["config_key"] for t in complete)
    assert keys[finished_key] == 1, "a finished trial was run again"
    assert keys[victim_key] == 1, "the interrupted trial was not retried"
    retried = [t for t in complete if t.user_attrs["config_key"] == victim_key][0]
    assert retried.number > victim.number and retried.user_attrs["source"] == "retry"
    assert len(keys) == 2 and max(keys.values()) == 1
    assert rep["by_status"]["ok"] == 2 and rep["by_status"]["interrupted"] == 1


def test_two_workers_share_one_postgres_study(tmp_path):
    bindir, why = ensure_postgres()
    if bindir is None:
        pytest.skip(why)
    with throwaway_cluster(bindir) as url:
        args = ["tune", *FAST, "--choices", "micro_batch=2,4,8", "--budget", "4m", "--storage", url,
                "--study", "duo", "--top-k", "1", "--seed", "0", "--remeasure-rounds", "0"]
        plan([*args, "--init-only"], tmp_path)  # create the study once, then start the workers
        workers = [subprocess.Popen([*PLAN, *args, "--json", "--seed", str(i)], cwd=tmp_path, env=env(),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for i in range(2)]
        outs = [w.communicate(timeout=280) for w in workers]
        for w, (out, err) in zip(workers, outs):
            assert w.returncode == 0, err[-2000:]
        st = optuna.load_study(study_name="duo", storage=url)
        ran = [t for t in st.trials if t.user_attrs.get("status") in ("ok", "oom", "crash", "timeout", "bad_config")]
        keys = Counter(t.user_attrs["config_key"] for t in ran)
        assert len(keys) == 3 and max(keys.values()) == 1, f"a configuration ran twice: {keys}"
        assert len({t.user_attrs["worker_id"] for t in ran}) == 2, "one worker did all the work"
        report = json.loads(plan(["tune", "report", "--study", "duo", "--storage", url, "--json"], tmp_path).stdout)
        assert report["launched"] == 3


@pytest.mark.parametrize("sig, said, code", [(signal.SIGINT, "Ctrl-C", 130), (signal.SIGTERM, "SIGTERM", 143)])
def test_ctrl_c_stops_cleanly_and_keeps_everything(tmp_path, sig, said, code):
    """Ctrl-C, and a SIGTERM (`kill`, `timeout`, a batch system's time limit) alike: the running trial's
    ranks are killed, the trial is marked interrupted and queued again, the report is printed (a SIGTERM
    used to end the tuner at once: no report, the trial left 'running' in the storage). The exit status is the
    shell's for a signal, 130 / 143 (it was 0: a script's `plan tune ... && next` went on as if the study had
    finished)."""
    db = f"sqlite:///{tmp_path}/c.db"
    args = ["tune", *FAST, "--choices", "micro_batch=2", "--budget", "4m", "--storage", db, "--study", "ctrlc"]
    proc = subprocess.Popen([*PLAN, *args], cwd=tmp_path, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        def running():
            try:
                st = optuna.load_study(study_name="ctrlc", storage=db)
            except KeyError:
                return None
            run = [t for t in st.get_trials(states=(TrialState.RUNNING,)) if "pgid" in t.user_attrs]
            return run[0] if run else None

        victim = _wait_for(running, 120, "a running trial")
        proc.send_signal(sig)  # SIGINT: what Ctrl-C sends to the tuner
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err[-2000:]
    assert f"stopped by {said}" in out and "run the same command to resume" in out
    assert not _live_members(victim.user_attrs["pgid"]), "the interrupted trial's ranks still run"
    st = optuna.load_study(study_name="ctrlc", storage=db)
    t = st.trials[victim.number]
    assert t.state == TrialState.FAIL and t.user_attrs["status"] == "interrupted"
    waiting = st.get_trials(states=(TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].user_attrs["config_key"] == t.user_attrs["config_key"]  # queued again
