"""Trial processes without preexec_fn, and workers known by a unique id with a liveness lock
(issue 13): two workers with the same hostname and PID (two containers) never fail each
other's live trials; a dead local worker's trial is failed at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tuner import storage as st
from tuner.study_store import StudyStore
from tuner.runner import run_command
from tuner.worker_id import worker_alive, worker_id

HOLDER = "from tuner.worker_id import worker_id; import sys, time; print(worker_id(), flush=True); time.sleep(120)"


def _holder() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True,
                            env=os.environ | {"PYTHONPATH": os.getcwd()})
    return proc, proc.stdout.readline().strip()


def test_worker_id_is_unique_and_its_lock_tells_life():
    me = worker_id()
    assert me == worker_id() and len(me) == 32 and worker_alive(me) is True
    proc, other = _holder()
    try:
        assert other != me and worker_alive(other) is True
    finally:
        proc.kill()
        proc.wait()
    assert worker_alive(other) is False  # the kernel dropped its lock
    assert worker_alive("0" * 32) is None  # not here: another machine or container


def test_a_worker_adopts_the_id_its_server_recorded():
    wid = "c0ffee" + "0" * 26
    code = (f"from tuner.worker_id import adopt, worker_id; import time; adopt({wid!r}); "
            "print(worker_id(), flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=os.environ | {"PYTHONPATH": os.getcwd()})
    try:
        assert proc.stdout.readline().strip() == wid and worker_alive(wid) is True  # its trials carry it, alive
    finally:
        proc.kill()
        proc.wait()
    assert worker_alive(wid) is False
    bad = subprocess.run([sys.executable, "-c", "from tuner.worker_id import adopt; adopt('../x')"], capture_output=True,
                         text=True, env=os.environ | {"PYTHONPATH": os.getcwd()})
    assert bad.returncode != 0 and "32 hex digits" in bad.stderr, bad.stderr


def test_only_trials_of_known_dead_workers_are_failed(tmp_path):
    url = f"sqlite:///{tmp_path / 'w.db'}"
    store = StudyStore.open(st.open_storage(url), "w", create=True)
    study = store.study
    live, live_id = _holder()
    dead, dead_id = _holder()
    dead.kill()
    dead.wait()
    trials = {}
    for name, wid in (("live", live_id), ("dead", dead_id), ("elsewhere", "f" * 32)):
        t = study.ask()
        # same hostname and PID for all three: the old identity would have judged them alike
        t.set_user_attr("worker_id", wid)
        t.set_user_attr("worker_host", st.HOST)
        t.set_user_attr("worker_pid", 1)
        trials[name] = t.number
    try:
        assert store.fail_dead_local_trials() == [trials["dead"]]
        state = {name: study.trials[n].state for name, n in trials.items()}
        assert state == {"live": TrialState.RUNNING, "dead": TrialState.FAIL, "elsewhere": TrialState.RUNNING}
        assert study.trials[trials["dead"]].user_attrs["status"] == "interrupted"
        retry = study.trials[-1]  # the stale-trial callback queued it again, marked as a retry
        assert retry.state == TrialState.WAITING and store.is_retry(retry.number)
        assert not store.is_retry(trials["live"])
        assert store.fail_dead_local_trials() == []  # done once: nothing left to fail
    finally:
        live.kill()
        live.wait()


PROBE = textwrap.dedent("""
    import ctypes, os, resource
    sig = ctypes.c_int()
    ctypes.CDLL(None).prctl(2, ctypes.byref(sig))  # PR_GET_PDEATHSIG
    print("pdeathsig", sig.value, "rlimit_as", resource.getrlimit(resource.RLIMIT_AS)[0],
          "pgid_is_pid", os.getpgid(0) == os.getpid())
""")


def test_trial_process_gets_its_limits_without_preexec_fn(tmp_path):
    cap = 3 * 2**30
    pids = []
    out = run_command([sys.executable, "-c", PROBE], json_out=tmp_path / "none.json", timeout_s=60,
                      memory_cap_bytes=cap, env=dict(os.environ), log_path=tmp_path / "log",
                      on_start=pids.append)
    assert out.exit_code == 0, out.log_tail
    assert f"pdeathsig {int(signal.SIGKILL)} rlimit_as {cap} pgid_is_pid True" in out.log_tail, out.log_tail


def test_a_killed_tuner_takes_its_trial_down(tmp_path):
    pidfile = tmp_path / "pid"
    parent = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        from tuner.runner import run_command
        run_command([sys.executable, "-c", "import time; time.sleep(120)"], json_out=Path({str(tmp_path / 'r.json')!r}),
                    timeout_s=120, memory_cap_bytes=None, env=dict(os.environ), log_path=Path({str(tmp_path / 'log')!r}),
                    on_start=lambda pid: Path({str(pidfile)!r}).write_text(str(pid)))
    """)
    tuner = subprocess.Popen([sys.executable, "-c", parent], env=os.environ | {"PYTHONPATH": os.getcwd()})
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline and tuner.poll() is None
        time.sleep(0.05)
    child = int(pidfile.read_text())
    time.sleep(0.5)  # let the wrapper arm the signal and exec
    tuner.send_signal(signal.SIGKILL)
    tuner.wait()
    deadline = time.monotonic() + 20
    while Path(f"/proc/{child}").exists() and Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the trial outlived its tuner"
        time.sleep(0.05)
