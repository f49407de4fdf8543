"""What `plan tune` measures on FSDP is what it exports: the trial stores the FSDP settings
built by the shared builder, the trainer runs that file (`--fsdp-config`), and `plan export
fsdp|accelerate --from-study` writes it byte for byte (tiny model, 2 ranks, gloo, 3 steps)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml
from typer.testing import CliRunner

from plan_cli.main import app
from planner.exports.deepspeed_json import config_text
from planner.exports.fsdp_settings import knobs_of, settings_for_knobs
from tune_helpers import plan

runner = CliRunner()


@pytest.mark.slow
def test_exported_fsdp_settings_are_the_best_trials_byte_for_byte(tmp_path):
    db = f"sqlite:///{tmp_path}/x.db"
    wd = tmp_path / "trials"
    plan(["tune", "--model", "tiny", "--gpus", "2", "--seq-len", "32", "--steps", "3", "--backend", "fsdp",
          "--choices", "sharding=fsdp_shard_grad_op", "--choices", "precision=bf16",
          "--choices", "activation_checkpointing=full", "--choices", "offload=none", "--choices", "micro_batch=2",
          "--no-network-bench", "--no-progress", "--budget", "4m", "--max-trials", "1",
          "--storage", db, "--study", "x", "--workdir", str(wd), "--json"], tmp_path, timeout=400)
    study = optuna.load_study(study_name="x", storage=db)
    from tuner.report import best_trial

    best = best_trial(study)
    assert best is not None, [t.user_attrs.get("error") for t in study.trials]
    stored = best.user_attrs["fsdp_config_json"]
    knobs = best.user_attrs["knobs"]
    # the shared builder made it (the trainer builds the same from the same knobs)
    assert stored == config_text(settings_for_knobs(knobs, dp=2, seq_len=32, target="cpu"))
    # the trainer read the stored text, and ran what it says
    workdir = Path(best.user_attrs["workdir"])
    assert (workdir / "fsdp_config.json").read_text() == stored
    result = json.loads((workdir / "result.json").read_text())
    assert result["status"] == "ok" and result["backend"] == "fsdp2"
    ran = knobs_of(json.loads(stored))
    for knob in ("sharding", "precision", "activation_checkpointing", "offload", "micro_batch"):
        assert result["config"][knob] == ran[knob] == knobs[knob]
    # `plan export fsdp --from-study` writes exactly that
    out = tmp_path / "fsdp.json"
    r = runner.invoke(app, ["export", "fsdp", "--from-study", "x", "--storage", db, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes() == stored.encode()
    # and the accelerate export translates it, with the exact settings beside it
    acc = tmp_path / "acc" / "accelerate.yaml"
    r = runner.invoke(app, ["export", "accelerate", "--from-study", "x", "--storage", db, "--out", str(acc), "--json"])
    assert r.exit_code == 0, r.output
    assert (acc.parent / "fsdp_config.json").read_text() == stored
    assert not Path("fsdp_config.json").exists() or Path("fsdp_config.json").read_text() != stored
    conf = yaml.safe_load(acc.read_text())
    assert conf["fsdp_config"]["fsdp_reshard_after_forward"] is False
    assert conf["fsdp_config"]["fsdp_activation_checkpointing"] is True and conf["mixed_precision"] == "bf16"
