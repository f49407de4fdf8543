"""`plan export FORMAT`: thin CLI over the planner's top proposal, one-line errors, exit 2;
and an exported DeepSpeed config run unchanged by the bundled trainer on 2 CPU ranks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from planner import api
from planner.exports.bundle import refusal_of
from planner.scenario import Scenario

runner = CliRunner()


def plan_cli(*args: str):
    return runner.invoke(app, list(args))


def test_deepspeed_from_the_top_proposal(tmp_path):
    out = tmp_path / "ds.json"
    res = plan_cli("export", "deepspeed", "--model", "7b", "--gpus", "16", "--out", str(out))
    assert res.exit_code == 0, res.output
    cfg = json.loads(out.read_text())
    report = api.estimate(Scenario(model="7b", gpus=16), top=500)
    best = next(e.plan for e in report.results if e.fits and refusal_of("deepspeed", e.plan, report.system) is None)
    assert cfg["plan"] == best.model_dump(mode="json")
    assert cfg["train_batch_size"] == best.micro_batch * best.grad_accum * best.dp
    assert cfg["zero_optimization"]["stage"] == {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3}[best.sharding]


def test_pinned_scenario_exports_the_pinned_plan(tmp_path):
    res = plan_cli("export", "deepspeed", "--model", "gpt2-xl", "--gpus", "8", "--sharding", "zero3",
                   "--offload", "optimizer+params", "--precision", "fp16", "--micro-batch", "2",
                   "--grad-accum", "4", "--activation-checkpointing", "full", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    cfg = json.loads(doc["files"][0]["content"])
    assert cfg["train_batch_size"] == 2 * 4 * 8
    zero = cfg["zero_optimization"]
    assert zero["stage"] == 3 and zero["offload_param"]["pin_memory"] is True
    assert cfg["fp16"]["enabled"] and "activation_checkpointing" in cfg


def test_accelerate_writes_the_deepspeed_companion(tmp_path):
    out = tmp_path / "acc.yaml"
    res = plan_cli("export", "accelerate", "--model", "gpt2-xl", "--gpus", "8", "--sharding", "zero2", "--out", str(out))
    assert res.exit_code == 0, res.output
    import yaml

    acc = yaml.safe_load(out.read_text())
    ds_file = acc["deepspeed_config"]["deepspeed_config_file"]
    assert json.loads(open(ds_file).read())["zero_optimization"]["stage"] == 2


def test_slurm_time_from_tokens_and_bash_syntax(tmp_path):
    out = tmp_path / "job.sbatch"
    res = plan_cli("export", "slurm", "--model", "7b", "--gpus", "16", "--cluster", "dgx-h100",
                   "--tokens", "1B", "--partition", "gpu", "--out", str(out))
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "#SBATCH --nodes=2" in text and "#SBATCH --gpus-per-node=8" in text
    assert "#SBATCH --time=" in text and "--steps" in text
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0


def test_slurm_time_beyond_two_days_is_said(tmp_path):
    """1T tokens of 7b on 16 H100 is months in one allocation: the script asked for it without a word (a UX audit
    found --time=206-05:16:00 for 64 GPUs); now a note says partitions cap jobs and how to split. 1B tokens: no note."""
    texts = {}
    for tokens in ("1T", "1B"):
        out = tmp_path / f"job-{tokens}.sbatch"
        res = plan_cli("export", "slurm", "--model", "7b", "--gpus", "16", "--cluster", "dgx-h100",
                       "--tokens", tokens, "--out", str(out))
        assert res.exit_code == 0, res.output
        texts[tokens] = out.read_text()
    days = int(texts["1T"].split("#SBATCH --time=")[1].split("-")[0])
    assert days > 2
    assert "in one allocation: most SLURM partitions cap a job" in texts["1T"]
    assert "export fewer steps per job (--steps) and chain the jobs" in texts["1T"]
    assert "in one allocation" not in texts["1B"]


@pytest.mark.parametrize("args, field", [
    (["export", "yaml"], "format"),
    (["export", "slurm", "--model", "7b", "--gpus", "16"], "time"),
    (["export", "deepspeed", "--sharding", "fsdp_full_shard", "--gpus", "8"], "sharding"),
    (["export", "deepspeed", "--gpus", "8", "--target", "tpu"], "target"),
    (["export", "slurm", "--gpus", "8", "--time", "soon"], "time"),
    (["export", "torchrun", "--gpus", "16", "--tp", "2"], "tp"),
])
def test_errors_are_one_line_exit_2(args, field):
    res = plan_cli(*args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), res.stderr
    assert "Traceback" not in res.output


@pytest.mark.slow
def test_trainer_runs_an_exported_config_unchanged(tmp_path):
    """`plan export deepspeed` for 2 CPU ranks, then the bundled trainer with that file only."""
    ds = tmp_path / "ds.json"
    res = plan_cli("export", "deepspeed", "--model", "tiny", "--gpus", "2", "--sharding", "zero2", "--tp", "1",
                   "--precision", "bf16", "--micro-batch", "2", "--grad-accum", "2", "--target", "cpu",
                   "--steps", "3", "--warmup-steps", "1", "--out", str(ds))
    assert res.exit_code == 0, res.output
    exported = json.loads(ds.read_text())
    assert exported["zero_optimization"].get("overlap_comm") is False
    out = tmp_path / "out.json"
    plan_bin = shutil.which("plan", path=os.path.dirname(sys.executable))
    use_plan_train = plan_bin and subprocess.run([plan_bin, "train", "--help"], capture_output=True).returncode == 0
    launcher = [plan_bin, "train"] if use_plan_train else [sys.executable, "-m", "trainer"]
    cmd = launcher + ["--model", "tiny", "--nproc", "2", "--deepspeed-config", str(ds), "--steps", "3", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=os.environ | {"OMP_NUM_THREADS": "1"})
    result = json.loads(out.read_text())
    assert result["status"] == "ok", (result.get("error"), proc.stderr[-2000:])
    assert result["world_size"] == 2
    assert result["config"]["sharding"] == "zero2" and result["config"]["precision"] == "bf16"
    assert result["config"]["global_batch"] == exported["train_batch_size"] == 8
    assert len(result["losses"]) == 3


def _stored_study(tmp_path, knobs: dict) -> str:
    """A study in a real Optuna SQLite storage holding what `plan tune` stores: its meta and
    a completed trial with the measured knobs (written directly, no trainer run)."""
    import optuna

    from planner.resolve import resolve_system
    from tuner.study_store import META_KEY
    from tuner.storage import open_storage

    url = f"sqlite:///{tmp_path / 'tune.db'}"
    study = optuna.create_study(study_name="s1", storage=open_storage(url), direction="maximize")
    system = resolve_system(Scenario(model="tiny", gpus=2, cluster="dgx-a100"))
    study.set_user_attr(META_KEY, {"model": "tiny", "nproc": 2, "seq_len": 64,
                                   "system": system.model_dump(mode="json")})
    for value, k in ((900.0, dict(knobs, micro_batch=1)), (1500.0, knobs)):
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs={"knobs": k, "status": "ok"}))
    return url


def test_deepspeed_from_a_study_best_trial(tmp_path):
    knobs = {"sharding": "zero3", "offload": "optimizer", "activation_checkpointing": "full",
             "precision": "bf16", "optimizer": "adamw", "micro_batch": 4, "grad_accum": 2}
    url = _stored_study(tmp_path, knobs)
    out = tmp_path / "ds.json"
    res = plan_cli("export", "deepspeed", "--from-study", "s1", "--storage", url, "--target", "cpu", "--out", str(out))
    assert res.exit_code == 0, res.output
    cfg = json.loads(out.read_text())
    assert cfg["train_batch_size"] == 4 * 2 * 2  # the faster trial, dp = the study's 2 ranks
    assert cfg["zero_optimization"]["stage"] == 3
    assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": False}
    res = plan_cli("export", "deepspeed", "--from-study", "nope", "--storage", url)
    assert res.exit_code == 2 and res.stderr.startswith("error: study:")
