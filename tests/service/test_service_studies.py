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
FSDP_KNOBS = {**KNOBS, "sharding": "fsdp_shard_grad_op"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("studies")
    url = f"sqlite:///{tmp / 'tune.db'}"
    meta = StudyMeta(model="tiny", nproc=2, seq_len=64, space={"sharding": ["zero1"]},
                     system=resolve_system(Scenario(model="tiny", gpus=2, cluster="dgx-a100")))
    for name in ("done", "empty", "fsdp_done"):
        study = optuna.create_study(study_name=name, storage=open_storage(url), direction="maximize")
        meta.save(study)
    done = optuna.load_study(study_name="done", storage=url)
    done.add_trial(optuna.trial.create_trial(value=800.0, user_attrs={"knobs": KNOBS, "status": "ok",
                                                                       "config_key": "k"}))
    fsdp = optuna.load_study(study_name="fsdp_done", storage=url)
    fsdp.add_trial(optuna.trial.create_trial(value=700.0, user_attrs={"knobs": FSDP_KNOBS, "status": "ok",
                                                                       "config_key": "f"}))
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


@pytest.mark.parametrize("study", ["fsdp_done", "done"])
def test_fsdp_export_of_a_study_is_plan_exports(served, study):
    """GET /export/{study}/fsdp answers what `plan export fsdp --from-study` writes (the route was missing:
    404 'Not Found'), or refuses in its words (a ZeRO winner)."""
    import json

    from typer.testing import CliRunner

    from plan_cli.main import app

    client, url = served
    r = client.get(f"/export/{study}/fsdp", params={"target": "cpu"})
    cli = CliRunner().invoke(app, ["export", "fsdp", "--from-study", study, "--storage", url, "--target", "cpu"])
    if cli.exit_code == 0:
        assert r.status_code == 200, r.text
        assert r.json() == json.loads(cli.stdout) and r.json()
    else:
        assert cli.exit_code == 2 and r.status_code == 422, (cli.output, r.text)
        assert r.json()["detail"][0]["msg"] in " ".join(cli.stderr.split())
    assert study != "fsdp_done" or r.status_code == 200


def test_deepspeed_export_of_an_fsdp_winner_names_the_fsdp_export(served):
    client, _ = served
    r = client.get("/export/fsdp_done/deepspeed")
    assert r.status_code == 422 and "plan export fsdp" in r.text and "/export/STUDY/fsdp" in r.text, r.text


def test_an_export_format_not_served_says_which_are(served):
    client, _ = served
    r = client.get("/export/done/accelerate")
    assert r.status_code == 404 and "/export/STUDY/fsdp" in r.json()["detail"] and "plan export" in r.json()["detail"]


def test_trials_view_links_the_dashboard_page_of_the_study(served):
    client, url = served
    r = client.get("/ui/tune/done/trials")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["dashboard_url"].endswith(f"/dashboard/studies/{study_id(url, 'done')}")
    assert [t["status"] for t in body["trials"]] == ["ok"] and body["trials"][0]["sharding"] == "zero1"
    assert study_id(url, "done") != study_id(url, "empty")
    assert client.get("/ui/tune/nope/trials").status_code == 404


@pytest.mark.parametrize("switch, words", [
    ("optimizer_moments_bf16", "bf16_master_weights_and_grads"),  # DeepSpeed's BF16 moments need BF16 masters
    ("recompute_norms_mla_up", "DeepSpeed cannot write it"),
    ("fp8_activation_cache", "needs fp8 plans"),  # the study's winner is a bf16 plan
])
def test_study_export_takes_the_memory_switches_and_refuses_as_plan_export(served, switch, words):
    """GET /export/{study}/deepspeed?SWITCH=true answers exactly `plan export deepspeed --from-study`'s one line."""
    from typer.testing import CliRunner

    from plan_cli.main import app

    client, url = served
    r = client.get("/export/done/deepspeed", params={switch: "true", "target": "cpu"})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert len(detail) == 1 and detail[0]["loc"][-1] == switch and words in detail[0]["msg"]
    cli = CliRunner().invoke(app, ["export", "deepspeed", "--from-study", "done", "--storage", url,
                                   "--target", "cpu", f"--{switch.replace('_', '-')}"])
    assert cli.exit_code == 2 and " ".join(cli.stderr.split()) == f"error: {switch}: {detail[0]['msg']}"


def test_study_export_switches_off_and_unknown_query_parameters(served):
    client, _ = served
    plain = client.get("/export/done/deepspeed", params={"target": "cpu"}).json()
    off = client.get("/export/done/deepspeed", params={"target": "cpu", "recompute_norms_mla_up": "false",
                                                       "fp8_activation_cache": "0", "optimizer_moments_bf16": "no"})
    assert off.status_code == 200 and off.json() == plain
    for params, field in (({"optimizer_moments_bf16": "maybe"}, "optimizer_moments_bf16"),
                          ({"fp8_activation_cashe": "true"}, "fp8_activation_cashe"),  # a typo is not ignored
                          ({"target": "tpu"}, "target")):
        r = client.get("/export/done/deepspeed", params=params)
        assert r.status_code == 422 and [d["loc"][-1] for d in r.json()["detail"]] == [field], r.text


def test_fsdp_export_of_a_winner_that_shards_nothing_says_what_it_is(served, tmp_path):
    """An FSDP study's space holds sharding none (POST /tune's export_url for it is /fsdp): its refusal says the
    winner is plain data parallel and where its config is (it said only 'none is not an FSDP plan')."""
    client, url = served
    study = optuna.create_study(study_name="fsdp_plain", storage=open_storage(url), direction="maximize")
    StudyMeta(model="tiny", nproc=2, seq_len=64, space={"sharding": ["none", "fsdp_full_shard"]},
              system=resolve_system(Scenario(model="tiny", gpus=2, cluster="dgx-a100"))).save(study)
    study.add_trial(optuna.trial.create_trial(value=900.0, user_attrs={"knobs": {**KNOBS, "sharding": "none"},
                                                                        "status": "ok", "config_key": "n"}))
    r = client.get("/export/fsdp_plain/fsdp", params={"target": "cpu"})
    assert r.status_code == 422 and "plain data parallel" in r.text and "deepspeed export" in r.text, r.text
    assert client.get("/export/fsdp_plain/deepspeed", params={"target": "cpu"}).json()["zero_optimization"] == {
        "stage": 0}
