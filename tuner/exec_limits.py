"""Exec wrapper for a trial: `python -I exec_limits.py PARENT_PID CAP_BYTES -- CMD...`.

Sets what `preexec_fn` used to set in the forked child (which ran Python between fork and
exec while the tuner's heartbeat thread lived: a deadlock risk), then execs CMD in place (same
pid, same process group): the parent-death signal (a kill -9 of the tuner ends the trial too;
Linux) and, when CAP_BYTES > 0, RLIMIT_AS (inherited by every rank). Run by path with -I so it
imports nothing of the project; standard library only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    parent, cap, sep, cmd = int(argv[0]), int(argv[1]), argv[2], argv[3:]
    if sep != "--" or not cmd:
        sys.exit("usage: exec_limits.py PARENT_PID CAP_BYTES -- CMD...")
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the tuner's process-group kill still reaps it
        pass
    if os.getppid() != parent:  # the tuner died before the signal was armed
        os._exit(137)
    if cap > 0:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
