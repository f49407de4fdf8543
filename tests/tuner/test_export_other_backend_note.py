"""`plan export deepspeed --from-study` of a study whose winner ran under DDP (sharding none in a `--backend any`
study) wrote a DeepSpeed JSON without a word: a file never measured as such, read as the tuned one. Now a note says
the winner ran without DeepSpeed; a DeepSpeed winner's export still says it is the trial's own config."""

from __future__ import annotations

import optuna
from typer.testing import CliRunner

from plan_cli.main import app
from planner.resolve import resolve_system
from planner.scenario import Scenario
from tuner.storage import open_storage
from tuner.study_store import StudyMeta

runner = CliRunner()
DDP = {"sharding": "none", "offload": "none", "activation_checkpointing": "none", "precision": "bf16",
       "micro_batch": 2, "grad_accum": 2}


def test_a_ddp_winner_exported_as_deepspeed_says_so(tmp_path):
    url = f"sqlite:///{tmp_path / 'tune.db'}"
    meta = StudyMeta(model="tiny", nproc=2, seq_len=64, space={"sharding": ["none", "zero1"]},
                     system=resolve_system(Scenario(model="tiny", gpus=2, cluster="dgx-a100")))
    study = optuna.create_study(study_name="s", storage=open_storage(url), direction="maximize")
    meta.save(study)
    study.add_trial(optuna.trial.create_trial(value=900.0, user_attrs={"knobs": DDP, "status": "ok",
                                                                       "config_key": "d"}))
    res = runner.invoke(app, ["export", "deepspeed", "--from-study", "s", "--storage", url,
                              "--out", str(tmp_path / "ds.json")])
    assert res.exit_code == 0, res.output
    assert "the winner ran without DeepSpeed" in res.output and "not measured as such" in res.output, res.output
