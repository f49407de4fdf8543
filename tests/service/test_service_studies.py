"""The service reads studies as the CLI does (tuner/study_store.py, tuner/report.chosen_from_study):
a stored study's winner exports, an unknown study (or one `plan tune` did not make) is a 404,
a study with no completed trial yet a 422, and the trials view links optuna-dashboard's page."""

from __future__ import annotations

import optuna
import pytest
from fastapi.testclient import TestClient

from plan_service import ServiceConfig, create_app
from planner.resolve import resolve_system
from planner.scenario import Scenario
from tuner.storage import open_storage
from tuner.study_store import StudyMeta, study_id

KNOBS = {"sharding": "zero1", "offload": "none", "activation_checkpointing": "none", "precision": "bf16",
         "micro_batch": 2, "grad_accum": 2}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("studies")
    url = f"sqlite:///{tmp / 'tune.db'}"
    meta = StudyMeta(model="tiny", nproc=2, seq_len=64, space={"sharding": ["zero1"]},
                     system=resolve_system(Scenario(model="tiny", gpus=2, cluster="dgx-a100")))
    for name in ("done", "empty"):
        study = optuna.create_study(study_name=name, storage=open_storage(url), direction="maximize")
        meta.save(study)
    done = optuna.load_study(study_name="done", storage=url)
    done.add_trial(optuna.trial.create_trial(value=800.0, user_attrs={"knobs": KNOBS, "status": "ok",
                                                                       "config_key": "k"}))
    optuna.create_study(study_name="foreign", storage=url)
    with TestClient(create_app(ServiceConfig(storage=url, workdir=tmp / "work"))) as client:
        yield client, url


def test_export_of_a_stored_study_and_its_errors(served):
    client, _ = served
    r = client.get("/export/done/deepspeed", params={"target": "cpu"})
    assert r.status_code == 200, r.text
    assert r.json()["zero_optimization"]["stage"] == 1 and r.json()["train_batch_size"] == 2 * 2 * 2
    for name in ("nope", "foreign"):
        r = client.get(f"/export/{name}/deepspeed")
        assert r.status_code == 404 and "done" not in r.text, r.text  # no study names to anonymous callers
    r = client.get("/export/empty/deepspeed")
    assert r.status_code == 422 and "no completed trial" in r.text


def test_trials_view_links_the_dashboard_page_of_the_study(served):
    client, url = served
    r = client.get("/ui/tune/done/trials")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["dashboard_url"].endswith(f"/dashboard/studies/{study_id(url, 'done')}")
    assert [t["status"] for t in body["trials"]] == ["ok"] and body["trials"][0]["sharding"] == "zero1"
    assert study_id(url, "done") != study_id(url, "empty")
    assert client.get("/ui/tune/nope/trials").status_code == 404
