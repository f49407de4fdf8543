"""`POST /estimate` with a pinned stack that cannot run another pinned knob: a 422 naming the knob, with
`plan estimate`'s message (it answered 200 with nothing that fits), and any other pinned dead end where
`plan estimate` exits 2; the real app through TestClient."""

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


@pytest.mark.parametrize("body,field,reason", [
    ({"tp": 8, "vpp": 2}, "vpp", "vpp > 1 needs pp > 1"),
    ({"stack": "fsdp", "global_batch": 12}, "global_batch", "global_batch not divisible by micro_batch x dp"),
    ({"pp": 2, "offload": "optimizer+params"}, "offload", "parameter offload needs ZeRO-3 or FSDP"),
])
def test_pinned_dead_end_is_a_422_where_the_cli_exits_2(client, body, field, reason):
    """Pins that each pass alone but leave no candidate (none reached the memory check): `plan
    estimate` exits 2 with one line; the service answered 200 with closest misses, now 422 with that line."""
    r = client.post("/estimate", json={"model": "7b", "gpus": 8, **body})
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"] == ["body", field], detail
    assert detail["msg"].startswith(f"no plan satisfies the pinned knobs: {reason} ("), detail
    flags = [x for k, v in body.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    out = CliRunner().invoke(cli, ["estimate", "--model", "7b", "--gpus", "8", *flags])
    assert out.exit_code == 2, out.output
    assert f"{field}: {detail['msg']}" in " ".join(out.output.split())


def test_nothing_fits_in_memory_is_still_a_200_with_the_misses(client):
    """A valid request whose plans all run out of memory is not bad input: 200, closest misses."""
    r = client.post("/estimate", json={"model": "llama2-70b", "gpus": 1, "offload": "none"}, params={"top": 2})
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["results"] and not any(e["fits"] for e in report["results"])


def test_a_stack_that_runs_the_pins_still_answers_200(client):
    r = client.post("/estimate", json={"model": "7b", "gpus": 8, "stack": "megatron", "sharding": "zero1"},
                    params={"top": 1})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["fits"]


def test_page_dead_end_is_the_same_422(client):
    """The planning page's /ui/estimate: a batch of 1 sequence on 64 GPUs of GPT-2 (12 layers) leaves
    no layout; it drew a table of nothing that fits, now the page gets `plan estimate`'s line."""
    r = client.post("/ui/estimate", json={"model": "gpt2", "gpus": 64, "global_batch": 1})
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"] == ["body", "global_batch"], detail
    out = CliRunner().invoke(cli, ["estimate", "--model", "gpt2", "--gpus", "64", "--global-batch", "1"])
    assert out.exit_code == 2 and f"global_batch: {detail['msg']}" in " ".join(out.output.split()), out.output
