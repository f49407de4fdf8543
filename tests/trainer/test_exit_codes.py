"""One exit-code table (trainer/result.py) for `python -m trainer`, `plan train` and the tuner
(tests/tuner/test_tuner_units.py: exit 2 with a usage error is bad_config)."""

import os
import subprocess
import sys
from pathlib import Path

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

