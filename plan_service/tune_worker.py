"""`python -m plan_service.tune_worker CONFIG.json [--worker-id ID]`: one study, run by the tuner's public API.

It writes how it ended to `outcome.json` beside CONFIG.json (plan_service/tune_jobs.py reads it) and exits as
`plan tune` does: 0 when the study stopped by its own rule (budget, trial cap, space), 130 / 143 when a Ctrl-C
(the server stopping) or a SIGTERM stopped it, 2 on a refused input, 1 on a crash (traceback in the log)."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

EXIT = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal's number, as plan tune exits
# who sends which: the server stopping sends SIGINT (tune_jobs.stop_all); DELETE /tune/STUDY sends SIGTERM
SENT_BY = {"SIGINT": "the server stopping, or a Ctrl-C", "SIGTERM": "DELETE /tune/STUDY (the page's Stop), or a kill"}


class _Terminated(KeyboardInterrupt):
    """A SIGTERM before the tuner installs its own handler (while importing, or measuring the network)."""


def _on_sigterm(signum, frame):
    raise _Terminated()


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)  # as a Ctrl-C from the start: an outcome is always written
    cfg_path = Path(argv[0])
    on_phase = _phase_to(cfg_path.parent)
    on_phase("starting", "loading the tuner (Python imports)")
    try:
        if "--worker-id" in argv:  # the id its server recorded: this run's trials carry it (tuner/worker_id.py)
            from tuner.worker_id import adopt

            adopt(argv[argv.index("--worker-id") + 1])
        code, status, why, extra = _run(cfg_path)
    except KeyboardInterrupt as e:
        sig = "SIGTERM" if type(e).__name__ in ("Terminated", "_Terminated") else "SIGINT"
        code, status, why = EXIT[sig], "interrupted", (f"stopped by {sig} before the first trial (while starting or "
                                                       "measuring this machine): nothing to keep; POST /tune again")
        extra = {"signal": sig, "kept": "nothing to keep (it stopped while starting or measuring this machine, before "
                                        "its first trial)"}
    except BaseException as e:  # a crash: the traceback goes to the log, its last line to the outcome
        import traceback

        extra = {}
        traceback.print_exc()
        code, status, why = 1, "failed", f"crashed: {type(e).__name__}: {e}".splitlines()[0][:300]
    from plan_service.tune_jobs import OUTCOME

    # `signal` and `kept` apart: the server says once who sent the signal (it knows when it did) and how to resume
    (cfg_path.parent / OUTCOME).write_text(json.dumps({"status": status, "exit_code": code, "why": why, **extra}))
    print(why, file=sys.stderr if code else sys.stdout)
    return code


def _phase_to(folder: Path):
    """The tuner's phase hook (tuner/activity.py): phase.json for GET /tune/STUDY, and a line in the log (its history)."""
    from plan_service.tune_jobs import write_phase  # loaded already: `-m` imports the package first

    def on_phase(phase: str, doing: str) -> None:
        write_phase(folder, phase, doing)
        print(f"[plan serve worker] {phase}: {doing}", flush=True)

    return on_phase


def _run(cfg_path: Path) -> tuple[int, str, str, dict]:
    import os

    from planner.errors import PlanError
    from plan_service.tune_jobs import STORAGE_ENV
    from tuner import TuneConfig, start_study

    config = TuneConfig.model_validate_json(cfg_path.read_text())
    if os.environ.get(STORAGE_ENV):
        config = config.model_copy(update={"storage": os.environ[STORAGE_ENV]})
    try:
        report = start_study(config, on_phase=_phase_to(cfg_path.parent))
    except PlanError as e:
        return 2, "failed", f"error: {e}", {}
    mine = (report.this_run or {}).get("launched", report.launched)
    # this run's trials apart from the study's (a resumed study's `launched` counts every run's)
    kept = f"{mine} trial{'s' if mine != 1 else ''} launched by this run ({report.launched} in the study)"
    if report.interrupted_by:
        return (EXIT[report.interrupted_by], "interrupted",
                f"stopped by {report.interrupted_by} ({SENT_BY[report.interrupted_by]}): {kept}, "
                f"everything kept; POST /tune with study {report.study!r} resumes it",
                {"signal": report.interrupted_by, "kept": kept})  # the server's why adds its resume (all kept)
    return 0, "finished", f"{kept}; {report.stop_reason}", {"stop_reason": report.stop_reason}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
