"""A body field the endpoint's model does not have gets the closest fields it has: `POST /tune` with the CLI's
`budget` (the API's field is budget_s) answered two bare 422 entries ("Field required", "Extra inputs are not
permitted"); the real app through TestClient."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from plan_service.app import ServiceConfig, create_app


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve")
    config = ServiceConfig(storage=f"sqlite:///{work}/s.db", workdir=work, insecure=True)
    with TestClient(create_app(config)) as c:
        yield c


@pytest.mark.parametrize("path, body, field, hint", [
    ("/tune", {"model": "tiny", "gpus": 2, "budget": 60}, "budget", "did you mean budget_s?"),
    ("/estimate", {"model": "7b", "gpus": 8, "sequence_len": 2048}, "sequence_len", "seq_len"),
])
def test_an_unknown_field_names_the_closest(client, path, body, field, hint):
    r = client.post(path, json=body)
    assert r.status_code == 422, r.text
    extra = [d for d in r.json()["detail"] if d["type"] == "extra_forbidden"]
    assert extra and extra[0]["loc"] == ["body", field] and hint in extra[0]["msg"], r.json()


def test_a_field_like_none_gets_no_hint(client):
    r = client.post("/estimate", json={"model": "7b", "gpus": 8, "zzzz": 1})
    extra = [d for d in r.json()["detail"] if d["type"] == "extra_forbidden"]
    assert r.status_code == 422 and extra and "did you mean" not in extra[0]["msg"], r.json()


@pytest.mark.parametrize("path", ["/estimate", "/tune"])
def test_a_form_body_says_the_endpoint_takes_json(client, path):
    """`curl -d 'model=7b&gpus=8'` (a form, no JSON content type) got pydantic's "Input should be a valid
    dictionary or object to extract fields from": now 415 saying the endpoint takes a JSON object."""
    r = client.post(path, content="model=7b&gpus=8", headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415, r.text
    (d,) = r.json()["detail"]
    assert d["loc"] == ["body"] and "takes a JSON object (Content-Type: application/json" in d["msg"]
    assert "got Content-Type: application/x-www-form-urlencoded" in d["msg"] and "dictionary" not in d["msg"]


def test_json_that_is_not_an_object_and_no_body(client):
    r = client.post("/estimate", json=[{"model": "7b"}])
    assert r.status_code == 422 and "got JSON that is not an object" in r.json()["detail"][0]["msg"], r.text
    r = client.post("/estimate")
    assert r.status_code == 422 and r.json()["detail"][0]["msg"].startswith("no body: this endpoint takes a JSON"), r.text
    r = client.post("/estimate", json={"model": "7b", "gpus": "x"})  # a field's error stays the field's
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "gpus"], r.text
