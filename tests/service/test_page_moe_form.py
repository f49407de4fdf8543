"""The planning page's MoE settings and memory-saving switches (no browser; the browser half is in
test_page_browser.py): the form's inputs are named exactly as POST /estimate's fields, of the same kind (a checkbox
for a switch, a number for a number), the page's endpoints take them, check them with the same code as POST
/estimate (one 422 line naming the field) and plan what the API plans with them."""

from __future__ import annotations

import typing
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from plan_service import ServiceConfig, create_app
from plan_service.models import EstimateRequest
from plan_service.web.routes import PageScenario
from planner import moe
from planner.memory_recipe import FIELDS as RECIPE_FIELDS
from planner.moe_options import FIELDS as MOE_FIELDS
from planner.presets import list_presets

PAGE = Path(__file__).resolve().parents[2] / "plan_service" / "web" / "static" / "index.html"
MOE_FORM = {"model": "mixtral-8x7b", "gpus": 64}


class _Fieldsets(HTMLParser):
    """{fieldset id: {input name: input type}} of the fieldsets whose class holds api-fields."""

    def __init__(self):
        super().__init__()
        self.sets: dict[str, dict[str, str]] = {}
        self.hidden: dict[str, bool] = {}
        self.current: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "fieldset" and "api-fields" in (a.get("class") or "").split():
            self.current = a["id"]
            self.sets[self.current] = {}
            self.hidden[self.current] = "hidden" in a
        elif tag == "input" and self.current is not None and "name" in a:
            self.sets[self.current][a["name"]] = a.get("type", "text")
            assert a.get("id") == a["name"], a  # the browser test finds each by the API field's name

    def handle_endtag(self, tag):
        if tag == "fieldset":
            self.current = None


def _form() -> _Fieldsets:
    parser = _Fieldsets()
    parser.feed(PAGE.read_text(encoding="utf-8"))
    return parser


def _kind(model, field: str) -> str:
    annotation = model.model_fields[field].annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    return "checkbox" if args == [bool] else "number"


def test_form_fields_are_the_api_fields_and_cannot_drift():
    form = _form()
    assert set(form.sets["moe-settings"]) == set(MOE_FIELDS)
    assert set(form.sets["memory-settings"]) == set(RECIPE_FIELDS)
    assert form.hidden == {"moe-settings": True, "memory-settings": False}  # MoE: shown for MoE models only
    for name, kind in {**form.sets["moe-settings"], **form.sets["memory-settings"]}.items():
        for model in (EstimateRequest, PageScenario):
            assert name in model.model_fields, (model.__name__, name)
            assert _kind(model, name) == kind, (model.__name__, name, kind)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("page-moe")
    with TestClient(create_app(ServiceConfig(storage=f"sqlite:///{tmp / 'tune.db'}", workdir=tmp / "work"))) as c:
        yield c


def test_moe_models_are_the_presets_with_experts(client):
    names = client.get("/ui/moe-models").json()
    presets = list_presets()
    assert names == sorted(n for n, spec in presets.items() if moe.is_moe(spec))
    assert "mixtral-8x7b" in names and "deepseek-v3" in names and "llama2-7b" not in names


def test_page_plans_what_post_estimate_plans_with_the_same_settings(client):
    settings = {"moe_capacity_factor": 2.0, "moe_a2a_overlap": True, "optimizer_moments_bf16": True}
    page = client.post("/ui/estimate", json={**MOE_FORM, **settings, "top": 1})
    api = client.post("/estimate", json={**MOE_FORM, **settings}, params={"top": 1})
    plain = client.post("/ui/estimate", json={**MOE_FORM, "top": 1})
    assert page.status_code == api.status_code == plain.status_code == 200, page.text
    row, est = page.json()["plans"][0], api.json()["results"][0]
    assert row["step_time_s"] == pytest.approx(est["time"]["step_time_s"], rel=1e-9)
    assert sum(row["memory_gib"].values()) == pytest.approx(est["memory"]["total_bytes"] / 2**30, rel=1e-9)
    assert row["step_time_s"] != pytest.approx(plain.json()["plans"][0]["step_time_s"], rel=1e-6)


@pytest.mark.parametrize("body, field, words", [
    ({**MOE_FORM, "moe_capacity_factor": 0}, "moe_capacity_factor", "allowed: a number > 0"),
    ({**MOE_FORM, "moe_a2a_overlap": True, "moe_shared_expert_overlap": True}, "moe_shared_expert_overlap",
     "allowed: one of the two overlaps"),
    ({"model": "7b", "gpus": 8, "moe_fp8_dispatch": True}, "moe_fp8_dispatch", "has no experts"),
    ({**MOE_FORM, "moe_node_limit": 0}, "moe_node_limit", "allowed: an integer >= 1"),
])
def test_bad_settings_are_one_422_line_as_from_post_estimate(client, body, field, words):
    page = client.post("/ui/estimate", json=body)
    assert page.status_code == 422, page.text
    detail = page.json()["detail"]
    assert len(detail) == 1 and detail[0]["loc"][-1] == field and words in detail[0]["msg"]
    api = client.post("/estimate", json=body)
    assert api.status_code == 422 and api.json()["detail"][0]["msg"] == detail[0]["msg"]


def test_page_export_carries_the_switches_and_refuses_what_the_format_cannot_write(client):
    r = client.post("/ui/export/deepspeed", json={"model": "7b", "gpus": 48, "rank": 1, "optimizer_moments_bf16": True})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][-1] == "optimizer_moments_bf16" and "DeepSpeed" in r.json()["detail"][0]["msg"]
    assert client.post("/ui/export/deepspeed", json={"model": "7b", "gpus": 48, "rank": 1}).status_code == 200
