"""Real 2-rank runs (gloo on CPU) of a tiny mixture-of-experts model with sliding-window layers on every data-parallel
backend, and the MFU of the result counting the ACTIVE FLOPs as the planner does (planner/moe.py)."""

import json

import pytest

from planner import moe
from planner.flops import model_flops_per_token
from planner.model import ModelSpec
from trainer.config import TrainConfig
from trainer.launch import launch

pytestmark = pytest.mark.slow
SPEC = dict(name="tiny-moe", n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, vocab=256, max_positions=64,
            position="rope", norm="rmsnorm", mlp="swiglu", bias=False, tied_embeddings=False, ffn_hidden=128,
            moe_experts=4, moe_top_k=2, moe_ffn_hidden=32, moe_shared_experts=1, attn_window=8, attn_local_layers=1)


@pytest.mark.parametrize("kw, backend", [
    (dict(sharding="none", precision="bf16", grad_accum=2), "ddp"),
    (dict(sharding="fsdp_full_shard", activation_checkpointing="full"), "fsdp2"),
    (dict(sharding="zero1", activation_checkpointing="selective", attention="eager"), "deepspeed"),
    (dict(sharding="zero3", precision="bf16"), "deepspeed"),
])
def test_moe_runs_on_every_data_parallel_backend(tmp_path, kw, backend):
    path = tmp_path / "moe.json"
    path.write_text(json.dumps(SPEC))
    r = launch(TrainConfig(model=str(path), nproc=2, steps=4, warmup_steps=2, seq_len=32, timeout_s=240,
                           json_out=str(tmp_path / "r.json"), **kw))
    assert r.status == "ok", r.error
    assert r.backend == backend and len(r.losses) == 4 and all(0 < x < 10 for x in r.losses)
    spec = ModelSpec(**SPEC)
    flops = float(model_flops_per_token(spec, 32))
    assert flops == pytest.approx(float(moe.model_flops_per_token(spec, 32)))
    assert r.model_tflops_per_device == pytest.approx(flops * r.tokens_per_s / 2 / 1e12, rel=1e-9)
    # the active count: below what every expert would cost (6 x all parameters)
    all_experts = spec.model_copy(update={"moe_top_k": spec.moe_experts})
    assert flops < float(moe.model_flops_per_token(all_experts, 32))


@pytest.mark.parametrize("kw", [dict(tp=2), dict(pp=2, grad_accum=2)], ids=["tp2", "pp2"])
def test_windowed_layers_under_tp_and_pp_match_one_rank(tmp_path, kw):
    """Heads split (tp) or blocks split (pp): each block keeps its own window; the losses are one rank's."""
    dense = {k: v for k, v in SPEC.items() if not k.startswith("moe_")} | dict(attn_window=8, attn_local_layers=1,
                                                                               attn_chunked="pp" in kw)
    path = tmp_path / "w.json"
    path.write_text(json.dumps(dense))
    # memory measured: the saved-bytes meter reads tp's AsyncCollectiveTensor inputs through their inner tensor
    # (trainer/memory.py local_tensor; before, "invalid python storage" on a RoPE model's norm input under tp 2)
    base = dict(model=str(path), steps=4, warmup_steps=2, seq_len=32, timeout_s=240)
    r = launch(TrainConfig(nproc=2, json_out=str(tmp_path / "r.json"), **base, **kw))
    assert r.status == "ok", r.error
    one = launch(TrainConfig(nproc=1, json_out=str(tmp_path / "one.json"), **base,
                             **{k: v for k, v in kw.items() if k not in ("tp", "pp")}))
    assert one.status == "ok", one.error
    assert r.losses == pytest.approx(one.losses, abs=1e-4)
