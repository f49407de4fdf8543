"""The planning page's own endpoints in-process (no browser): the page and its scripts come from
this app (plotly.js from the plotly package, no CDN), the JSON the page draws matches the
planner's report, exports are `plan export`'s files, bad input is a 422 naming the field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from plan_service import ServiceConfig, create_app
from planner import api
from planner.scenario import Scenario

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"
FORM = {"model": "7b", "gpus": 48, "tokens": "100B", "price_per_gpu_hour": 2.0}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("page-api")
    # no curve budget here: which points a budget leaves out depends on the machine's speed
    config = ServiceConfig(storage=f"sqlite:///{tmp / 'tune.db'}", workdir=tmp / "work", curve_budget_s=1e9)
    with TestClient(create_app(config)) as c:
        yield c


def test_page_and_scripts_are_served_locally(client):
    import plotly

    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(s.startswith("/") for s in sources), sources  # nothing from another origin
    js = client.get("/ui/static/plotly.min.js")
    bundled = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert js.status_code == 200 and js.content == bundled.read_bytes()
    assert client.get("/ui/static/page.js").status_code == 200
    assert "DELETE" in client.get("/ui/static/tune.js").text  # the tuning panel stops a study
    assert client.get("/ui/static/nope.js").status_code == 404
    assert client.get("/ui/static/..%2Fapp.py").status_code in (404, 422)


def test_estimate_view_matches_the_planner(client):
    r = client.post("/ui/estimate", json=FORM)
    assert r.status_code == 200, r.text
    page = r.json()
    report = api.estimate(Scenario(model="7b", gpus=48, tokens=1e11, price_per_gpu_hour=2.0), top=10,
                          include_rejected=True)
    assert page["fitting"] == report.fitting and page["evaluated"] == report.evaluated
    assert {row["reason"]: row["count"] for row in page["rejected"]} == report.rejected
    for row, est in zip(page["plans"], report.results, strict=True):
        assert row["sharding"] == est.plan.sharding and row["micro_batch"] == est.plan.micro_batch
        assert sum(row["memory_gib"].values()) == pytest.approx(est.memory.total_bytes / 2**30, rel=1e-9)
        assert sum(row["time_s"].values()) == pytest.approx(est.time.step_time_s, rel=1e-9)
        # the table's GiB/GPU: what must fit (as `plan estimate` prints it), tight as the planner says
        assert row["memory_required_gib"] == pytest.approx(est.memory.required_bytes / 2**30, rel=1e-9)
        assert row["memory_required_gib"] <= row["memory_total_gib"] and row["memory_tight"] == est.memory.tight
        assert row["peak_step_time_s"] == pytest.approx(est.time.step_time_s * est.performance.mfu)
        assert row["days"] == pytest.approx(est.performance.days)


def test_curve_covers_whole_nodes_around_the_count(client):
    points = client.post("/ui/curve", json=FORM).json()
    gpus = [p["gpus"] for p in points]
    assert 48 in gpus and gpus == sorted(gpus) and all(g % 8 == 0 for g in gpus)
    fit = [p for p in points if p["fits"]]
    days = [p["days"] for p in fit]
    assert len(fit) >= 5 and days[0] > days[-1]  # more GPUs, fewer days


def test_a_spent_curve_budget_plans_the_forms_count_and_marks_the_rest_skipped(tmp_path):
    config = ServiceConfig(storage=f"sqlite:///{tmp_path / 'tune.db'}", workdir=tmp_path / "work", curve_budget_s=0.0)
    with TestClient(create_app(config)) as c:
        points = c.post("/ui/curve", json=FORM).json()
    gpus = [p["gpus"] for p in points]
    assert gpus == sorted(gpus) and len(gpus) >= 5
    planned = [p for p in points if not p["skipped"]]
    assert [p["gpus"] for p in planned] == [48] and planned[0]["fits"] and planned[0]["days"] > 0
    assert all(not p["fits"] and p["days"] is None for p in points if p["skipped"])


@pytest.mark.parametrize("fmt, name, marker", [
    ("deepspeed", "ds_config.json", '"zero_optimization"'),
    ("accelerate", "accelerate.yaml", "num_processes: 48"),
    ("slurm", "job.sbatch", "#SBATCH --nodes=6"),
])
def test_exports_download_plan_exports_files(client, fmt, name, marker):
    r = client.post(f"/ui/export/{fmt}", json={**FORM, "rank": 1})
    assert r.status_code == 200, r.text
    assert r.headers["content-disposition"] == f'attachment; filename="{name}"'
    assert marker in r.text


def test_export_refusals_and_bad_input_name_the_field(client):
    plans = client.post("/ui/estimate", json={"model": "7b", "gpus": 48, "top": 50}).json()["plans"]
    fsdp_rank = next(p["rank"] for p in plans if p["sharding"].startswith("fsdp"))
    r = client.post("/ui/export/deepspeed", json={"model": "7b", "gpus": 48, "rank": fsdp_rank})
    assert r.status_code == 422 and f"plan #{fsdp_rank} cannot be written as deepspeed" in r.json()["detail"][0]["msg"]
    assert client.post("/ui/export/accelerate", json={"model": "7b", "gpus": 48, "rank": fsdp_rank}).status_code == 200
    r = client.post("/ui/export/deepspeed", json={"model": "1t", "gpus": 8, "rank": 1})  # nothing fits
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "rank", r.text
    r = client.post("/ui/estimate", json={**FORM, "tokens": "lots"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "tokens"
    r = client.post("/ui/estimate", json={**FORM, "model": "/etc/passwd"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "model"
    r = client.post("/ui/estimate", json={"gpus": 8})
    assert r.status_code == 422 and "upload a config.json" in r.json()["detail"][0]["msg"]


def test_uploaded_configs(client):
    qwen = json.loads((FIXTURES / "qwen2.5-7b.json").read_text())
    r = client.post("/ui/estimate", json={"config": qwen, "config_name": "qwen.json", "gpus": 16})
    assert r.status_code == 200 and r.json()["params"] == "7.616B" and r.json()["model"] == "qwen"
    moe = json.loads((FIXTURES / "mixtral-8x7b.json").read_text())
    r = client.post("/ui/estimate", json={"config": moe, "config_name": "mixtral.json", "gpus": 16})
    assert r.status_code == 200 and r.json()["params"].startswith("46.7")
    r = client.post("/ui/estimate", json={"config": {**moe, "model_type": "dbrx"}, "config_name": "mixtral.json",
                                          "gpus": 16})
    msg = r.json()["detail"][0]["msg"]
    assert r.status_code == 422 and msg.startswith("mixtral.json: key 'model_type': mixture-of-experts model_type 'dbrx'")
    assert "/tmp" not in msg  # the upload's name, not the server's temporary file
