"""Stale DeepSpeed build locks in torch's extensions cache: detected, cleared, reported; a
trial or a trainer killed mid-build does not hang the next one. Every test uses its own temporary
TORCH_EXTENSIONS_DIR: the machine's shared cache is never touched."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trainer import ext_locks as locks
from tuner.runner import kill_group, rank_env, run_command, trainer_command
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


# torch's own lock protocol, run in a child: take the baton and hold it (a build), or meet it and wait (the path
# comes in the environment: a process naming the build folder on its command line counts as a builder)
_HOLD = ("import os, time\nfrom torch.utils.file_baton import FileBaton\nb = FileBaton(os.environ['LOCK'])\n"
         "assert b.try_acquire()\nprint('held', flush=True)\ntime.sleep(300)\n")
_WAIT = ("import os\nfrom torch.utils.file_baton import FileBaton\nb = FileBaton(os.environ['LOCK'])\n"
         "assert not b.try_acquire()\nprint('waiting', flush=True)\nb.wait()\nprint('done', flush=True)\n")


def _holder(lock: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, LOCK=str(lock)))
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_held_open_is_kept_and_a_killed_holders_lock_is_an_orphan(tmp_path):
    """FileBaton keeps its lock's descriptor open while it builds: held = live, whatever its age; once the
    holder is killed (kill -9, as a timeout does) nothing holds it and it is an orphan at any age."""
    d = tmp_path / "py311_cpu" / "cpu_adam"
    d.mkdir(parents=True)
    lock = d / "lock"
    proc = _holder(lock)
    try:
        assert proc.pid in locks.holders(lock)[0]
        assert not locks.orphaned(lock)
        assert locks.clear_stale_locks(tmp_path, older_than_s=900, orphans=True) == []
        assert locks.clear_stale_locks(tmp_path, older_than_s=0) == []  # held: not even the age rule takes it
        assert lock.exists()
    finally:
        proc.kill()
        proc.wait()
    assert lock.exists() and locks.orphaned(lock)
    assert locks.clear_stale_locks(tmp_path, older_than_s=900) == []  # young: the age rule alone keeps it
    cleared = locks.clear_stale_locks(tmp_path, older_than_s=900, orphans=True)
    assert [c.path for c in cleared] == [str(lock)] and not lock.exists()


def test_shared_file_systems_fall_back_to_the_age_rule(tmp_path):
    mounts = ("/dev/sda1 / ext4 rw 0 0\nserver:/home /home nfs4 rw 0 0\n"
              "fs /lus lustre rw 0 0\n/dev/x /home/u/local\\040dir xfs rw 0 0\nsshfs#h: /mnt/s fuse.sshfs rw 0 0\n")
    assert locks.fs_type(Path("/home/u/.cache"), mounts) == "nfs4"
    assert locks.fs_type(Path("/home/u/local dir/x"), mounts) == "xfs"
    assert locks.fs_type(Path("/homework"), mounts) == "ext4"  # a prefix of the name is not the mount
    assert [locks.is_shared_fs(Path(p), mounts) for p in ("/home/u", "/lus/a", "/mnt/s/x", "/tmp", "/home/u/local dir")] \
        == [True, True, True, False, False]
    assert locks.is_shared_fs(Path("/x"), "")  # nothing known: shared, only the age rule


def test_lock_watch_frees_a_waiting_build(tmp_path):
    """What hung every later DeepSpeed run: a builder killed with its baton taken, then another process
    meeting the lock in torch's FileBaton.wait. The trainer's LockWatch removes the orphan and the wait ends."""
    d = tmp_path / "deepspeed_shm_comm"
    d.mkdir()
    lock = d / "lock"
    holder = _holder(lock)
    holder.kill()
    holder.wait()
    waiter = subprocess.Popen([sys.executable, "-c", _WAIT], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, LOCK=str(lock)))
    said: list[str] = []
    try:
        assert waiter.stdout.readline().strip() == "waiting"  # in FileBaton.wait: before, it waited forever
        with locks.LockWatch(tmp_path, interval_s=0.2, say=said.append) as watch:
            out, _ = waiter.communicate(timeout=120)
        assert out.strip() == "done"
        assert [c.path for c in watch.cleared] == [str(lock)] and not lock.exists()
        assert len(said) == 1 and "stale build lock" in said[0] and "deepspeed_shm_comm" in said[0]
    finally:
        waiter.kill()
        waiter.wait()


def test_lock_watch_leaves_a_live_build_alone(tmp_path):
    d = tmp_path / "fused_adam"
    d.mkdir()
    lock = d / "lock"
    holder = _holder(lock)
    try:
        with locks.LockWatch(tmp_path, interval_s=0.05, older_than_s=0) as watch:
            assert watch.check() == []
        assert watch.cleared == [] and lock.exists()
    finally:
        holder.kill()
        holder.wait()


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
    # `plan train` on its own (no tuner around it) after a killed build: a fresh orphan lock in the built op's
    # folder; the trainer removes it itself instead of waiting on it forever
    (so,) = list(ext.rglob("deepspeed_shm_comm*.so"))
    planted = so.parent / "lock"
    planted.write_text("")
    wd = tmp_path / "plain"
    wd.mkdir()
    cmd = trainer_command(knobs, model="tiny", nproc=2, steps=3, json_out=wd / "r.json",
                          extra_args=["--seq-len", "32", "--warmup-steps", "1"])
    third = run_command(cmd, env=env, json_out=wd / "r.json", timeout_s=400, memory_cap_bytes=None,
                        log_path=wd / "log")
    assert third.status == "ok", third.log_tail[-2000:]
    assert "removed stale build lock" in third.log_tail and not planted.exists()
