"""`plan export accelerate --out X.yaml` names X.yaml in its launch comment (it named accelerate.yaml whatever
--out said), and `plan export torchrun` over several nodes sets MASTER_PORT by the sbatch export's formula
(planner/rendezvous.py) instead of leaving it unset (`set -u` stopped the script: MASTER_PORT unbound)."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess

from typer.testing import CliRunner

from plan_cli.main import app
from planner.rendezvous import TORCH_DEFAULT_PORT, slurm_port

runner = CliRunner()


def test_accelerate_comment_names_the_file_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # without --out the companion ds_config.json goes to the current folder
    out = tmp_path / "run configs" / "my-run.yaml"
    res = runner.invoke(app, ["export", "accelerate", "--model", "7b", "--gpus", "16", "--out", str(out)])
    assert res.exit_code == 0, res.output
    launch = next(line for line in out.read_text().splitlines() if "accelerate launch" in line)
    words = shlex.split(launch.lstrip("# "))
    assert words[words.index("--config_file") + 1] == str(out), launch
    assert "accelerate.yaml" not in out.read_text()
    stdout = runner.invoke(app, ["export", "accelerate", "--model", "7b", "--gpus", "16"])
    assert "--config_file accelerate.yaml" in stdout.output  # no --out: the usual name


def _run_script(script, tmp_path, env_extra):
    """Run the exported script with a `torchrun` on PATH that prints its rendezvous words (the script is the
    thing under test; torchrun itself needs GPUs and peers)."""
    fake = tmp_path / "bin" / "torchrun"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text('#!/bin/bash\nwhile [ $# -gt 0 ]; do case "$1" in --rdzv-endpoint|--rdzv-id) echo "$1=$2";; esac; '
                    'shift; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "RDZV_"))}
    env.update(PATH=f"{fake.parent}:{env['PATH']}", **env_extra)
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)


def test_torchrun_script_derives_master_port_like_sbatch(tmp_path):
    script = tmp_path / "torchrun.sh"
    res = runner.invoke(app, ["export", "torchrun", "--model", "7b", "--gpus", "16", "--sharding", "zero3",
                              "--out", str(script)])
    assert res.exit_code == 0, res.output
    slurm = _run_script(script, tmp_path, {"MASTER_ADDR": "node1", "SLURM_JOB_ID": "123457"})
    assert slurm.returncode == 0, slurm.stderr
    assert f"--rdzv-endpoint=node1:{slurm_port(123457, 0)}" in slurm.stdout.splitlines()
    assert "--rdzv-id=123457" in slurm.stdout.splitlines()
    plain = _run_script(script, tmp_path, {"MASTER_ADDR": "node1"})
    assert plain.returncode == 0, plain.stderr
    assert f"--rdzv-endpoint=node1:{TORCH_DEFAULT_PORT}" in plain.stdout.splitlines()
    kept = _run_script(script, tmp_path, {"MASTER_ADDR": "node1", "SLURM_JOB_ID": "7", "MASTER_PORT": "40001"})
    assert "--rdzv-endpoint=node1:40001" in kept.stdout.splitlines()
    missing = _run_script(script, tmp_path, {})
    assert missing.returncode != 0 and "export MASTER_ADDR" in missing.stderr


def test_one_node_torchrun_script_needs_no_rendezvous(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the companion ds_config.json goes to the current folder
    res = runner.invoke(app, ["export", "torchrun", "--model", "7b", "--gpus", "8", "--sharding", "zero3"])
    assert res.exit_code == 0, res.output
    assert "--standalone" in res.output and "MASTER_PORT" not in res.output
