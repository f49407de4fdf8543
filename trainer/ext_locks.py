"""Stale build locks in torch's extensions cache (where DeepSpeed JIT-builds its ops).

torch's `FileBaton` marks a build in progress with a `lock` file in the op's build folder;
every other process that needs the op waits until the file is gone. A process killed during
the build (a trial cut by its timeout, a `plan train` stopped with Ctrl-C or kill -9) leaves the
file behind and every later DeepSpeed run on the machine then waits forever (notes/cpu-runs.md).

A lock is stale when no live process is building in that folder (the compiler and ninja run with
it as their working directory, or name it on their command line) and
- no process of this machine holds it open: `FileBaton.try_acquire` keeps the descriptor of the
  file it creates open until `release()` (torch/utils/file_baton.py), and a killed process's
  descriptors close with it. That settles it where the cache is on a local file system and every
  process's descriptors could be read; or
- it is older than any plausible build (a shared file system: NFS, Lustre, GPFS, ...: a build on
  another node holds nothing here), or it appeared while a trial that is now dead was running.

The tuner clears locks around every trial (tuner/trial.py); the trainer clears them before its
DeepSpeed ops load and watches while they do (`LockWatch`), so a lock left by a killed run never
hangs the next one.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

# A first build of DeepSpeed's CPU Adam took ~80 s on a busy 2-core machine: 15 min is
# beyond any plausible build (override with PLAN_STALE_LOCK_S).
STALE_LOCK_S = 900.0


@dataclass(frozen=True)
class ClearedLock:
    path: str
    age_s: float

    def describe(self) -> str:
        return f"removed stale build lock {self.path} ({self.age_s:.0f} s old, no live builder)"


def extensions_dir(env: dict | None = None) -> Path:
    """torch's extensions cache root (TORCH_EXTENSIONS_DIR, else ~/.cache/torch_extensions)."""
    env = os.environ if env is None else env
    if env.get("TORCH_EXTENSIONS_DIR"):
        return Path(env["TORCH_EXTENSIONS_DIR"])
    cache = env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "torch_extensions"


def stale_after_s(env: dict | None = None) -> float:
    env = os.environ if env is None else env
    try:
        return float(env.get("PLAN_STALE_LOCK_S", STALE_LOCK_S))
    except ValueError:
        return STALE_LOCK_S


def find_locks(root: Path) -> list[Path]:
    """`lock` files of op build folders: root/<op>/lock or root/<py_tag>/<op>/lock."""
    if not root.is_dir():
        return []
    return sorted(p for pattern in ("*/lock", "*/*/lock") for p in root.glob(pattern) if p.is_file())


def builders_in(folder: Path) -> list[int]:
    """Live processes working in `folder` (cwd there, or the folder on their command line)."""
    target = str(folder.resolve())
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cwd = os.readlink(d / "cwd")
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd == target or cwd.startswith(target + os.sep) or target in cmd:
            pids.append(int(d.name))
    return pids


# file systems another machine can write to: a build there holds no descriptor here (mount(8) types)
SHARED_FS = ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "9p",
             "afs", "panfs", "wekafs", "virtiofs", "fuse")


def holders(path: Path) -> tuple[list[int], bool]:
    """(pids of this machine's processes with `path` open, whether every process's descriptors could be
    read): /proc/PID/fd links name the open files."""
    target = str(path.resolve())
    pids, complete = [], True
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fds = list((d / "fd").iterdir())
        except FileNotFoundError:
            continue  # exited meanwhile
        except OSError:
            complete = False  # another user's process: its descriptors are not ours to read
            continue
        for fd in fds:
            try:
                if os.readlink(fd) == target:
                    pids.append(int(d.name))
                    break
            except OSError:
                continue
    return pids, complete


def fs_type(path: Path, mounts: str | None = None) -> str:
    """The file system type of the mount holding `path` (/proc/mounts, longest mount point first); "" if
    unknown."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return ""
    target, best, kind = str(path.resolve()), -1, ""
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, kind = len(point), parts[2]
    return kind


def is_shared_fs(path: Path, mounts: str | None = None) -> bool:
    kind = fs_type(path, mounts)
    return not kind or kind.startswith(SHARED_FS)  # unknown: taken as shared (only the age rule then)


def orphaned(lock: Path) -> bool:
    """No process of this machine holds `lock` open nor builds in its folder, on a local file system whose
    every process could be looked at: no build can be running anywhere."""
    if is_shared_fs(lock.parent) or builders_in(lock.parent):
        return False
    pids, complete = holders(lock)
    return complete and not pids


def clear_stale_locks(root: Path, *, older_than_s: float, created_after: float | None = None,
                      now: float | None = None, orphans: bool = False) -> list[ClearedLock]:
    """Remove locks with no live builder that are older than `older_than_s`, or (when
    `created_after` is a wall-clock time) that appeared after it: a dead trial's locks; with
    `orphans`, also any lock no process holds (`orphaned`) at any age."""
    now = time.time() if now is None else now
    cleared = []
    for lock in find_locks(root):
        try:
            mtime = lock.stat().st_mtime
        except OSError:
            continue
        age = now - mtime
        dead_trials = created_after is not None and mtime >= created_after
        if age < older_than_s and not dead_trials and not (orphans and _orphaned_twice(lock)):
            continue
        if builders_in(lock.parent) or holders(lock)[0]:  # a live build here, however long it takes
            continue
        try:
            lock.unlink()
        except FileNotFoundError:
            continue
        cleared.append(ClearedLock(str(lock), age))
    return cleared


def _orphaned_twice(lock: Path, gap_s: float = 0.2) -> bool:
    """`orphaned`, seen twice `gap_s` apart: `FileBaton.release` closes the descriptor a moment before it
    removes the file, and a live build's lock must not be taken for a dead one in that moment."""
    if not orphaned(lock):
        return False
    time.sleep(gap_s)
    return lock.exists() and orphaned(lock)


class LockWatch:
    """While DeepSpeed's ops build or load (`with LockWatch(root):`), remove every lock left by a killed
    builder as soon as it is one (`clear_stale_locks(orphans=True)`, each `interval_s`), saying so on stderr:
    torch's `FileBaton.wait` would otherwise wait on it forever. Checks once on entry, before any wait."""

    def __init__(self, root: Path, *, interval_s: float = 2.0, older_than_s: float | None = None, say=None):
        self.root, self.interval_s = root, interval_s
        self.older_than_s = stale_after_s() if older_than_s is None else older_than_s
        self.cleared: list[ClearedLock] = []
        self._say = say or (lambda line: print(f"note: {line}", file=sys.stderr, flush=True))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> list[ClearedLock]:
        try:
            found = clear_stale_locks(self.root, older_than_s=self.older_than_s, orphans=True)
        except OSError:  # no /proc (not Linux), a folder going away: nothing cleared, the build goes on
            return []
        for c in found:
            self._say(c.describe())
        self.cleared += found
        return found

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check()

    def __enter__(self) -> LockWatch:
        self.check()
        self._thread = threading.Thread(target=self._run, name="plan-lock-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
