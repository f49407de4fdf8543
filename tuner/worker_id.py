"""Who runs a trial: a unique id per worker process, with a liveness lock as its heartbeat.

A worker was judged dead by hostname + PID, so two containers with the same hostname (and
PID 1 in each) failed each other's live trials. Now each worker process has a random id and
holds an exclusive flock on `<tmp>/plan-tune-workers/<id>.lock` for as long as it lives (the
kernel drops it when the process dies, kill -9 included). Another worker can then tell:
- the lock file is here and nobody holds it -> that worker is dead (fail its trial now);
- it is held -> alive;
- no such file (another machine or container) -> unknown: Optuna's trial heartbeat decides
  after its grace period.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import tempfile
import uuid
from pathlib import Path

_state: dict = {}  # pid -> (worker id, open lock file); a forked child gets its own


def lock_dir() -> Path:
    return Path(os.environ.get("PLAN_TUNE_WORKER_DIR") or Path(tempfile.gettempdir()) / "plan-tune-workers")


def worker_id() -> str:
    """This process's worker id (created, and its lock taken, on first use)."""
    pid = os.getpid()
    if pid not in _state:
        _take(uuid.uuid4().hex, pid)
    return _state[pid][0]


def adopt(wid: str) -> str:
    """Make `wid` this process's worker id (a `plan serve` worker takes the id its server recorded at launch, so
    the server tells its trials from those of an earlier worker that had the same pid); before any trial runs."""
    if not is_worker_id(wid):
        raise ValueError(f"a worker id is 32 hex digits, not {wid!r}")
    pid = os.getpid()
    if pid in _state and _state[pid][0] != wid:
        raise RuntimeError(f"this process is worker {_state[pid][0]} already")
    if pid not in _state:
        _take(wid, pid)
    return wid


def is_worker_id(wid) -> bool:
    return isinstance(wid, str) and len(wid) == 32 and all(c in "0123456789abcdef" for c in wid)


def _take(wid: str, pid: int) -> None:
    folder = lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    f = open(folder / f"{wid}.lock", "w")  # not inherited by the trainer (O_CLOEXEC)
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.write(f"{pid}\n")
    f.flush()
    _state.clear()
    _state[pid] = (wid, f)
    atexit.register(_remove, folder / f"{wid}.lock", pid)  # a killed worker's file stays: dead


def _remove(path: Path, pid: int) -> None:
    if os.getpid() == pid:
        path.unlink(missing_ok=True)


def worker_alive(wid: str | None) -> bool | None:
    """True/False when the worker's lock file is here; None when it cannot be told here."""
    if not is_worker_id(wid):
        return None
    if pid_wid := _state.get(os.getpid()):
        if pid_wid[0] == wid:
            return True
    path = lock_dir() / f"{wid}.lock"
    try:
        f = open(path, "r")
    except OSError:
        return None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False
