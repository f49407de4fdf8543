"""DeepSeek-V3's memory-saving switches (planner/memory_recipe.py -> planner/memory_savings.py) on `plan estimate`
and `POST /estimate`: they change the memory the plans need as the paper says, `--json` reports them, and a
switch that would do nothing (FP8 caching with bf16 pinned) is exit 2 / 422 with one line naming the field."""

import json

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from plan_cli.main import app
from plan_service.app import ServiceConfig, create_app

PINNED = {"model": "deepseek-v2-lite", "cluster": "dgx-h100", "gpus": 8, "tp": 1, "pp": 1, "ep": 8,
          "micro_batch": 1, "grad_accum": 4, "sharding": "zero1", "activation_checkpointing": "none",
          "seq_len": 4096}
ARGS = [a for k, v in PINNED.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def _estimate(*flags: str) -> dict:
    result = CliRunner().invoke(app, ["estimate", *ARGS, "--top", "1", "--json", *flags])
    assert result.exit_code in (0, 3), result.output  # 3: nothing fits; the closest miss still carries memory
    return json.loads(result.output)


def test_switches_cut_the_memory_the_paper_says_they_cut():
    plain = _estimate()
    assert plain["memory_recipe"] is None
    recompute = _estimate("--recompute-norms-mla-up")
    assert recompute["memory_recipe"] == {"recompute_norms_mla_up": True, "fp8_activation_cache": False,
                                          "optimizer_moments_bf16": False}
    mem0, mem1 = plain["results"][0]["memory"], recompute["results"][0]["memory"]
    assert mem1["activations_bytes"] < mem0["activations_bytes"]  # norms' outputs, MLA latents and Q/K/V dropped
    assert mem1["optimizer_bytes"] == mem0["optimizer_bytes"]
    bf16 = _estimate("--optimizer-moments-bf16")["results"][0]["memory"]
    assert mem0["optimizer_bytes"] > 0  # AdamW fp32 moments 8 B + master 4 B -> 4 B + 4 B per parameter
    assert bf16["optimizer_bytes"] == pytest.approx(mem0["optimizer_bytes"] * 8 / 12, rel=1e-6)
    assert bf16["activations_bytes"] == mem0["activations_bytes"]


def test_fp8_cache_with_bf16_pinned_is_one_line_exit_2():
    result = CliRunner().invoke(app, ["estimate", *ARGS, "--precision", "bf16", "--fp8-activation-cache"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: fp8_activation_cache:"), result.output
    assert "allowed: only with --precision fp8" in lines[0]


def test_service_takes_the_same_switches_and_refusals(tmp_path):
    with TestClient(create_app(ServiceConfig(storage=f"sqlite:///{tmp_path}/s.db", workdir=tmp_path))) as client:
        body = {**PINNED, "recompute_norms_mla_up": True}
        ok = client.post("/estimate", json=body, params={"top": 1})
        assert ok.status_code == 200, ok.text
        cli = _estimate("--recompute-norms-mla-up")
        assert ok.json()["memory_recipe"] == cli["memory_recipe"]
        assert ok.json()["results"][0]["memory"] == cli["results"][0]["memory"]
        bad = client.post("/estimate", json={**PINNED, "precision": "bf16", "fp8_activation_cache": True})
        assert bad.status_code == 422, bad.text
        assert "fp8_activation_cache" in bad.text and "allowed: only with --precision fp8" in bad.text
