"""`POST /estimate` takes `plan estimate`'s MoE settings (planner/moe_options.py): the real app through FastAPI's
TestClient; the same values are refused with the same one-line message as the CLI, as a 422 naming the field."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from plan_cli.main import app as cli
from plan_service.app import ServiceConfig, create_app

PINNED = {"gpu": "h100-80gb", "gpus": 64, "model": "mixtral-8x7b", "tp": 1, "pp": 1, "ep": 8, "micro_batch": 1,
          "grad_accum": 4, "sharding": "zero1", "seq_len": 4096}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    work = tmp_path_factory.mktemp("serve")
    with TestClient(create_app(ServiceConfig(storage=f"sqlite:///{work}/s.db", workdir=work))) as c:
        yield c


def _best(report: dict) -> dict:
    return report["results"][0]["time"]


def test_settings_change_the_estimate_as_on_the_cli(client):
    plain = client.post("/estimate", json=PINNED, params={"top": 1})
    assert plain.status_code == 200, plain.text
    body = {**PINNED, "moe_capacity_factor": 2.0, "moe_fp8_dispatch": True, "moe_a2a_overlap": True}
    tuned = client.post("/estimate", json=body, params={"top": 1})
    assert tuned.status_code == 200, tuned.text
    report = tuned.json()
    assert report["moe_settings"] == {"moe_capacity_factor": 2.0, "moe_fp8_dispatch": True, "moe_node_limit": None,
                                      "moe_a2a_overlap": True, "moe_shared_expert_overlap": False}
    assert plain.json()["moe_settings"]["moe_capacity_factor"] is None
    # capacity 2 pads every expert's GEMM rows to twice the mean: more expert compute than dropless (1.25)
    assert _best(report)["moe_compute_s"] > _best(plain.json())["moe_compute_s"]
    # the CLI with the same flags predicts the same step
    import json

    flags = ["--moe-capacity-factor", "2", "--moe-fp8-dispatch", "--moe-a2a-overlap", "--json", "--top", "1"]
    args = ["estimate", "--gpu", "h100-80gb", "--gpus", "64", "--model", "mixtral-8x7b", "--tp", "1", "--pp", "1",
            "--ep", "8", "--micro-batch", "1", "--grad-accum", "4", "--sharding", "zero1", "--seq-len", "4096"]
    out = CliRunner().invoke(cli, args + flags)
    assert out.exit_code == 0, out.output
    assert _best(json.loads(out.output))["step_time_s"] == pytest.approx(_best(report)["step_time_s"], rel=1e-9)


@pytest.mark.parametrize("extra, field, cli_flags", [
    ({"moe_capacity_factor": 0}, "moe_capacity_factor", ["--moe-capacity-factor", "0"]),
    ({"moe_capacity_factor": -2.5}, "moe_capacity_factor", ["--moe-capacity-factor", "-2.5"]),
    ({"moe_node_limit": 0}, "moe_node_limit", ["--moe-node-limit", "0"]),
    ({"moe_a2a_overlap": True, "moe_shared_expert_overlap": True}, "moe_shared_expert_overlap",
     ["--moe-a2a-overlap", "--moe-shared-expert-overlap"]),
    ({"model": "7b", "gpus": 8, "tp": None, "ep": None, "pp": None, "seq_len": None, "moe_fp8_dispatch": True},
     "moe_fp8_dispatch", ["--moe-fp8-dispatch"]),
])
def test_bad_values_are_422_with_the_cli_message(client, extra, field, cli_flags):
    body = {k: v for k, v in {**PINNED, **extra}.items() if v is not None}
    r = client.post("/estimate", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert len(detail) == 1 and detail[0]["loc"] == ["body", field] and "allowed:" in detail[0]["msg"]
    args = ["estimate"] + [x for k, v in body.items() if not k.startswith("moe_")
                           for x in (f"--{k.replace('_', '-')}", str(v))]
    out = CliRunner().invoke(cli, args + cli_flags)
    assert out.exit_code == 2 and out.output.strip() == f"error: {field}: {detail[0]['msg']}"


@pytest.mark.parametrize("extra, field", [({"moe_fp8_dispatch": "maybe"}, "moe_fp8_dispatch"),
                                          ({"moe_node_limit": 1.5}, "moe_node_limit"),
                                          ({"moe_capacity_factor": "high"}, "moe_capacity_factor")])
def test_wrong_types_are_422_naming_the_field(client, extra, field):
    r = client.post("/estimate", json={**PINNED, **extra})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", field]


def test_an_inline_llama4_config_says_its_counts_and_seq_len_origin(client):
    """POST /estimate with Llama 4 Scout's config.json body: the text model's 107.8B total / 17.2B active (Meta's
    card: 17B active; its 109B counts the vision encoder), chunked attention 8192 on the 36 RoPE layers, and
    seq_len 8192 (rope_scaling.original_max_position_embeddings) said as the pretraining context, not pinned;
    the page's header says the same."""
    from tests.planner.test_hf_llama4 import SCOUT

    body = {"hf_config": SCOUT, "gpus": 64, "gpu": "h100-80gb"}
    r = client.post("/estimate", json=body, params={"top": 1})
    assert r.status_code == 200, r.text
    d = r.json()
    assert (d["model"]["attn_window"], d["model"]["attn_chunked"], d["model"]["attn_local_layers"]) == (8192, True, 36)
    assert round(d["n_params"] / 1e8) == 1078 and round(d["active_params"] / 1e8) == 172
    assert d["seq_len"] == 8192 and "train_seq_len 8,192" in d["seq_len_rule"]
    page = client.post("/ui/estimate", json={"config": SCOUT, "gpus": 64, "gpu": "h100-80gb", "top": 1})
    assert page.status_code == 200, page.text
    header = page.json()["header"]
    assert "17.173B active, embeddings included" in header and "seq_len 8192 (the context" in header
