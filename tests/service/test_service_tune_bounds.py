"""POST /tune's bounds are `plan tune`'s (tuner/config.py), refused with the CLI's one-line reason (they were a
second list, some different, refused with pydantic's generic 'Input should be less than or equal to ...');
`plan serve --max-tune-budget` above that 7d is refused at start-up (it was silently capped at 7d)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from plan_cli.main import app as cli
from plan_service import ServiceConfig, create_app

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bounds")
    with TestClient(create_app(ServiceConfig(storage=f"sqlite:///{tmp / 'tune.db'}", workdir=tmp / "work",
                                             insecure=True))) as c:
        yield c


@pytest.mark.parametrize("field, value, flag", [
    ("budget_s", "99999999h", "--budget"), ("steps", 20_000, "--steps"), ("max_trials", 200_000, "--max-trials"),
    ("seq_len", 1 << 25, "--seq-len"), ("global_batch", 1 << 25, "--global-batch"),
    ("trial_timeout_s", "2d", "--trial-timeout"), ("seed", 2**40, "--seed"),
])
def test_tune_bounds_are_plan_tunes_with_its_reason(client, tmp_path, field, value, flag):
    body = {"model": "tiny", "budget_s": 60, field: value}
    r = client.post("/tune", json=body)
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"] == ["body", field] and detail["msg"].startswith("at most "), detail
    args = ["tune", "--model", "tiny", "--gpus", "1", "--budget", "60", "--storage", f"sqlite:///{tmp_path / 't.db'}"]
    if flag == "--budget":
        args[args.index("--budget") + 1] = str(value)
    else:
        args += [flag, str(value)]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 2, out.output
    if field != "budget_s":
        assert detail["msg"] in " ".join(out.stderr.split())  # the CLI's line, word for word
        return
    # the bound and why are the CLI's; how to go on is the service's own (it said "run the same command again")
    bound = detail["msg"].split(": ")[0]
    assert bound.startswith("at most 7d") and bound in " ".join(out.stderr.split())
    assert "POST the same request again" in detail["msg"] and "command" not in detail["msg"], detail
    assert "run the same command again" in " ".join(out.stderr.split())


def test_the_servers_budget_cap_says_how_to_go_on_over_http(client):
    r = client.post("/tune", json={"model": "tiny", "budget_s": "30h"})  # past the default cap, 24h
    assert r.status_code == 422, r.text
    msg = r.json()["detail"][0]["msg"]
    assert "max_tune_budget_s" in msg and "POST the same request again" in msg and "command" not in msg, msg


@pytest.mark.parametrize("field, value, words", [
    ("gpus", 5000, "1,024"), ("device_memory_gib", 1e9, "GiB"), ("startup_s", 7200, "start-up"),
])
def test_the_other_bounds_give_a_reason_too(client, field, value, words):
    r = client.post("/tune", json={"model": "tiny", "budget_s": 60, field: value})
    assert r.status_code == 422, r.text
    msg = r.json()["detail"][0]["msg"]
    assert msg.startswith("at most ") and words in msg and "less than or equal" not in msg, msg


def test_a_request_within_the_bounds_is_not_refused_by_them(client):
    """7d and seed 2**32 - 1 are plan tune's own limits, taken (the service's seed stopped at 2**31 - 1)."""
    from plan_service.models import TuneRequest

    req = TuneRequest(model="tiny", budget_s="7d", seed=2**32 - 1, max_trials=100_000)
    assert req.budget_s == 7 * 86400 and req.seed == 2**32 - 1


def test_a_seq_len_past_the_models_positions_is_refused_before_a_worker_starts(client):
    """It started a worker that failed at once with exit 2 (the answer was 202 'started')."""
    r = client.post("/tune", json={"model": "tiny", "budget_s": 60, "seq_len": 100_000, "study": "too-long"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "seq_len"], r.text
    assert "learned positions" in r.json()["detail"][0]["msg"] and client.app.state.jobs.get("too-long") is None


@pytest.mark.parametrize("cap", ["8d", "30d"])
def test_serve_refuses_a_tune_budget_cap_above_7d(cap, tmp_path):
    """In its own process with a time limit: a server that starts (the old behaviour) never returns."""
    import subprocess
    import sys

    try:
        out = subprocess.run([sys.executable, "-m", "plan_cli.main", "serve", "--port", "0", "--max-tune-budget", cap],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path,
                             env=os.environ | {"PYTHONPATH": ROOT, "PLAN_API_TOKEN": "t"})
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"plan serve --max-tune-budget {cap} started serving: {e.stderr}") from None
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "max_tune_budget" in lines[0] and "at most 7d" in lines[0], out.stderr
