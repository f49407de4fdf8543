"""The page's tuning line while a study starts and once it has a winner, in a real headless Chromium against a real
`plan serve`: 'running | starting (N s): <what its worker is doing>' from POST /tune until its first trial has ended
(it said 'running' and nothing else for minutes), and the winner by the value it was chosen by (its re-measured
median, 'the median of 3 runs'; it showed the first run's tokens/s)."""

from __future__ import annotations

import json
import os
import signal
import time

from browser import chromium, screenshot, wait_for
from service_server import running_server

TOKEN = "activity-token"
SUMMARY = "document.getElementById('tune-summary').textContent"


def test_the_line_says_starting_and_what_the_worker_does_then_the_winner_by_what_it_was_chosen_by(tmp_path):
    with running_server(tmp_path, token=TOKEN) as base, chromium(tmp_path) as driver:
        driver.get(base + "/")
        wait_for(driver, "document.body.dataset.ready === '1'", what="the form")
        for field, value in (("tune-model", "tiny"), ("tune-gpus", "1"), ("tune-budget", "600"), ("tune-trials", "1"),
                             ("tune-study", "watched"), ("tune-token", TOKEN)):
            el = driver.find_element("id", field)
            el.clear()
            el.send_keys(value)
        driver.find_element("css selector", "#tune-backend option[value=fsdp]").click()
        driver.find_element("id", "tune-start").click()
        worker = tmp_path / "work" / "watched" / "worker.json"
        deadline, pid = time.monotonic() + 60, None
        while pid is None:  # written by POST /tune as it starts the worker
            try:
                pid = json.loads(worker.read_text())["pid"]
            except (OSError, ValueError):
                assert time.monotonic() < deadline, "no worker.json"
                time.sleep(0.05)
        # held at once, while it imports (its first trial far off, no storage lock held): the page polls on
        os.kill(pid, signal.SIGSTOP)
        try:
            line = wait_for(driver, f"(t => / \\| starting \\(\\d+ s\\): /.test(t) && t)({SUMMARY})", timeout_s=60,
                            what="the starting line")
        finally:
            os.kill(pid, signal.SIGCONT)
        screenshot(driver, "page-tune-starting-line.png")
        assert line.startswith("study watched: running | starting ("), line
        doing = line.split("): ", 1)[1].split(" | ")[0]
        assert doing in ("launching its worker process", "loading the tuner (Python imports)", "opening the study",
                         "measuring this machine: its CPU peak (a matmul per rank)") \
            or doing.startswith("its first trial #0"), line
        line = wait_for(driver, f"(t => /^study watched: (finished|failed|interrupted)/.test(t) && t)({SUMMARY})",
                        timeout_s=420, what="the study to end")
        assert line.startswith("study watched: finished") and "starting" not in line, line
        assert " tokens/s measured once" in line, line  # one trial, no re-measurement: chosen by its one run
        # a winner re-measured: its median, said so, and its first run apart (the API's report.best fields)
        best = {"trial": 2, "sharding": "none", "micro_batch": 4, "grad_accum": 1, "tokens_per_s": 37308.0, "runs": 3,
                "chosen_tokens_per_s": 26775.0, "chosen_by": "the median of 3 runs"}
        assert driver.execute_script("return bestText(arguments[0])", best) == (
            "best: trial 2, none, mb 4 x ga 1, 26,775 tokens/s, the median of 3 runs (its first 37,308)")
        assert driver.execute_script("return bestText(arguments[0])", best | {"tokens_per_s": 26775.2}) == (
            "best: trial 2, none, mb 4 x ga 1, 26,775 tokens/s, the median of 3 runs (its first run's)")
