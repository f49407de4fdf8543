"""A `plan serve` worker (or `plan tune`) killed with -9 while it measures this machine's all-reduce: the bench's
launcher and ranks die with it (they benched on, out of reach in their own process group: the tuner's timeout and
group kill died with the tuner). Real processes: the tuner's own run_group in a process that is then killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

MARK = "PLAN_TEST_BENCH_MARK"


def _marked(mark: str) -> list[int]:
    """Live (not zombie) processes whose environment carries `mark`."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if f"{MARK}={mark}".encode() in (d / "environ").read_bytes() and \
                    (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(d.name))
        except OSError:
            continue
    return found


def test_a_bench_dies_with_the_process_that_runs_it_when_that_is_killed_9():
    mark = uuid.uuid4().hex
    # a long bench (many 64 MiB all-reduces on 2 ranks: minutes here), started the way the tuner starts it
    sizes = ",".join(["64M"] * 400)
    script = ("import sys; from tuner.network import run_group; from tuner.runner import rank_env; "
              f"run_group([sys.executable, '-m', 'plan_cli.main', 'allreduce-bench', '--nproc', '2', '--sizes', "
              f"'{sizes}'], 3600, rank_env(2))")
    env = os.environ | {MARK: mark, "OMP_NUM_THREADS": "1"}
    tuner = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while len(_marked(mark)) < 4:  # the "tuner", the bench's launcher (its exec wrapper) and 2 ranks
            assert tuner.poll() is None and time.monotonic() < deadline, "the bench's ranks did not start"
            time.sleep(0.2)
        os.kill(tuner.pid, signal.SIGKILL)
        tuner.wait()
        deadline = time.monotonic() + 60  # parent-death signals: at once; the bench alone would run for minutes
        while left := _marked(mark):
            assert time.monotonic() < deadline, f"still running after the kill -9 of the process that ran it: {left}"
            time.sleep(0.2)
    finally:
        for pid in _marked(mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait()
