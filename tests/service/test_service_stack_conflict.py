"""`POST /estimate` with a pinned stack that cannot run another pinned knob: a 422 naming the knob, with
`plan estimate`'s message (it answered 200 with nothing that fits); the real app through TestClient."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from plan_cli.main import app as cli
from plan_service.app import ServiceConfig, create_app


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve")
    with TestClient(create_app(ServiceConfig(storage=f"sqlite:///{work}/s.db", workdir=work))) as c:
        yield c


@pytest.mark.parametrize("body,field", [
    ({"stack": "megatron", "sharding": "fsdp_full_shard"}, "sharding"),
    ({"stack": "hf", "pp": 2}, "pp"),
])
def test_conflict_is_a_422_with_the_cli_message(client, body, field):
    r = client.post("/estimate", json={"model": "7b", "gpus": 8, **body})
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"] == ["body", field] and f"stack {body['stack']} does not run" in detail["msg"]
    flags = [x for k, v in body.items() for x in (f"--{k}", str(v))]
    out = CliRunner().invoke(cli, ["estimate", "--model", "7b", "--gpus", "8", *flags])
    assert out.exit_code == 2
    assert detail["msg"] in " ".join(out.output.split())


def test_a_stack_that_runs_the_pins_still_answers_200(client):
    r = client.post("/estimate", json={"model": "7b", "gpus": 8, "stack": "megatron", "sharding": "zero1"},
                    params={"top": 1})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["fits"]
