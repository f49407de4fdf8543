"""`plan validate` / `plan calibrate` inputs validation/runs_fuzz.py found ending in a traceback: each is now
one `error:` line naming the field, exit code 2."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from tests.planner.test_run_spellings import BASE, COLUMNS

runner = CliRunner()


def error_line(args: list[str]) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        res = runner.invoke(app, args, env={"COLUMNS": "400"})
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (res.exit_code, res.stderr)
    return lines[0]


def _runs(tmp_path, **cells):
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerow({**BASE, **cells})
    return path


@pytest.mark.parametrize("column", ["gpus_per_node", "n_gpus", "micro_batch"])
def test_validate_an_overflowing_cell(tmp_path, column):
    """'1e400' was an OverflowError traceback (int(inf)) out of `plan validate`."""
    line = error_line(["validate", str(_runs(tmp_path, **{column: "1e400"})), "--json"])
    assert line.startswith(f"error: {column}: row probe_001: '1e400' is not a finite number"), line


@pytest.mark.parametrize("where", ["folder", "file on the way", "proc"])
def test_calibrate_out_that_cannot_be_written(tmp_path, where):
    """--out an existing folder was an IsADirectoryError, a file named `stacks` a FileExistsError (after the fit)."""
    out = tmp_path / "cal" / "stacks" / "megatron.toml"
    if where == "folder":
        out.mkdir(parents=True)
    elif where == "file on the way":
        out.parent.parent.mkdir()
        out.parent.write_text("a file, not a folder\n")
    else:
        out = Path("/proc/plan-test/stacks/megatron.toml")  # no folder can be made under /proc
    line = error_line(["calibrate", str(_runs(tmp_path)), "--stack", "megatron", "--out", str(out)])
    assert line.startswith("error: out: "), line
