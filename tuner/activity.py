"""What a running study is doing now, for people watching it (`plan serve`'s page and GET /tune/STUDY, `plan tune
report`): its worker's phase, told through a hook (starting: opening the study, measuring this machine, launching its
first trial; trials; re-measuring), and each running trial's progress read from its trainer log on this host (no
step done yet, DeepSpeed building its ops, step k of N). Between POST /tune and the first trial's result the page
showed nothing but 'running' for minutes (a first DeepSpeed run on CPU builds its ops: notes/cpu-runs.md)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from optuna.trial import FrozenTrial, TrialState

from trainer.result import STEP_MARK

PhaseHook = Callable[[str, str], None]  # (phase, what it is doing): one of PHASES
STARTING, TRIALS, REMEASURING, ENDING = PHASES = ("starting", "trials", "re-measuring", "ending")
# DeepSpeed's JIT build of its ops (torch.utils.cpp_extension's lines), seen in a trainer log
_BUILDING = re.compile(r"^(Building|Loading) extension module (\w+)",
                       re.MULTILINE)
_STEP = re.compile(re.escape(STEP_MARK) + r" (\d+)/(\d+)")


def no_phase(phase: str, doing: str) -> None:
    """The hook when nobody watches (`plan tune` in a terminal has its progress bar)."""


def measuring_line(nproc: int, on_gpu: bool, network: bool) -> str:
    """What the first worker of a new study measures before its first trial (tuner/setup.py _system_for)."""
    parts = [] if on_gpu else ["its CPU peak (a matmul per rank)"]
    if network and nproc > 1:  # one rank: nothing to all-reduce (tuner/network.py)
        parts.append(f"an all-reduce bench of {nproc} rank{'s' if nproc != 1 else ''}")
    return "measuring this machine: " + " and ".join(parts) if parts else "reading this machine's GPUs"


def trial_line(number: int, backend: str, knobs: dict, first: bool, ops_built: bool = False) -> str:
    """The trial the worker has just launched; the first of a run says what its start-up does (a DeepSpeed op build
    only where its ops are not built here yet: a resumed study's first trial said it with the ops built)."""
    what = f"trial #{number} ({backend}, {knobs.get('sharding')}, mb {knobs.get('micro_batch')} x ga " \
           f"{knobs.get('grad_accum')})"
    if not first:
        return what
    extra = "; DeepSpeed's first run on a machine builds its ops (minutes)" if backend == "deepspeed" and not ops_built \
        else ""
    return f"its first {what}: launching the trainer (imports, process group{extra})"


def deepspeed_ops_built(on_gpu: bool, env: dict | None = None) -> bool:
    """DeepSpeed's CPU communication op is built in torch's extensions cache (every CPU DeepSpeed run loads it,
    notes/cpu-runs.md); on GPU not known here (False)."""
    from trainer.ext_locks import extensions_dir

    return not on_gpu and any(extensions_dir(env).glob("*/deepspeed_shm_comm/deepspeed_shm_comm*.so"))


def log_progress(log_text: str) -> str:
    """A running trial's progress from its trainer log: the last step done, else what its start-up is at."""
    steps = _STEP.findall(log_text)
    if steps:
        done, total = steps[-1]
        return f"step {done} of {total} done"
    builds = _BUILDING.findall(log_text)
    if builds and builds[-1][0] == "Building":
        return f"starting: DeepSpeed building its op {builds[-1][1]} (first run on this machine)"
    return "starting: no step done yet (launch, imports, process group)"


class LogWatch:
    """A run that is not a trial (a final re-measurement of a top candidate) has no row in `report.running`: while it
    runs, its trainer log's progress (log_progress) is told through `on_phase(phase, 'LINE: step k of N done')` every
    `every_s` (the re-measuring line said which candidate and nothing of its steps). `start(pid, workdir)` is the
    runner's on_start; `stop()` once the run has returned."""

    def __init__(self, on_phase: PhaseHook, phase: str, line: str, every_s: float = 2.0):
        self.on_phase, self.phase, self.line, self.every_s = on_phase, phase, line, every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, pid: int, workdir: str) -> None:
        self._thread = threading.Thread(target=self._loop, args=(Path(workdir) / "trainer.log",), daemon=True)
        self._thread.start()

    def _loop(self, log: Path) -> None:
        said = None
        while not self._stop.wait(self.every_s):
            doing = f"{self.line}: {log_progress(_tail(log))}"
            if doing != said:
                said = doing
                self.on_phase(self.phase, doing)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def running_trials(trials: list[FrozenTrial], host: str, alive: Callable[[str | None], bool | None],
                   now: float | None = None) -> list[dict]:
    """The trials running now (their worker not known dead): number, seconds since it started, what it is doing
    (read from its log where the trial runs on this host, else unknown here)."""
    now = time.time() if now is None else now
    out = []
    for t in trials:
        a = t.user_attrs
        if t.state != TrialState.RUNNING or alive(a.get("worker_id")) is False or a.get("status") != "running":
            continue
        since = t.datetime_start.timestamp() if t.datetime_start else None
        if not a.get("workdir"):
            doing = "deciding (the planner's prediction, the budget)"
        elif a.get("host") != host:
            doing = f"running on {a.get('host')} (its log is not on this host)"
        else:
            doing = log_progress(_tail(Path(a["workdir"]) / "trainer.log"))
        out.append({"trial": t.number, "for_s": None if since is None else max(0.0, now - since), "doing": doing})
    return out


def _tail(path: Path, n_bytes: int = 20000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - n_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
