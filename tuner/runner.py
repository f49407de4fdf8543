"""Run one trial: the trainer in its own process group, with a timeout and a memory cap.

The tuner talks to the trainer only through its command line and its result file
(trainer/result.py). Success is judged by the result file, not only by the exit code: a rank
can abort at exit after the results were written (notes/cpu-runs.md).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, ValidationError

from trainer.result import EXIT_CODES, TrainResult

# set on every trial's trainer (inherited by its ranks): lets a resumed tuner tell that a
# leftover process group really is that trial's (tuner/storage.py end_orphan_group)
TRIAL_MARKER_ENV = "PLAN_TRIAL_WORKDIR"

_OOM_PATTERNS = re.compile(
    r"out of memory|OutOfMemoryError|can't allocate memory|Cannot allocate memory|"
    r"MemoryError|std::bad_alloc|failed to allocate|RLIMIT_AS",
    re.IGNORECASE,
)
_BAD_CONFIG_PATTERNS = re.compile(r"^usage: |error: argument|invalid choice", re.MULTILINE)


class TrialOutcome(BaseModel):
    """What the tuner stores on an Optuna trial about one real run."""

    status: str  # ok | oom | timeout | crash | bad_config (trainer), interrupted (tuner)
    error: str | None = None
    tokens_per_s: float | None = None
    step_time_s: float | None = None
    step_time_s_p90: float | None = None  # with the median: the spread of the timed steps
    wall_s: float
    startup_s: float | None = None  # wall time not spent in timed steps
    peak_memory_bytes: int | None = None
    exit_code: int | None = None
    log_tail: str = ""
    notes: list[str] = []  # what the runner did besides the run (e.g. a stale build lock removed)


def trainer_command(knobs: dict, *, model: str, nproc: int, steps: int, json_out: Path,
                    extra_args: list[str] | None = None) -> list[str]:
    """The trainer's launch interface: one flag per knob, named as in planner/scenario.py."""
    cmd = [sys.executable, "-m", "trainer", "--model", model, "--nproc", str(nproc)]
    for knob, value in knobs.items():
        cmd += [f"--{knob.replace('_', '-')}", str(value)]
    cmd += ["--steps", str(steps), "--json", str(json_out)]
    return cmd + list(extra_args or [])


def rank_env(nproc: int, base: dict | None = None) -> dict:
    """Threads per rank = cores / ranks (2 ranks on 2 cores otherwise swing 10x: cpu-runs.md)."""
    env = dict(os.environ if base is None else base)
    cores = os.cpu_count() or 1
    env.setdefault("OMP_NUM_THREADS", str(max(1, cores // max(1, nproc))))
    env.setdefault("MALLOC_ARENA_MAX", "2")  # fewer malloc arenas: less address space per rank
    env["PYTHONUNBUFFERED"] = "1"
    return env


def with_limits(cmd: list[str], memory_cap_bytes: int | None) -> list[str]:
    """`cmd` behind the exec wrapper (tuner/exec_limits.py): die with the tuner, and cap the
    address space (inherited by every rank). No preexec_fn: nothing runs in the forked child."""
    wrapper = str(Path(__file__).with_name("exec_limits.py"))
    return [sys.executable, "-I", wrapper, str(os.getpid()), str(memory_cap_bytes or 0), "--", *cmd]


def kill_group(pgid: int, grace_s: float = 3.0) -> None:
    """SIGTERM the whole process group, then SIGKILL whatever is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not _group_alive(pgid):
                return
            time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    # zombies still count for killpg(0); look for a live member
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def run_command(cmd: list[str], *, json_out: Path, timeout_s: float, memory_cap_bytes: int | None,
                env: dict, log_path: Path, on_start=None) -> TrialOutcome:
    """Run a trainer command to its end (or its timeout) and classify what happened."""
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(with_limits(cmd, memory_cap_bytes), stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        if on_start is not None:
            on_start(proc.pid)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        except KeyboardInterrupt:
            kill_group(proc.pid)
            proc.wait()
            raise
        finally:
            kill_group(proc.pid)  # reap ranks left behind, whatever happened
            proc.wait()
    wall_s = time.monotonic() - t0
    return classify(json_out, proc.returncode, timed_out, wall_s, _tail(log_path))


def _tail(path: Path, n_bytes: int = 4000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-n_bytes:].decode("utf-8", "replace")


def read_result(json_out: Path) -> TrainResult | None:
    try:
        return TrainResult.model_validate_json(json_out.read_text())
    except (OSError, ValidationError, ValueError):
        return None


def classify(json_out: Path, exit_code: int | None, timed_out: bool, wall_s: float,
             log_tail: str) -> TrialOutcome:
    """The result file first; else the log and the exit code; a timeout is always a timeout."""
    result = read_result(json_out)
    if result is not None and result.status == "ok" and result.tokens_per_s:
        return _from_result(result, exit_code, wall_s, log_tail)
    if timed_out:
        return TrialOutcome(status="timeout", error="trial ran past its timeout; process group killed",
                            wall_s=wall_s, exit_code=exit_code, log_tail=log_tail)
    if result is not None and result.status != "ok":
        out = _from_result(result, exit_code, wall_s, log_tail)
        return out
    status = _status_from_log(log_tail, exit_code)
    return TrialOutcome(status=status, error=_error_line(log_tail, exit_code), wall_s=wall_s,
                        exit_code=exit_code, log_tail=log_tail)


def _status_from_log(log_tail: str, exit_code: int | None) -> str:
    if _OOM_PATTERNS.search(log_tail) or exit_code in (-signal.SIGKILL, 137):
        return "oom"
    if _BAD_CONFIG_PATTERNS.search(log_tail) and exit_code == EXIT_CODES["bad_config"]:
        return "bad_config"
    return "crash"


def _error_line(log_tail: str, exit_code: int | None) -> str:
    lines = [ln.strip() for ln in log_tail.splitlines() if ln.strip()]
    hits = [ln for ln in lines if _OOM_PATTERNS.search(ln) or "Error" in ln or "error" in ln]
    line = (hits or lines or [""])[-1]
    return f"exit {exit_code}: {line[:300]}"


def _from_result(result: TrainResult, exit_code: int | None, wall_s: float, log_tail: str) -> TrialOutcome:
    peak = None
    if result.memory is not None:
        peak = result.memory.cuda_peak_reserved_bytes or result.memory.host_peak_rss_bytes
    step_s = result.step_time_s_median
    timed = (step_s or 0.0) * result.steps  # `steps` counts the warm-up steps too
    return TrialOutcome(
        status=result.status, error=result.error, tokens_per_s=result.tokens_per_s,
        step_time_s=step_s, step_time_s_p90=result.step_time_s_p90, wall_s=wall_s, startup_s=max(0.0, wall_s - timed) if step_s else None,
        peak_memory_bytes=peak, exit_code=exit_code, log_tail=log_tail[-1500:],
    )


def fresh_workdir(root: Path | None, trial_number: int) -> Path:
    """A directory per trial for its result file and log."""
    base = Path(root) if root else Path(tempfile.gettempdir()) / "plan-tune"
    d = base / f"trial-{trial_number:05d}-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    d.mkdir(parents=True, exist_ok=True)
    return d
