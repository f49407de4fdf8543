"""Tuning studies started over HTTP: each runs `tuner.start_study` in its own worker process
(`python -m plan_service.tune_worker`), so the request returns the study name at once and a
crashing study cannot take the server down. State lives in the Optuna storage; this keeps
only the worker processes this server started."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import plan_service
from plan_service.models import TuneRequest
from planner.errors import PlanError

STORAGE_ENV = "PLAN_TUNE_STORAGE"  # the worker's storage URL


@dataclass
class Job:
    study: str
    proc: subprocess.Popen
    log_path: Path


class TuneJobs:
    def __init__(self, storage: str, workdir: Path):
        self.storage = storage
        self.workdir = workdir
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
            job = self.jobs.get(name)
            if job is not None and job.proc.poll() is None:
                raise PlanError("study", f"{name!r} is already running on this server")
            folder = self.workdir / name
            folder.mkdir(parents=True, exist_ok=True)
            cfg_path = folder / "tune_config.json"
            cfg_path.write_text(config.model_dump_json(indent=2))
            log_path = folder / "worker.log"
            package_root = str(Path(plan_service.__file__).resolve().parent.parent)
            env = os.environ | {STORAGE_ENV: self.storage, "PYTHONPATH": os.pathsep.join(
                p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)}
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "plan_service.tune_worker", str(cfg_path)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                    start_new_session=True)
            self.jobs[name] = Job(study=name, proc=proc, log_path=log_path)
        return name

    def running(self) -> int:
        """Workers of this server still running."""
        with self.lock:
            return sum(1 for job in self.jobs.values() if job.proc.poll() is None)

    def get(self, name: str) -> Job | None:
        with self.lock:
            return self.jobs.get(name)

    def stop_all(self, timeout_s: float = 10.0) -> None:
        """Ask every running worker to stop (SIGINT: the tuner keeps what it did)."""
        import signal

        with self.lock:
            jobs = list(self.jobs.values())
        for job in jobs:
            if job.proc.poll() is None:
                try:
                    os.killpg(job.proc.pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
        for job in jobs:
            try:
                job.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(job.proc.pid, signal.SIGKILL)


def log_tail(path: Path, n_bytes: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
