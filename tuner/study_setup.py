"""A study being set up: the record a new study carries from its first second until its StudyMeta is saved.

`plan tune` creates the Optuna study at once and stores on it (user attr `plan_tune_setup`) who is setting it up
(worker id, host, pid), what it is doing (measuring the network, with the bench's step: message size k of N) and
since when. The study's StudyMeta (tuner/study_store.py) is saved only once this machine is measured, so:
- `plan tune report` / GET /tune/STUDY show a brand-new study while its network bench runs (it said "no such
  study" for the first minutes: the study was only created after the bench);
- a kill -9 during the bench leaves a study with a set-up record and no StudyMeta: the next run of the same command
  sees that its worker is dead and measures again (a half-made study without a record could not be resumed).
"""

from __future__ import annotations

import time

import optuna

from tuner.storage import HOST
from tuner.worker_id import worker_alive, worker_id

SETUP_KEY = "plan_tune_setup"
MEASURING = "measuring the network"  # the set-up phase the report names while the bench runs
# a set-up worker on another host (its liveness lock is not here) is taken for dead after this long without a word
STALE_S = 900.0


def setup_record(study: optuna.Study) -> dict | None:
    rec = study.user_attrs.get(SETUP_KEY)
    return rec if isinstance(rec, dict) else None


def start_record(study: optuna.Study, *, model: str, nproc: int, on_gpu: bool, backend: str,
                 previous: dict | None = None) -> dict:
    """Claim the set-up of `study` for this worker (a resume after a dead set-up says what it replaces)."""
    import os

    now = time.time()
    rec = {"worker_id": worker_id(), "host": HOST, "pid": os.getpid(), "model": model, "nproc": nproc,
           "on_gpu": on_gpu, "backend": backend, "started": now, "updated": now, "phase": MEASURING,
           "doing": "starting", "bench": None, "attempt": (previous or {}).get("attempt", 0) + 1,
           "interrupted": None}
    if previous is not None:
        rec["resumed_from"] = _ended_line(previous)
    study.set_user_attr(SETUP_KEY, rec)
    return rec


def update_record(study: optuna.Study, rec: dict, **changes) -> None:
    rec.update(changes, updated=time.time())
    study.set_user_attr(SETUP_KEY, rec)


def setup_alive(rec: dict, now: float | None = None) -> bool:
    """The worker setting the study up is alive: its liveness lock is held here, or (another host) it wrote its
    record less than STALE_S ago."""
    if rec.get("interrupted"):
        return False
    alive = worker_alive(rec.get("worker_id"))
    if alive is not None:
        return alive
    now = time.time() if now is None else now
    return now - float(rec.get("updated") or 0) < STALE_S


def bench_step(progress: dict | None) -> str:
    """The bench's step from its progress record (trainer/collectives.py write_progress): 'message size 2 of 3
    (16 MiB) running; done: 4 MiB 25.1 Gbps', then 'all 3 message sizes done: ...; measuring the rest'."""
    if not progress:
        return "launching the bench's ranks"
    of, done = progress.get("of", 0), progress.get("done") or []
    said = ", ".join(f"{d['size']} {d['busbw_gbps']:.1f} Gbps" if d.get("busbw_gbps") else f"{d['size']} failed"
                     for d in done)
    if progress.get("now"):
        return f"message size {len(done) + 1} of {of} ({progress['now']}) running" + (f"; done: {said}" if said else "")
    return f"all {of} message sizes done: {said}; then this machine's peak and the planner's proposals"


def describe(rec: dict, now: float | None = None) -> dict:
    """The set-up as the report shows it: phase, doing, for_s, worker (alive | dead), resumed_from, bench."""
    now = time.time() if now is None else now
    alive = setup_alive(rec, now)
    return {"phase": rec.get("phase") or MEASURING, "doing": rec.get("doing"),
            "for_s": max(0.0, now - float(rec.get("started") or now)),
            "worker": "alive" if alive else "dead", "host": rec.get("host"), "pid": rec.get("pid"),
            "attempt": rec.get("attempt", 1), "resumed_from": rec.get("resumed_from"), "bench": rec.get("bench"),
            "interrupted": rec.get("interrupted"),
            "resume": None if alive else "run the same `plan tune` command (or POST /tune with this study) again: "
                                         "it measures the network again and goes on"}


def line(study: str, info: dict) -> str:
    """`plan tune report`'s line for a study being set up (or whose set-up was stopped)."""
    again = f" (set-up attempt {info['attempt']}: {info['resumed_from']})" if info.get("resumed_from") else ""
    if info["worker"] == "alive":
        return (f"study {study}: no trial yet, {info['phase']} for {info['for_s']:.0f} s (worker pid {info['pid']} on "
                f"{info['host']}){again}: {info['doing']}")
    why = info.get("interrupted") or "its worker died: a kill -9 or a crash"
    return (f"study {study}: no trial yet; its set-up stopped while {info['phase']} ({why}) at: {info['doing']}; "
            f"{info['resume']}")


def _ended_line(rec: dict) -> str:
    why = rec.get("interrupted") or "its worker died"
    return f"the set-up of pid {rec.get('pid')} on {rec.get('host')} stopped ({why}) at: {rec.get('doing')}"
