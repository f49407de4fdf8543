"""Tensor and pipeline parallelism in the bundled trainer: real gloo runs on CPU ranks.

A tensor- or pipeline-parallel run computes the same model as one rank does: with the same
seed and data its losses match a single-rank run step for step.
"""

import json
from pathlib import Path

import pytest

from trainer.config import TrainConfig
from trainer.launch import launch
from trainer.result import TrainResult

pytestmark = pytest.mark.slow


def run(out, **kw) -> TrainResult:
    base = dict(model="tiny", nproc=2, steps=6, warmup_steps=2, seq_len=32, timeout_s=300, json_out=out)
    return launch(TrainConfig(**(base | kw)))


def single_rank_losses(tmp_path, **kw) -> list[float]:
    kw = {k: v for k, v in kw.items() if k not in ("tp", "pp", "vpp", "pp_schedule")}
    r = run(str(tmp_path / "single.json"), **(kw | dict(nproc=1)))
    assert r.status == "ok", r.error
    return r.losses


def assert_falls(losses):
    assert sum(losses[-2:]) / 2 < losses[0] - 0.2, losses


@pytest.mark.parametrize("kw", [
    dict(tp=2),
    dict(tp=2, precision="bf16", activation_checkpointing="selective", attention="eager"),
    dict(pp=2),  # one micro batch: GPipe (1F1B needs grad_accum >= pp)
    dict(pp=2, grad_accum=2, activation_checkpointing="full"),
    dict(model="tiny4", pp=2, vpp=2, grad_accum=4),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_parallel_run_matches_one_rank(tmp_path, kw):
    out = str(tmp_path / "r.json")
    r = run(out, **kw)
    assert r.status == "ok", r.error
    assert TrainResult.model_validate_json(Path(out).read_text()).status == "ok"
    assert_falls(r.losses)
    ref = single_rank_losses(tmp_path, **kw)
    tol = 2e-2 if kw.get("precision") == "bf16" else 1e-4
    assert r.losses == pytest.approx(ref, abs=tol)
    par = r.parallel
    assert (par.tp, par.pp, par.vpp, par.dp) == (kw.get("tp", 1), kw.get("pp", 1), kw.get("vpp", 1), 1)
    assert r.config["dp"] == 1 and r.config["global_batch"] == r.config["micro_batch"] * r.config["grad_accum"]
    assert [x.rank for x in par.ranks] == [0, 1]
    assert all(x.params_bytes > 0 and x.optimizer_bytes > 0 and x.saved_activations_bytes > 0 for x in par.ranks)
    if kw.get("pp", 1) > 1:
        n_layers = r.model["n_layers"]
        assert sum(par.stage_layers) == n_layers and len(par.stage_layers) == par.pp * par.vpp
        assert [x.stages for x in par.ranks] == [list(range(i, par.pp * par.vpp, par.pp)) for i in range(par.pp)]
        assert par.schedule == {1: "gpipe", 2: "1f1b", 4: "interleaved_1f1b"}[r.config["grad_accum"]]
        assert all(x.busy_s > 0 and x.schedule_s >= x.busy_s * 0.5 for x in par.ranks)
        assert par.bubble_ratio is not None
    else:
        assert par.sequence_parallel and par.ranks[0].params_bytes == par.ranks[1].params_bytes


def test_uneven_pipeline_split(tmp_path):
    """3 layers on 2 stages: the first stage takes 2 blocks (and the embeddings)."""
    spec = tmp_path / "three.json"
    spec.write_text(json.dumps(dict(name="three", n_layers=3, hidden=64, n_heads=4, vocab=256, max_positions=64)))
    r = run(str(tmp_path / "r.json"), model=str(spec), pp=2, grad_accum=2)
    assert r.status == "ok", r.error
    assert r.parallel.stage_layers == [2, 1] and [x.layers for x in r.parallel.ranks] == [[2], [1]]
    assert r.losses == pytest.approx(single_rank_losses(tmp_path, model=str(spec), grad_accum=2), abs=1e-4)


@pytest.mark.parametrize("kw", [
    dict(tp=2, sharding="fsdp_full_shard", precision="bf16"),  # 2-D mesh: FSDP2 over dp x TP
    dict(pp=2, tp=2, grad_accum=2),  # TP inside pipeline stages, vocab-parallel loss on the last
    dict(pp=2, grad_accum=2),  # pipeline x data parallel (gradient average over dp)
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_four_rank_compositions(tmp_path, kw):
    r = run(str(tmp_path / "r.json"), model="tiny4", nproc=4, steps=4, **kw)
    assert r.status == "ok", r.error
    assert r.parallel.dp == 4 // (kw.get("tp", 1) * kw.get("pp", 1))
    assert len(r.parallel.ranks) == 4 and r.losses[-1] < r.losses[0]
    if r.parallel.dp == 1:  # same data as one rank: same losses
        assert r.losses == pytest.approx(single_rank_losses(tmp_path, model="tiny4", steps=4, **kw), abs=1e-4)


@pytest.mark.parametrize("kw, field", [
    (dict(tp=3), "tp"),  # does not divide the world size
    (dict(nproc=3, tp=3), "tp"),  # does not divide tiny's 4 heads
    (dict(pp=2, nproc=4, model="tiny4", tp=2, seq_len=33), "tp"),  # nor the sequence (sequence parallel)
    (dict(pp=3, nproc=3), "pp"),  # more stages than tiny's 2 layers
    (dict(model="tiny4", pp=2, vpp=3), "vpp"),  # 3 does not divide the 2 layers per stage
    (dict(vpp=2), "vpp"),  # virtual stages without a pipeline
    (dict(pp=2, pp_schedule="1f1b"), "grad_accum"),  # 1F1B needs grad_accum >= pp
    (dict(pp=2, sharding="zero2"), "sharding"),
    (dict(tp=2, nproc=4, sharding="none"), "sharding"),  # DDP cannot replicate DTensors
])
def test_bad_parallel_config(tmp_path, kw, field):
    r = run(str(tmp_path / "r.json"), **kw)
    assert r.status == "bad_config" and r.error.startswith(field + ":"), r.error
    assert "\n" not in r.error


def test_cli_bad_tp_exits_2(tmp_path):
    from typer.testing import CliRunner

    from plan_cli.main import app

    res = CliRunner().invoke(app, ["train", "--model", "tiny", "--nproc", "3", "--tp", "3"])
    assert res.exit_code == 2 and "tp" in res.output and "n_heads" in res.output
