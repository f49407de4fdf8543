"""What `plan tune` starts on this machine: no more ranks than it has devices (64 CPU ranks on 2 cores ran a
64-rank network bench for minutes), and nothing left running after the network bench (its launcher was
killed alone on a timeout or a signal, its ranks ran on)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from typer.testing import CliRunner

from plan_cli.main import app
from tuner.network import run_group


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_more_ranks_than_this_machine_has_is_refused(tmp_path):
    n = (os.cpu_count() or 1) + 1
    r = CliRunner().invoke(app, ["tune", "--model", "tiny", "--gpus", str(n), "--budget", "30s", "--no-network-bench",
                                 "--max-trials", "1", "--storage", f"sqlite:///{tmp_path}/t.db", "--no-progress"],
                           env={"COLUMNS": "300"})
    assert r.exit_code == 2, r.output
    words = " ".join(r.output.split())
    assert f"error: gpus: {n} ranks, but this machine has {n - 1} CPU cores and every trial runs here" in words, words


def test_what_a_command_leaves_in_its_group_is_killed(tmp_path):
    """The launcher ends and leaves a process in its group (as a rank outliving torch's agent would): it is
    killed when run_group returns."""
    script = ("import subprocess, sys; c = subprocess.Popen(['sleep', '1000'], stdout=subprocess.DEVNULL, "
              "stderr=subprocess.DEVNULL); print(c.pid)")
    code, out, _ = run_group([sys.executable, "-c", script], timeout_s=120)
    left = int(out.strip())
    assert code == 0 and not _alive(left)
