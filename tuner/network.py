"""The tuner's first step: measure all-reduce bus bandwidth on the very devices it tunes
(`plan allreduce-bench --json OUT`, a subprocess), to feed the planner's comm model."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from planner.network import readings
from tuner.runner import kill_group, rank_env, with_limits


def failure_line(text: str) -> str:
    """The line that says why a run failed: the last error/exception line, else the last line that is not a
    banner (torchelastic ends a rank's failure with a "=====" rule, which says nothing)."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip().strip("=-_ ")]
    errors = [ln for ln in lines if "Error" in ln or "Exception" in ln or ln.startswith("error:")]
    return (errors or lines or [""])[-1]


# Message sizes of the bench: on CPU (gloo, ~25 Gbps) 64 MiB is already at the curve's top and each size
# costs seconds (notes/cpu-runs.md); on GPUs 64 MiB is mid-curve (8 x H200 NVLink, nccl-tests: 77% of the
# plateau, catalog/links/nvlink.toml) and 256 MiB / 1 GiB take milliseconds per call, so they are measured too.
CPU_SIZES = "4M,16M,64M"
GPU_SIZES = "4M,16M,64M,256M,1G"


def measure_busbw(nproc: int, *, on_gpu: bool = False, timeout_s: float = 180.0,
                  attempts: int = 2, on_progress: Callable[[dict | None], None] | None = None) -> tuple[dict | None, str]:
    """({"intranode": Gbps, "internode": Gbps|None, "readings": where each was measured
    (planner/network.py readings)}, note). None when it could not be measured.
    A failed bench runs once more (a rank lost to a loaded machine is no property of the network);
    when every attempt fails, the note gives each attempt's failure line. `on_progress(step)` is told the bench's
    step as it goes (trainer/collectives.py write_progress: sizes done with their busbw, the one running)."""
    if nproc < 2:
        return None, "one rank: no all-reduce to measure"
    failures = []
    for _ in range(attempts):
        busbw, failure = _bench_once(nproc, timeout_s, GPU_SIZES if on_gpu else CPU_SIZES, on_progress)
        if busbw is not None:
            return busbw, "measured" + (f" (after a failed attempt: {failures[0]})" if failures else "")
        failures.append(failure)
    return None, "; ".join(f"attempt {i + 1}: {f}" for i, f in enumerate(failures))


def _bench_once(nproc: int, timeout_s: float, sizes: str = CPU_SIZES,
                on_progress: Callable[[dict | None], None] | None = None) -> tuple[dict | None, str]:
    with tempfile.TemporaryDirectory(prefix="plan-busbw-") as d:
        out, step = Path(d) / "busbw.json", Path(d) / "progress.json"
        cmd = [sys.executable, "-m", "plan_cli.main", "allreduce-bench", "--nproc", str(nproc),
               "--sizes", sizes, "--json", str(out), "--progress-file", str(step)]
        if on_progress is not None:
            on_progress(None)  # launching the ranks
        done = run_group(cmd, timeout_s, rank_env(nproc), watch=(step, on_progress) if on_progress else None)
        if done is None:
            return None, f"allreduce-bench timed out after {timeout_s:.0f} s"
        code, stdout, stderr = done
        if not out.exists():
            return None, f"allreduce-bench failed (exit {code}): {failure_line(stderr or stdout)[:200]}"
        data = json.loads(out.read_text())
    busbw = data.get("busbw_gbps") or {}
    if not busbw.get("intranode") and not busbw.get("internode"):
        return None, "allreduce-bench wrote no busbw_gbps"
    return {"intranode": busbw.get("intranode"), "internode": busbw.get("internode"), "readings": readings(data)}, ""


def run_group(cmd: list[str], timeout_s: float, env: dict | None = None,
              watch: tuple[Path, Callable[[dict], None]] | None = None) -> tuple[int, str, str] | None:
    """(exit code, stdout, stderr) of `cmd` in its own process group; None past `timeout_s`. On a timeout,
    Ctrl-C or SIGTERM the whole group is killed: subprocess.run killed the launcher alone, and the
    bench's ranks ran on (64 of them, minutes after the tuner had gone). `watch` (FILE, on_change): FILE's JSON is
    read every 0.25 s while the command runs, and on_change told each new content."""
    # behind the trials' exec wrapper: the launcher dies with this process (a worker killed with -9 mid-bench left
    # the bench running on, its group out of reach), and its ranks with the launcher (trainer/collectives.py)
    proc = subprocess.Popen(with_limits(cmd, None), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        stdout, stderr = _communicate(proc, timeout_s, watch)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        proc.communicate()
        return None
    except BaseException:
        kill_group(proc.pid)
        proc.communicate()
        raise
    kill_group(proc.pid)  # what the launcher left behind when it ended
    return proc.returncode, stdout, stderr


def _communicate(proc: subprocess.Popen, timeout_s: float, watch) -> tuple[str, str]:
    """proc.communicate(timeout_s), reading `watch`'s file every 0.25 s meanwhile (a retried communicate loses no
    output: subprocess's documented use)."""
    if watch is None:
        return proc.communicate(timeout=timeout_s)
    path, on_change = watch
    end, seen = time.monotonic() + timeout_s, [None]

    def look() -> None:
        try:
            text = path.read_text()
        except OSError:
            return
        if text != seen[0]:
            seen[0] = text
            try:
                on_change(json.loads(text))
            except ValueError:
                pass
    while True:
        try:
            out = proc.communicate(timeout=max(0.01, min(0.25, end - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= end:
                raise
            look()
            continue
        look()  # its last step (written just before it ended)
        return out
