"""POST /tune over HTTP starts a real study in a background worker (returns at once); GET
/tune/{study} follows it; GET /export/{study}/deepspeed gives the winner's DeepSpeed config."""

from __future__ import annotations

import time

import httpx
import pytest
from service_server import running_server

TOKEN = "tune-token"


@pytest.mark.slow
def test_tune_in_the_background_then_export(tmp_path):
    with running_server(tmp_path, token=TOKEN) as base:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        body = {"model": "tiny", "gpus": 2, "budget_s": 540, "max_trials": 1, "steps": 3,
                "backend": "deepspeed", "study": "http-study", "seed": 0,
                "trial_timeout_s": 480, "startup_s": 60}
        r = httpx.post(base + "/tune", json=body, headers=auth, timeout=30)
        assert r.status_code == 202, r.text
        # the worker runs in the background: the POST came back while the study still runs (no timing)
        assert httpx.get(base + "/tune/http-study", timeout=30).json()["status"] == "running"
        assert r.json()["study"] == "http-study"
        again = httpx.post(base + "/tune", json=body, headers=auth, timeout=30)
        assert again.status_code == 409

        deadline = time.monotonic() + 580
        while True:
            status = httpx.get(base + "/tune/http-study", timeout=30).json()
            if status["status"] != "running" or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert status["status"] == "finished", status
        report = status["report"]
        assert report["study"] == "http-study" and report["launched"] >= 1
        assert report["best"] is not None, (report["by_status"], status["log_tail"],
                                            list((tmp_path / "work" / "http-study").rglob("*.log")))

        r = httpx.get(base + "/export/http-study/deepspeed", params={"target": "cpu"}, timeout=30)
        assert r.status_code == 200, r.text
        ds = r.json()
        best = report["best"]
        assert ds["zero_optimization"]["stage"] == {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3}[best["sharding"]]
        assert ds["train_batch_size"] == best["micro_batch"] * best["grad_accum"] * 2
        assert ds["plan"]["dp"] == 2
