"""`plan estimate --explain`'s model FLOPs per token (planner/flops_breakdown.py), by hand for gpt-oss-120b
(openai/gpt-oss-120b config.json: 36 layers x 2880, 64 query heads of 64, 8 kv heads, 128 experts of 2880 top-4, a
128-token sliding window on every other layer, vocab 201088) and Llama 4 Scout's chunked attention."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from plan_cli.main import app as cli
from planner import flops, flops_breakdown
from planner.presets import resolve_model

H, Q, KV, L, V = 2880, 64 * 64, 8 * 64, 36, 201088


def test_gpt_oss_120b_terms_by_hand():
    spec = resolve_model("gpt-oss-120b")
    s, w = 4096, 128
    proj = 2 * H * (Q + 2 * KV) + 2 * Q * H  # q, k, v and o
    mlp = 2 * H * 3 * 4 * 2880  # four SwiGLU experts of 2880 per token
    router = 2 * H * 128
    keys_window = 2 * (w * (w + 1) / 2 + (s - w) * w) / (s + 1)  # sum of min(i, w) keys, x 2s/(s+1) convention
    core = L * 4 * Q * (keys_window + s) / 2  # half the layers windowed, half full
    logits = 2 * H * V
    got = {term: g for term, g, _ in flops_breakdown.rows(spec, s)}
    assert got["linear layers (forward)"] == pytest.approx(L * (proj + mlp + router) / 1e9, rel=1e-9)
    assert got["attention core (forward)"] == pytest.approx(core / 1e9, rel=1e-9)
    assert got["logits (forward)"] == pytest.approx(logits / 1e9, rel=1e-9)
    assert got["model FLOPs (training)"] == pytest.approx(float(flops.model_flops_per_token(spec, s)) / 1e9, rel=1e-12)
    assert "window 128 on 18/36 layers: 252 keys per token, the others 4,096" in flops_breakdown.attention_keys(spec, s)


def test_chunked_layers_count_their_block_and_the_explain_view_shows_it():
    scout = resolve_model("llama4-scout")
    # past the chunk: 8192-token blocks, 36 of 48 layers; the NoPE layers see the whole sequence
    text = flops_breakdown.attention_keys(scout, 32768)
    assert text.startswith("chunked attention 8192 on 36/48 layers: 8,193 keys per token, the others 32,768")
    out = CliRunner().invoke(cli, ["estimate", "--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--gpus", "8",
                                   "--ep", "8", "--tp", "1", "--pp", "1", "--explain", "--top", "1"],
                             env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "model FLOPs per token at seq_len 4096 (MFU)" in out.output and "252 keys per token" in out.output
