"""Stale DeepSpeed build locks in torch's extensions cache: detected, cleared, reported; a
trial killed mid-build does not hang the next one. Every test uses its own temporary
TORCH_EXTENSIONS_DIR: the machine's shared cache is never touched."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tuner import locks
from tuner.runner import kill_group, rank_env, trainer_command
from tuner.trial import run_guarded


def _lock(root: Path, op: str, age_s: float) -> Path:
    d = root / "py311_cpu" / op
    d.mkdir(parents=True)
    lock = d / "lock"
    lock.write_text("")
    t = time.time() - age_s
    os.utime(lock, (t, t))
    return lock


def test_old_lock_without_builder_is_cleared_and_reported(tmp_path):
    lock = _lock(tmp_path, "cpu_adam", age_s=2000)
    young = _lock(tmp_path, "deepspeed_shm_comm", age_s=5)
    cleared = locks.clear_stale_locks(tmp_path, older_than_s=900)
    assert [c.path for c in cleared] == [str(lock)] and not lock.exists()
    assert "stale build lock" in cleared[0].describe() and "cpu_adam" in cleared[0].describe()
    assert young.exists()  # may be a build in progress: left alone


def test_lock_with_a_live_builder_is_kept(tmp_path):
    lock = _lock(tmp_path, "cpu_adam", age_s=2000)
    builder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], cwd=lock.parent)
    try:
        time.sleep(0.3)
        assert builder.pid in locks.builders_in(lock.parent)
        assert locks.clear_stale_locks(tmp_path, older_than_s=900) == [] and lock.exists()
    finally:
        builder.kill()
        builder.wait()
    assert len(locks.clear_stale_locks(tmp_path, older_than_s=900)) == 1 and not lock.exists()


def test_a_dead_trials_fresh_lock_is_cleared(tmp_path):
    started = time.time() - 1
    lock = _lock(tmp_path, "deepspeed_shm_comm", age_s=0)
    assert locks.clear_stale_locks(tmp_path, older_than_s=900) == []
    assert len(locks.clear_stale_locks(tmp_path, older_than_s=900, created_after=started)) == 1
    assert not lock.exists()


def test_extensions_dir_follows_torch(tmp_path):
    assert locks.extensions_dir({"TORCH_EXTENSIONS_DIR": str(tmp_path)}) == tmp_path
    assert locks.extensions_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/torch_extensions")


@pytest.mark.slow
def test_trial_killed_mid_build_then_next_trial_runs(tmp_path):
    """A DeepSpeed trial JIT-builds its shm comm op into an empty extensions dir; it is killed
    as soon as the build lock appears (what a timeout does). The lock it leaves is removed and
    said so, and the next trial (same op) builds it and runs."""
    ext = tmp_path / "ext"
    env = rank_env(2, dict(os.environ, TORCH_EXTENSIONS_DIR=str(ext), OMP_NUM_THREADS="1"))
    knobs = {"sharding": "zero1", "offload": "none", "activation_checkpointing": "none", "precision": "fp32",
             "micro_batch": 2, "grad_accum": 1}

    def trial(name: str, timeout_s: float, on_start):
        wd = tmp_path / name
        wd.mkdir()
        cmd = trainer_command(knobs, model="tiny", nproc=2, steps=3, json_out=wd / "r.json",
                              extra_args=["--seq-len", "32", "--warmup-steps", "1"])
        return run_guarded(cmd, env=env, json_out=wd / "r.json", timeout_s=timeout_s, memory_cap_bytes=None,
                           log_path=wd / "log", on_start=on_start)

    seen: list[Path] = []

    def kill_at_lock(pid: int) -> None:
        def watch() -> None:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                found = locks.find_locks(ext)
                if found:
                    seen.extend(found)
                    kill_group(pid)
                    return
                time.sleep(0.05)
        threading.Thread(target=watch, daemon=True).start()

    first = trial("killed", 300, kill_at_lock)
    assert seen, "the trial never started a build"
    assert first.status != "ok"
    assert any("stale build lock" in n for n in first.notes), first.notes
    assert locks.find_locks(ext) == []
    second = trial("next", 400, lambda pid: None)
    assert second.status == "ok", second.log_tail[-2000:]
    assert locks.find_locks(ext) == []
