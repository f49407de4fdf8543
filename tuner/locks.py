"""Stale build locks in torch's extensions cache (where DeepSpeed JIT-builds its ops).

torch's `FileBaton` marks a build in progress with a `lock` file in the op's build folder;
every other process that needs the op waits until the file is gone. A process killed during
the build (a trial cut by its timeout) leaves the file behind and every later DeepSpeed run
on the machine then waits forever (notes/cpu-runs.md). A lock is stale when no live process
is building in that folder (the compiler and ninja run with it as their working directory,
or name it on their command line) and either it is older than any plausible build or it
appeared while a trial that is now dead was running.
"""

from __future__ import annotations

import os
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


def clear_stale_locks(root: Path, *, older_than_s: float, created_after: float | None = None,
                      now: float | None = None) -> list[ClearedLock]:
    """Remove locks with no live builder that are older than `older_than_s`, or (when
    `created_after` is a wall-clock time) that appeared after it: a dead trial's locks."""
    now = time.time() if now is None else now
    cleared = []
    for lock in find_locks(root):
        try:
            mtime = lock.stat().st_mtime
        except OSError:
            continue
        age = now - mtime
        dead_trials = created_after is not None and mtime >= created_after
        if age < older_than_s and not dead_trials:
            continue
        if builders_in(lock.parent):
            continue
        try:
            lock.unlink()
        except FileNotFoundError:
            continue
        cleared.append(ClearedLock(str(lock), age))
    return cleared
