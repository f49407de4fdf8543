"""The re-measuring line (a final re-run of a top candidate, which is no trial and so has no `report.running` row)
says the run's step as its trainer log shows it: it said 'the top candidates: trial #2, its run 3' and nothing
more for as long as the run took. The log lines are the trainer's own format (trainer/result.py STEP_MARK)."""

from __future__ import annotations

import time

from trainer.result import STEP_MARK
from tuner.activity import REMEASURING, LogWatch


def test_a_remeasurement_tells_its_steps(tmp_path):
    told: list[tuple[str, str]] = []
    watch = LogWatch(lambda phase, doing: told.append((phase, doing)), REMEASURING,
                     "the top candidates: trial #2, its run 3", every_s=0.05)
    watch.start(12345, str(tmp_path))
    try:
        log = tmp_path / "trainer.log"
        log.write_text("launching\n")
        time.sleep(0.3)
        with log.open("a") as f:
            f.write(f"{STEP_MARK} 1/4 0.0120 s\n")
        time.sleep(0.3)
        with log.open("a") as f:
            f.write(f"{STEP_MARK} 3/4 0.0110 s\n")
        deadline = time.monotonic() + 5
        while not any("step 3 of 4 done" in d for _, d in told):
            assert time.monotonic() < deadline, told
            time.sleep(0.05)
    finally:
        watch.stop()
    assert told[0] == (REMEASURING, "the top candidates: trial #2, its run 3: starting: no step done yet (launch, "
                                    "imports, process group)"), told
    assert (REMEASURING, "the top candidates: trial #2, its run 3: step 1 of 4 done") in told, told
    n = len(told)
    time.sleep(0.2)
    assert len(told) == n  # stopped: no word after the run returned
