"""Tuning studies started over HTTP: each runs `tuner.start_study` in its own worker process
(`python -m plan_service.tune_worker`), so the request returns the study name at once and a
crashing study cannot take the server down. State lives in the Optuna storage; each job's folder
(WORKDIR/STUDY) keeps its worker's pid (worker.json) and how it ended (outcome.json, written by the worker), so
a job reads running / finished / interrupted / failed with the one line why, also after a server restart (a
worker that ended without a word, e.g. killed with the server, reads interrupted, not running)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import plan_service
from plan_service.models import TuneRequest
from planner.errors import PlanError
from tuner.activity import PHASES
from tuner.worker_id import is_worker_id

STORAGE_ENV = "PLAN_TUNE_STORAGE"  # the worker's storage URL
OUTCOME = "outcome.json"  # how the worker ended, written by it (plan_service/tune_worker.py)


WORKER = "worker.json"  # the study's last worker: pid, start time and worker id, written when it starts
RESUME = "POST /tune with the same study resumes it (everything up to its last trial is kept)"
# a worker that ended without an outcome, seen by a server that did not start it (no exit code to read)
UNWATCHED = ("its worker ended without an outcome while no server of this workdir watched it (a kill -9, the kernel's "
             "out-of-memory killer, or a hard crash)")
PHASE = "phase.json"  # what the running worker is doing (tuner/activity.py's phases), written by it as it goes
STOP = "stop.json"  # who stopped the worker, with which signal and when: written by this server before it signals
# who else sends a worker each signal, when this server did not (no stop.json of that signal)
OUTSIDE = {"SIGTERM": "a kill, a batch system's time limit or docker stop", "SIGINT": "kill -INT or a Ctrl-C",
           "SIGKILL": "kill -9, or the kernel's out-of-memory killer"}


class Ended(NamedTuple):
    status: str  # running | finished | interrupted | failed
    code: int | None  # the worker's exit code where known
    why: str | None  # the one line why
    stopped_by: str | None = None  # interrupted: who sent the signal, when (None: not known)
    stop_reason: str | None = None  # finished: the study's own rule that stopped it (budget, trial cap, space)


@dataclass
class Job:
    study: str
    folder: Path
    pid: int
    proc: subprocess.Popen | None = None  # None: a worker an earlier server started
    start_ticks: int | None = None  # the worker's start time (/proc/PID/stat), recorded at launch
    worker_id: str | None = None  # the id its trials carry (tuner/worker_id.py); None: started by an older server

    @property
    def log_path(self) -> Path:
        return self.folder / "worker.log"

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return _is_worker(self.pid, self.folder, self.start_ticks)

    def stop(self, by: str = "DELETE /tune/STUDY") -> None:
        """SIGTERM to the worker, as `kill` would: the tuner kills the running trial, marks it interrupted and
        queued again, and the worker writes 'interrupted' (POST /tune with the same study resumes it). A worker
        an earlier server started is signalled only while its pid is still that worker (command line and start
        time): a pid the system gave to another process since is never signalled."""
        if not self.alive():
            raise NotRunning(self.study)
        record_stop(self.folder, "SIGTERM", by)
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:  # it ended just now
            pass

    def phase(self) -> dict | None:
        """What the running worker says it is doing: {phase (tuner/activity.py PHASES), doing, for_s};
        None when it has ended or said nothing readable."""
        if not self.alive():
            return None
        try:
            rec = json.loads((self.folder / PHASE).read_text())
            if rec["phase"] not in PHASES:
                return None
            return {"phase": str(rec["phase"]), "doing": str(rec["doing"]),
                    "for_s": max(0.0, time.time() - float(rec["since"]))}
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def state(self) -> tuple[str, int | None, str | None]:
        """(running|finished|interrupted|failed, exit code where known, the one line why)."""
        return self.ended()[:3]

    def ended(self) -> Ended:
        """state()'s three; for an interrupted study who stopped it (None: not known), said once in the why; for a
        finished one the rule that stopped it."""
        if self.alive():
            return Ended("running", None, None)
        code = self.proc.returncode if self.proc is not None else None
        try:
            outcome = json.loads((self.folder / OUTCOME).read_text())
            status, code = outcome["status"], outcome.get("exit_code", code)
            if status == "interrupted" and outcome.get("signal") and outcome.get("kept"):
                who = self._who(outcome["signal"])
                return Ended(status, code, f"stopped by {who}: {outcome['kept']}; {RESUME}", stopped_by=who)
            rule = outcome.get("stop_reason") if status == "finished" else None
            # an outcome this server wrote for a worker that ended without one keeps who stopped it
            return Ended(status, code, outcome.get("why"), stopped_by=outcome.get("stopped_by"), stop_reason=rule)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        if code is None and self._recorded("SIGKILL"):  # an adopted worker this workdir's server killed (stop_all)
            code = -signal.SIGKILL
        if code is None:  # ended without an outcome while no server watched it (a server since sees no exit code)
            return Ended("interrupted", None, f"{UNWATCHED}; {RESUME}", stopped_by=f"no one known: {UNWATCHED}")
        if code < 0:  # killed by a signal it could not catch (SIGKILL, or one before main)
            who = self._who(_signal_name(-code))
            ended = Ended("interrupted", code, f"its worker was killed by {who}; {RESUME}", stopped_by=who)
        else:
            ended = Ended("failed", code, f"its worker exited {code} without an outcome: {_last_line(self.log_path)}")
        # kept as its outcome: a server started later has no exit code to read it from (it read 'ended without an
        # outcome (the server was stopped or restarted while it ran)' for a worker killed with -9)
        with contextlib.suppress(OSError):
            (self.folder / OUTCOME).write_text(json.dumps({"status": ended.status, "exit_code": code, "why": ended.why,
                                                           "stopped_by": ended.stopped_by, "written_by": "server"}))
        return ended

    def _who(self, sig: str) -> str:
        """Who sent the worker `sig`: this server where it recorded sending it (stop.json), else someone outside."""
        rec = self._recorded(sig)
        if rec is not None:
            return f"{rec['by']} at {rec['at']} ({sig} to its worker)"
        return f"a {sig} from outside this server ({OUTSIDE.get(sig, 'a signal to its worker')})"

    def _recorded(self, sig: str) -> dict | None:
        """stop.json when a server of this workdir recorded sending the worker `sig`."""
        try:
            rec = json.loads((self.folder / STOP).read_text())
            return rec if rec["signal"] == sig and "by" in rec and "at" in rec else None
        except (OSError, ValueError, KeyError, TypeError):
            return None


class TuneJobs:
    def __init__(self, storage: str, workdir: Path):
        self.storage = storage
        self.workdir = Path(workdir).resolve()  # absolute: a later server finds its workers by their command line
        self.jobs: dict[str, Job] = {}
        self.lock = threading.Lock()

    def start(self, req: TuneRequest) -> str:
        from tuner import TuneConfig

        name = req.study or f"api-{req.model}-{uuid.uuid4().hex[:8]}"
        fields = req.model_dump(exclude={"study"}, exclude_none=True)
        # the storage URL (it may hold a password) goes to the worker in its environment,
        # not into the config file
        config = TuneConfig(**fields, study=name, storage=None, progress=False,
                            workdir=str(self.workdir / name / "trials"))
        with self.lock:
            job = self._job(name)
            if job is not None and job.alive():
                raise PlanError("study", f"{name!r} is already running on this server")
            folder = self.workdir / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / OUTCOME).unlink(missing_ok=True)  # the last run's: this run writes its own
            (folder / STOP).unlink(missing_ok=True)
            write_phase(folder, "starting", "launching its worker process")  # the last run's said something else
            cfg_path = folder / "tune_config.json"
            cfg_path.write_text(config.model_dump_json(indent=2))
            log_path = folder / "worker.log"
            wid = uuid.uuid4().hex  # the worker takes it as its id: its trials carry it (this run's, whatever its pid)
            package_root = str(Path(plan_service.__file__).resolve().parent.parent)
            env = os.environ | {STORAGE_ENV: self.storage, "PYTHONPATH": os.pathsep.join(
                p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)}
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "plan_service.tune_worker", str(cfg_path), "--worker-id", wid],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                    start_new_session=True)
            ticks = start_ticks(proc.pid)
            (folder / WORKER).write_text(json.dumps({"pid": proc.pid, "start_ticks": ticks, "worker_id": wid}))
            self.jobs[name] = Job(study=name, folder=folder, pid=proc.pid, proc=proc, start_ticks=ticks, worker_id=wid)
        return name

    def running(self) -> int:
        """Workers running, this server's and those an earlier server left running."""
        with self.lock:
            names = set(self.jobs) | {p.parent.name for p in self.workdir.glob(f"*/{WORKER}")}
            return sum(1 for name in names if (job := self._job(name)) is not None and job.alive())

    def get(self, name: str) -> Job | None:
        """This server's job of `name`, else the one an earlier server started in the same workdir."""
        with self.lock:
            return self._job(name)

    def _job(self, name: str) -> Job | None:
        if name in self.jobs:
            return self.jobs[name]
        folder = self.workdir / name
        try:
            worker = json.loads((folder / WORKER).read_text())
            pid, ticks, wid = int(worker["pid"]), worker.get("start_ticks"), worker.get("worker_id")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return Job(study=name, folder=folder, pid=pid, start_ticks=int(ticks) if isinstance(ticks, int) else None,
                   worker_id=wid if is_worker_id(wid) else None)

    def stop_all(self, timeout_s: float = 30.0) -> None:
        """Ask every worker this server shows running to stop: its own and those an earlier server of this workdir
        left running (a `kill -9`'d server's, adopted: shown and stoppable here, so stopped with the server too;
        they were left running). SIGINT: the tuner kills the running trial, keeps what it did and the worker writes
        'interrupted' (POST /tune resumes it); one still running after `timeout_s` is killed."""
        with self.lock:
            names = set(self.jobs) | {p.parent.name for p in self.workdir.glob(f"*/{WORKER}")}
            jobs = [job for name in sorted(names) if (job := self._job(name)) is not None and job.alive()]
        for job in jobs:
            record_stop(job.folder, "SIGINT", "the server stopping")
            _signal_group(job, signal.SIGINT)
        deadline = time.monotonic() + timeout_s
        for job in jobs:
            if _wait_ended(job, max(0.0, deadline - time.monotonic())):
                continue
            record_stop(job.folder, "SIGKILL", f"the server stopping (its worker had not stopped {timeout_s:g} s "
                                               "after its SIGINT)")
            _signal_group(job, signal.SIGKILL)
            _wait_ended(job, 10.0)


def _signal_group(job: Job, sig: signal.Signals) -> None:
    """`sig` to the worker's process group (it leads its own session, tune_jobs.start); a worker an earlier server
    started only while its pid is still that worker (Job.alive: command line and start time)."""
    if not job.alive():
        return
    try:
        os.killpg(job.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_ended(job: Job, timeout_s: float) -> bool:
    """Wait up to `timeout_s` for the worker to end (this server's: reaped; an adopted one: polled); True if it did."""
    if job.proc is not None:
        try:
            job.proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.monotonic() + timeout_s
    while job.alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def record_stop(folder: Path, sig: str, by: str) -> None:
    """What this server is about to send the study's worker, who asked and when (Job.ended says it once)."""
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    (folder / STOP).write_text(json.dumps({"signal": sig, "by": by, "at": at}))


def write_phase(folder: Path, phase: str, doing: str) -> None:
    """What the worker is doing now, for GET /tune/STUDY (Job.phase); replaced whole (a reader never sees half of
    it); never fails the worker."""
    tmp = folder / f".{PHASE}.{os.getpid()}"
    with contextlib.suppress(OSError):
        tmp.write_text(json.dumps({"phase": phase, "doing": doing, "since": time.time()}))
        os.replace(tmp, folder / PHASE)


def log_tail(path: Path, n_bytes: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


class NotRunning(PlanError):
    def __init__(self, study: str):
        super().__init__("study", f"{study!r} is not running on this server: nothing to stop")


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22, proc(5)); None without /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[19])  # fields after "(comm)": state is field 3
    except (OSError, ValueError, IndexError):
        return None


def _is_worker(pid: int, folder: Path, ticks: int | None = None) -> bool:
    """`pid` is alive and is this folder's worker (not a process that got the pid since): its command line names
    this folder's config and, where recorded at launch, its start time is the worker's."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        try:  # no /proc (macOS): the command line from ps
            out = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return False
        return "plan_service.tune_worker" in out.stdout and str(folder / "tune_config.json") in out.stdout
    if ticks is not None and start_ticks(pid) != ticks:
        return False
    return b"plan_service.tune_worker" in cmdline and str(folder / "tune_config.json").encode() in cmdline


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_line(path: Path) -> str:
    lines = [line for line in log_tail(path).splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else "its log is empty"
