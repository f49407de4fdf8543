"""One exit-code table (trainer/result.py) for `python -m trainer`, `plan train` and the tuner
(tests/tuner/test_tuner_units.py: exit 2 with a usage error is bad_config)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from trainer.result import EXIT_CODES, Status

REPO = Path(__file__).resolve().parents[2]


def test_every_status_has_one_distinct_code():
    assert set(EXIT_CODES) == set(Status.__args__)
    assert len(set(EXIT_CODES.values())) == len(EXIT_CODES) and EXIT_CODES["ok"] == 0


def test_trainer_and_plan_train_exit_with_the_table_code(tmp_path):
    bad = ["--model", "tiny", "--nproc", "1", "--offload", "optimizer"]  # offload without sharding
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "trainer", *bad, "--json", str(tmp_path / "r.json")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == EXIT_CODES["bad_config"], p.stderr[-2000:]
    assert "offload" in p.stderr
    res = CliRunner().invoke(app, ["train", *bad])
    assert res.exit_code == EXIT_CODES["bad_config"] and "offload" in res.output



@pytest.mark.slow
def test_torchrun_ranks_exit_with_the_table_code_and_rank_0_writes_the_result(tmp_path):
    """Ranks torchrun (or srun) started fail inside the run: a --data file too short to train on, found by the
    ranks. They exited 1 (a crash) and no result file was written, only the per-rank error files."""
    data = tmp_path / "one_byte.txt"
    data.write_text("x")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "-m", "trainer", "--model", "tiny", "--steps", "3", "--warmup-steps", "1", "--seq-len", "32",
                        "--data", str(data), "--json", str(out)],
                       env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode != 0, p.stderr[-2000:]
    assert f"exitcode  : {EXIT_CODES['bad_config']}" in p.stderr, p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["status"] == "bad_config" and "too short to train on" in r["error"] and r["world_size"] == 2
