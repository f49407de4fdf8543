"""`plan serve` over real HTTP: estimate, catalog, auth on POST /tune, size limit, 422s."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from service_server import running_server

TOKEN = "test-token-123"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("serve"), token=TOKEN) as url:
        yield url


def test_openapi_is_served(base):
    spec = httpx.get(base + "/openapi.json").json()
    for path in ("/estimate", "/catalog", "/catalog/gpus/{gpu_id}", "/catalog/clusters/{cluster_id}",
                 "/catalog/stacks/{stack_id}",
                 "/tune", "/tune/{study}", "/export/{study}/deepspeed", "/export/{study}/fsdp"):
        assert path in spec["paths"], path
    assert "Scenario" in spec["components"]["schemas"]


def test_estimate_ranks_a_scenario(base):
    r = httpx.post(base + "/estimate", json={"model": "7b", "gpus": 16, "cluster": "dgx-h100"},
                   params={"top": 5}, timeout=60)
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["system"]["gpus"] == 16 and report["system"]["gpu"]["id"] == "h100-80gb"
    speeds = [e["performance"]["tokens_per_s"] for e in report["results"]]
    assert 1 <= len(speeds) <= 5 and all(e["fits"] for e in report["results"])
    assert speeds[0] >= 0.98 * max(speeds)  # near-ties (2%) go to simpler plans
    assert report["fitting"] > 0 and isinstance(report["rejected"], dict)


@pytest.mark.parametrize("body, field", [
    ({"model": "7b", "gpus": 8, "sharding": "zero9"}, "sharding"),
    ({"model": "7b", "gpus": 0}, "gpus"),
    ({"model": "7b", "gpus": 8, "gpu": "h1000"}, "gpu"),
    ({"model": "7b", "gpus": 12, "gpus_per_node": 8}, "gpus"),
    ({"model": "/etc/passwd"}, "model"),
    ({"model": "7b", "surprise": 1}, "surprise"),
    ({"model": "7b", "gpus": 8}, None),  # control: valid
])
def test_invalid_input_is_422_naming_the_field(base, body, field):
    r = httpx.post(base + "/estimate", json=body, timeout=60)
    if field is None:
        assert r.status_code == 200
        return
    assert r.status_code == 422, r.text
    locs = [item["loc"] for item in r.json()["detail"]]
    assert any(field in loc for loc in locs), locs


def test_bad_query_and_malformed_json(base):
    r = httpx.post(base + "/estimate", json={"model": "7b"}, params={"objective": "speed"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "objective"]
    r = httpx.post(base + "/estimate", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_body_size_limit(base):
    big = {"model": "7b", "pad": "x" * (70 * 1024)}
    r = httpx.post(base + "/estimate", json=big)
    assert r.status_code == 413
    def chunks():  # no Content-Length: counted as it streams
        for _ in range(80):
            yield b"x" * 1024
    r = httpx.post(base + "/estimate", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_catalog(base):
    cat = httpx.get(base + "/catalog").json()
    assert "h100-80gb" in cat["gpus"] and "dgx-a100" in cat["clusters"] and "tiny" in cat["models"]
    gpu = httpx.get(base + "/catalog/gpus/h100-80gb").json()
    assert gpu["hbm_gib"] > 70
    cluster = httpx.get(base + "/catalog/clusters/dgx-a100").json()
    assert cluster["gpus_per_node"] == 8
    r = httpx.get(base + "/catalog/gpus/h100")
    assert r.status_code == 404 and "h100-80gb" in r.json()["detail"]


def test_catalog_stacks(base):
    """Stack profiles: each with its fitted factors, fit sources and cross-validated error (the +-N%)."""
    stacks = httpx.get(base + "/catalog").json()["stacks"]
    assert {"fsdp", "megatron", "hf", "generic"} <= set(stacks)
    assert all(s["cv_mape_pct"] > 0 for i, s in stacks.items() if i != "bundled")
    fsdp = httpx.get(base + "/catalog/stacks/fsdp").json()
    assert fsdp == stacks["fsdp"] and fsdp["fit_sources"] and fsdp["cv_by_source"]
    assert "fsdp_full_shard" in fsdp["shardings"] and not fsdp["tensor_parallel"]
    r = httpx.get(base + "/catalog/stacks/fsdp2")
    assert r.status_code == 404 and "did you mean fsdp" in r.json()["detail"]


def test_curve_stops_planning_when_the_page_has_gone(base, tmp_path_factory):
    """The page aborts the curve of an older plan (plan_service/web/static/page.js): the server then skips
    the GPU counts left instead of planning them for nobody (a MoE model's count is seconds of CPU)."""
    with pytest.raises(httpx.ReadTimeout):  # the client leaves while the first count is planned
        httpx.post(base + "/ui/curve", json={"model": "mixtral-8x7b", "gpus": 16}, timeout=httpx.Timeout(10, read=0.5))
    log = next(tmp_path_factory.getbasetemp().glob(f"serve*/server-{base.rsplit(':', 1)[1]}.log"))
    deadline = time.monotonic() + 120
    while "the page has gone" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    found = re.search(r"POST /ui/curve: the page has gone; (\d+) of (\d+) GPU counts planned", log.read_text())
    assert found, log.read_text()[-2000:]
    assert int(found[1]) < int(found[2]) == 8  # 8 ... 128 GPUs around 16 at 8 per node


def test_tune_needs_the_token(base):
    body = {"model": "tiny", "budget_s": 30}
    assert httpx.post(base + "/tune", json=body).status_code == 401
    r = httpx.post(base + "/tune", json=body, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = httpx.post(base + "/tune", json={"model": "tiny", "budget_s": -1},
                   headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "budget_s"]
    r = httpx.post(base + "/tune", json={"model": "no-such-model", "budget_s": 30},
                   headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "model"]


def test_unknown_study_is_404(base):
    assert httpx.get(base + "/tune/nope").status_code == 404
    assert httpx.get(base + "/export/nope/deepspeed").status_code == 404


def test_tune_is_refused_without_a_configured_token(tmp_path):
    with running_server(tmp_path, token=None) as url:
        r = httpx.post(url + "/tune", json={"model": "tiny", "budget_s": 30},
                       headers={"Authorization": "Bearer anything"})
        assert r.status_code == 503 and "PLAN_API_TOKEN" in r.json()["detail"]
