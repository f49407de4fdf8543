"""What `plan tune` measures is what it exports: one DeepSpeed config builder for the
trainer, the tuner's trials and `plan export`; the best trial's stored config is exported
byte for byte. And the `plan estimate --save plan.toml` -> `plan tune` workflow."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from planner.exports.deepspeed_json import config_for_knobs, config_text
from planner.resolve import resolve_model
from planner.scenario import Scenario
from tune_helpers import plan

runner = CliRunner()
KNOBS = {"sharding": "zero3", "offload": "none", "activation_checkpointing": "full", "precision": "fp16",
         "micro_batch": 2, "grad_accum": 2, "optimizer": "sgd"}


def test_trainer_builds_its_deepspeed_config_with_the_export_builder():
    from trainer.backends.deepspeed_backend import ds_config_from_knobs  # imports torch
    from trainer.config import TrainConfig

    spec = resolve_model(Scenario(model="tiny"))
    cfg = TrainConfig(model="tiny", seq_len=32, lr=2e-3, **KNOBS)
    conf = ds_config_from_knobs(cfg, 2, False, spec)
    from planner.exports.common import Recipe

    same = config_for_knobs(KNOBS, dp=2, seq_len=32, model=spec, target="cpu",
                            recipe=Recipe(lr=2e-3, weight_decay=0.0, warmup_steps=0, grad_clip=0.0))
    assert conf == same
    # one source of truth for the details that used to differ between trainer and export
    assert conf["fp16"]["initial_scale_power"] == 16 and conf["zero_optimization"]["stage"] == 3
    assert conf["zero_optimization"]["reduce_bucket_size"] == spec.hidden**2  # the planner's buckets
    assert conf["zero_allow_untested_optimizer"] is True and "scheduler" not in conf
    assert conf["plan"]["activation_checkpointing"] == "full"


def test_builder_needs_no_torch():
    import subprocess
    import sys

    code = ("import sys; from planner.exports.deepspeed_json import config_for_knobs; "
            "assert 'torch' not in sys.modules and 'deepspeed' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_exported_json_is_the_best_trials_config_byte_for_byte(tmp_path):
    db = f"sqlite:///{tmp_path}/x.db"
    wd = tmp_path / "trials"
    plan(["tune", "--model", "tiny", "--gpus", "2", "--seq-len", "32", "--steps", "3", "--backend", "deepspeed",
          "--choices", "sharding=zero1,zero2", "--choices", "precision=fp32", "--choices", "activation_checkpointing=none",
          "--choices", "micro_batch=2", "--no-network-bench", "--no-progress", "--budget", "4m", "--max-trials", "2",
          "--storage", db, "--study", "x", "--workdir", str(wd), "--remeasure-rounds", "0", "--json"], tmp_path,
         timeout=400)
    study = optuna.load_study(study_name="x", storage=db)
    from tuner.report import best_trial

    best = best_trial(study)
    assert best is not None, [t.user_attrs.get("error") for t in study.trials]
    stored = best.user_attrs["deepspeed_config_json"]
    # the file the trainer read is the stored text
    ran = Path(best.user_attrs["workdir"]) / "ds_config.json"
    assert ran.read_text() == stored
    # and `plan export deepspeed --from-study` writes exactly that
    out = tmp_path / "ds.json"
    r = runner.invoke(app, ["export", "deepspeed", "--from-study", "x", "--storage", db, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes() == stored.encode()
    conf = json.loads(stored)
    assert conf["zero_optimization"]["stage"] == {"zero1": 1, "zero2": 2}[best.user_attrs["knobs"]["sharding"]]
    assert config_text(conf) == stored
    rep = json.loads(runner.invoke(app, ["tune", "report", "--study", "x", "--storage", db, "--json"]).output)
    assert rep["deepspeed_config"] == conf and rep["winner"].startswith("deepspeed won")
    assert rep["by_backend"]["deepspeed"].get("ok", 0) >= 1 and rep["no_result"] == []


def test_tune_without_model_or_scenario_names_both_ways(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["tune", "--budget", "2h", "--storage", f"sqlite:///{tmp_path}/s.db"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "--model" in r.output and "--save plan.toml" in r.output


def test_estimate_save_then_tune_in_that_folder(tmp_path):
    plan(["estimate", "--model", "tiny", "--gpus", "2", "--seq-len", "32", "--sharding", "zero1",
          "--save", "plan.toml"], tmp_path)
    text = (tmp_path / "plan.toml").read_text()
    assert "[scenario]" in text and 'model = "tiny"' in text and 'sharding = "zero1"' in text
    r = plan(["tune", "--budget", "2h", "--init-only", "--no-network-bench", "--storage",
              f"sqlite:///{tmp_path}/s.db", "--json"], tmp_path)
    info = json.loads(r.stdout)
    assert info["study"] == "tiny-2xcpu-any"
    study = optuna.load_study(study_name=info["study"], storage=f"sqlite:///{tmp_path}/s.db")
    meta = study.user_attrs["plan_tune"]
    assert meta["space"]["sharding"] == ["zero1"] and meta["seq_len"] == 32 and meta["nproc"] == 2
    assert meta["planner_top_k"] and all(k["sharding"] == "zero1" for k in meta["planner_top_k"])
