"""Shared bits of the tuner's integration tests: a tiny, fast space and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLAN = [sys.executable, "-m", "plan_cli.main"]

# DDP on the tiny model at seq 32: the quickest real trials (start-up dominates)
FAST = ["--model", "tiny", "--gpus", "2", "--seq-len", "32", "--steps", "3",
        "--choices", "sharding=none", "--choices", "offload=none",
        "--choices", "activation_checkpointing=none", "--choices", "precision=fp32",
        "--no-network-bench", "--no-progress"]


def env() -> dict:
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = "1"
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    return e


def plan(args: list[str], cwd: Path, timeout: float = 280, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([*PLAN, *args], cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"plan {' '.join(args)} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r
