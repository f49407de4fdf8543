"""The service keeps the server's files and credentials its own, and its machine usable
(issue 13): no server-side paths as models, inline config.json bodies instead, study names
only to authenticated callers, /tune limits whose 4xx answers name the limit."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import optuna
import pytest
from service_server import running_server

TOKEN = "guard-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("guards")
    # a model folder and a config.json in the server's working directory: never to be read
    (tmp / "secret-model").mkdir()
    (tmp / "secret-model" / "config.json").write_text((FIXTURES / "llama-2-7b.json").read_text())
    (tmp / "cfg.json").write_text((FIXTURES / "llama-2-7b.json").read_text())
    optuna.create_study(study_name="hidden-study", storage=f"sqlite:///{tmp / 'tune.db'}")
    extra = ["--max-tune-ranks", "2", "--max-tune-budget", "1h", "--max-tune-jobs", "1"]
    with running_server(tmp, token=TOKEN, extra=extra) as url:
        yield url, tmp


def _detail(r: httpx.Response) -> dict:
    return r.json()["detail"][0]


@pytest.mark.parametrize("model", ["secret-model", "cfg.json", "./cfg.json", "../cfg.json", "/etc/passwd"])
def test_estimate_never_reads_a_server_path(served, model):
    base, _ = served
    r = httpx.post(base + "/estimate", json={"model": model, "gpus": 8}, timeout=60)
    assert r.status_code == 422, r.text
    assert _detail(r)["loc"] == ["body", "model"]
    # an existing folder and a missing one get the same answer (nothing about the disk leaks)
    missing = httpx.post(base + "/estimate", json={"model": "no-such-folder", "gpus": 8}, timeout=60)
    if "/" not in model:
        assert _detail(r)["msg"].replace(model, "X") == _detail(missing)["msg"].replace("no-such-folder", "X")


def test_estimate_takes_an_inline_config_body(served):
    base, _ = served
    cfg = json.loads((FIXTURES / "llama-2-7b.json").read_text())
    r = httpx.post(base + "/estimate", json={"hf_config": cfg, "gpus": 16}, params={"top": 2}, timeout=60)
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["model"]["n_layers"] == cfg["num_hidden_layers"] and report["results"][0]["fits"]
    # architecture columns override the body; model and hf_config together is an error
    r = httpx.post(base + "/estimate", json={"hf_config": cfg, "gpus": 16, "n_layers": 8}, timeout=60)
    assert r.status_code == 200 and r.json()["model"]["n_layers"] == 8
    r = httpx.post(base + "/estimate", json={"hf_config": cfg, "model": "7b", "gpus": 16}, timeout=60)
    assert r.status_code == 422 and _detail(r)["loc"] == ["body", "hf_config"]
    for layers in (5000, 10**6):  # past the service's bound, past the model's own
        r = httpx.post(base + "/estimate", json={"hf_config": {**cfg, "num_hidden_layers": layers}, "gpus": 16}, timeout=60)
        assert r.status_code == 422 and "n_layers" in _detail(r)["loc"][-1] + _detail(r)["msg"], r.text
    r = httpx.post(base + "/estimate", json={"hf_config": {"model_type": "nope"}, "gpus": 16}, timeout=60)
    assert r.status_code == 422 and "hf_config" in _detail(r)["msg"], r.text  # names the body, not a file


def test_architecture_columns_and_sizes_still_work(served):
    base, _ = served
    body = {"n_layers": 4, "hidden": 256, "n_heads": 4, "vocab": 1000, "gpus": 8}
    assert httpx.post(base + "/estimate", json=body, timeout=60).status_code == 200
    assert httpx.post(base + "/estimate", json={"model": "llama2-7b", "gpus": 8}, timeout=60).status_code == 200


def test_study_names_only_to_authenticated_callers(served):
    base, _ = served
    for url in ("/export/unknown/deepspeed", "/tune/unknown"):
        r = httpx.get(base + url, timeout=30)
        assert r.status_code == 404 and "hidden-study" not in r.text, r.text
    assert httpx.get(base + "/tune", timeout=30).status_code == 401
    r = httpx.get(base + "/tune", headers=AUTH, timeout=30)
    assert r.status_code == 200 and r.json()["studies"] == ["hidden-study"]


def test_tune_limits_name_the_limit(served):
    base, _ = served
    body = {"model": "tiny", "budget_s": 60}
    r = httpx.post(base + "/tune", json={**body, "gpus": 3}, headers=AUTH, timeout=30)
    assert r.status_code == 422 and _detail(r)["loc"] == ["body", "gpus"] and "max_tune_ranks" in _detail(r)["msg"]
    r = httpx.post(base + "/tune", json={**body, "budget_s": 7200}, headers=AUTH, timeout=30)
    assert r.status_code == 422 and _detail(r)["loc"] == ["body", "budget_s"] and "max_tune_budget_s" in _detail(r)["msg"]
    r = httpx.post(base + "/tune", json={**body, "model": "secret-model"}, headers=AUTH, timeout=30)
    assert r.status_code == 422 and _detail(r)["loc"] == ["body", "model"]
    # one job at a time: the first starts (its worker is still importing), the second is 429
    first = httpx.post(base + "/tune", json={**body, "gpus": 1, "study": "cap-a", "max_trials": 1,
                                             "budget_s": 5}, headers=AUTH, timeout=30)
    assert first.status_code == 202, first.text
    second = httpx.post(base + "/tune", json={**body, "gpus": 1, "study": "cap-b"}, headers=AUTH, timeout=30)
    assert second.status_code == 429 and "max_tune_jobs" in _detail(second)["msg"], second.text


def test_default_rank_limit_is_the_local_device_count(tmp_path):
    with running_server(tmp_path, token=TOKEN) as base:
        r = httpx.post(base + "/tune", json={"model": "tiny", "budget_s": 60, "gpus": 1024}, headers=AUTH, timeout=30)
        assert r.status_code == 422 and "local devices" in _detail(r)["msg"], r.text


def test_the_planning_page_follows_the_same_rules(served):
    base, _ = served
    r = httpx.post(base + "/ui/estimate", json={"model": "secret-model", "gpus": 8}, timeout=60)
    assert r.status_code == 422 and _detail(r)["loc"][-1] == "model", r.text
    r = httpx.post(base + "/ui/estimate", json={"model": "7b", "gpus": 8, "top": 2}, timeout=60)
    assert r.status_code == 200, r.text
    cfg = json.loads((FIXTURES / "llama-2-7b.json").read_text())
    r = httpx.post(base + "/ui/estimate", json={"config": cfg, "gpus": 16, "top": 2}, timeout=60)
    assert r.status_code == 200, r.text
    r = httpx.get(base + "/ui/tune/unknown/trials", timeout=30)
    assert r.status_code == 404 and "hidden-study" not in r.text, r.text
