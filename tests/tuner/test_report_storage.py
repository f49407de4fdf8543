"""`plan tune report` / `plan export --from-study` where the study is not: a SQLite storage that does not exist
is named (opening it made an empty plan-tune.db in the wrong folder, then said 'studies: none'), and
`--csv` into a folder that does not exist yet is written there (it ended in an OSError traceback)."""

from __future__ import annotations

import csv

from typer.testing import CliRunner

from plan_cli.main import app
from tuner.config import TuneConfig
from tuner.setup import open_study


def run(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def test_a_storage_file_that_does_not_exist_is_named_not_made(tmp_path):
    db = tmp_path / "elsewhere" / "plan-tune.db"
    for args in (["tune", "report", "--study", "s"], ["export", "deepspeed", "--from-study", "s"]):
        r = run(*args, "--storage", f"sqlite:///{db}")
        assert r.exit_code == 2, r.output
        assert f"study: no study 's': {db} does not exist" in " ".join(r.output.split()), r.output
    assert not db.exists() and not db.parent.exists()


def test_report_csv_into_a_new_folder(tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    open_study(TuneConfig(model="tiny", gpus=2, budget_s=60, steps=3, seq_len=32, storage=url, study="r",
                          measure_network=False, progress=False,
                          choices={"sharding": ("none",), "offload": ("none",), "activation_checkpointing": ("none",),
                                   "precision": ("fp32",), "micro_batch": (2,)}))
    out = tmp_path / "new" / "dir" / "trials.csv"
    r = run("tune", "report", "--study", "r", "--storage", url, "--csv", str(out))
    assert r.exit_code == 0, r.output
    assert "trial" in next(csv.reader(out.open()))
