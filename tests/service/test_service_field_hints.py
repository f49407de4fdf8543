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
