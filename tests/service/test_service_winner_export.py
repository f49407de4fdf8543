"""POST /tune's export_url works for whatever wins: an FSDP study's space holds sharding none (plain data parallel),
which no FSDP settings file writes (/export/S/fsdp answered 422 for it), so an FSDP (or any-backend) study's URL is
/export/S/best, the winner in the format that writes it (a plain-DDP winner: DeepSpeed's ZeRO stage 0). `plan tune
report` prints that export's command. Real app (TestClient), real sqlite Optuna storage, a real worker for POST."""

from __future__ import annotations

import optuna
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from plan_cli.main import app as cli
from plan_service import ServiceConfig, create_app
from planner.resolve import resolve_system
from planner.scenario import Scenario
from tuner.storage import open_storage
from tuner.study_store import StudyMeta

KNOBS = {"offload": "none", "activation_checkpointing": "none", "precision": "bf16", "micro_batch": 2, "grad_accum": 2}


def _stored(url: str, name: str, sharding: str) -> None:
    study = optuna.create_study(study_name=name, storage=open_storage(url), direction="maximize")
    StudyMeta(model="tiny", nproc=2, seq_len=64, space={"sharding": ["none", "fsdp_full_shard"]}, backend="fsdp",
              system=resolve_system(Scenario(model="tiny", gpus=2, cluster="dgx-a100"))).save(study)
    study.add_trial(optuna.trial.create_trial(value=900.0, user_attrs={"knobs": {**KNOBS, "sharding": sharding},
                                                                        "status": "ok", "config_key": sharding}))


@pytest.fixture
def client(tmp_path):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    config = ServiceConfig(storage=url, workdir=tmp_path / "work", insecure=True)
    with TestClient(create_app(config)) as c:
        yield c, url


def test_the_export_url_of_an_fsdp_study_answers_for_a_plain_ddp_winner(client):
    c, url = client
    r = c.post("/tune", json={"model": "tiny", "gpus": 1, "budget_s": 600, "backend": "fsdp", "study": "plain"})
    assert r.status_code == 202, r.text
    job = c.app.state.jobs.get("plain")
    try:
        export_url = r.json()["export_url"]
        assert export_url == "/export/plain/best"  # it was /export/plain/fsdp: a 422 for a sharding-none winner
    finally:
        c.delete("/tune/plain")  # SIGTERM: the worker keeps the study (no DeepSpeed op to build: an FSDP study)
        job.proc.wait(timeout=120)
    _stored(url, "plain_won", "none")  # what that study holds once plain data parallel wins
    r = c.get(export_url.replace("/plain/", "/plain_won/"), params={"target": "cpu"})
    assert r.status_code == 200, r.text
    assert r.headers["x-plan-export-format"] == "deepspeed" and r.headers["content-location"] == "/export/plain_won/deepspeed"
    ds = r.json()
    assert ds["zero_optimization"] == {"stage": 0} and ds["plan"]["sharding"] == "none"
    # the winner was timed as DDP under AMP (fp32 gradients on the wire): DeepSpeed reduces in fp32 too
    assert ds["communication_data_type"] == "fp32"
    assert c.get("/export/plain_won/fsdp", params={"target": "cpu"}).status_code == 422  # (why /best exists)


def test_best_is_the_fsdp_settings_for_an_fsdp_winner_and_errors_as_the_others(client):
    c, url = client
    _stored(url, "sharded_won", "fsdp_full_shard")
    r = c.get("/export/sharded_won/best", params={"target": "cpu"})
    assert r.status_code == 200, r.text
    assert r.headers["x-plan-export-format"] == "fsdp"
    assert r.json()["sharding_strategy"] == "FULL_SHARD"
    assert r.json()["mixed_precision"]["reduce_dtype"] == "float32"  # the bundled trainer's, as its trial ran
    assert c.get("/export/nope/best").status_code == 404
    optuna.create_study(study_name="empty", storage=open_storage(url))
    StudyMeta(model="tiny", nproc=2, seq_len=64, space={"sharding": ["none"]},
              system=resolve_system(Scenario(model="tiny", gpus=2, cluster="dgx-a100"))).save(
        optuna.load_study(study_name="empty", storage=url))
    r = c.get("/export/empty/best")
    assert r.status_code == 422 and "no completed trial" in r.text


@pytest.mark.parametrize(("sharding", "fmt"), [("none", "deepspeed"), ("fsdp_full_shard", "fsdp")])
def test_plan_tune_report_prints_the_export_that_writes_the_winner(tmp_path, sharding, fmt):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    _stored(url, "s", sharding)
    r = CliRunner().invoke(cli, ["tune", "report", "--study", "s", "--storage", url])
    assert r.exit_code == 0, r.output
    assert f"export: plan export {fmt} --from-study s --storage {url}" in " ".join(r.output.split())
    out = tmp_path / "winner.json"
    done = CliRunner().invoke(cli, ["export", fmt, "--from-study", "s", "--storage", url, "--target", "cpu",
                                    "--out", str(out)])
    assert done.exit_code == 0, done.output  # the printed command works
