"""`plan allreduce-bench` under its own elastic launch with ranks that really fail (gloo told to use a network
interface this machine lacks: every rank's init_process_group raises): one line saying what the rank raised and
a non-zero exit, not torch's ChildFailedError traceback and failure table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


@pytest.mark.timeout(120)
def test_a_raising_rank_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("SLURM_")}
    env |= {"GLOO_SOCKET_IFNAME": "nosuchif0", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "400"}
    proc = subprocess.run([sys.executable, "-m", "plan_cli.main", "allreduce-bench", "--nproc", "2", "--sizes", "1K"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and "ChildFailedError" not in proc.stderr, proc.stderr[-3000:]
    last = lines[-1]
    assert last.startswith("error: ranks: a rank failed: rank "), last
    assert "RuntimeError" in last and "nosuchif0" in last, last
    # what else is there: torch's own one-line notes of the failed / terminated process, no table, no stack
    assert all("torch/" in line for line in lines[:-1]), lines
    assert proc.stdout.strip() == ""
