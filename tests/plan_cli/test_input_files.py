"""Files a user hands the CLI as a spreadsheet writes them: `plan estimate --scenarios` reads a CSV as
`plan validate` reads a runs file (Excel's byte-order mark, ';' separators, blanks around cells); a
file that is not UTF-8 text, a header with no rows, a misspelt column are one line naming the file
and what to do, exit 2, never a traceback. The real `plan` CLI in a subprocess."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def plan(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "plan_cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize("raw", [
    b"\xef\xbb\xbfid,model,gpus\na,7b,8\n",  # Excel "CSV UTF-8": a byte-order mark before the header
    b"id;model;gpus\na;7b;8\n",  # Excel where the decimal mark is a comma
    b"id, model, gpus\r\na, 7b, 8\r\n",  # blanks after the commas, CRLF lines
])
def test_scenarios_csv_as_spreadsheets_write_it(tmp_path, raw):
    (tmp_path / "s.csv").write_bytes(raw)
    r = plan("estimate", "--scenarios", "s.csv", "--out", "out.csv", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (row,) = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert row["id"] == "a" and row["gpus"] == "8" and row["error"] == "" and row["fits"] == "True", row


def test_scenarios_misspelt_column_says_which_was_meant(tmp_path):
    (tmp_path / "s.csv").write_text("id,modle,gpus\na,7b,8\n")
    line = one_line_error(plan("estimate", "--scenarios", "s.csv", "--out", "o.csv", cwd=tmp_path))
    assert "unknown column(s) 'modle' (did you mean model?)" in line, line


@pytest.mark.parametrize("args", [
    ("estimate", "--scenarios", "in.csv", "--out", "o.csv"),
    ("validate", "in.csv"),
    ("calibrate", "in.csv", "--stack", "hf", "--out", "cat/stacks/hf.toml"),
])
def test_a_file_that_is_not_utf8_is_one_line(tmp_path, args):
    (tmp_path / "in.csv").write_bytes(b"id,n_gpus,gpu_type,model,gpus\nr1,8,A100,caf\xe9,8\n")  # Latin-1
    line = one_line_error(plan(*args, cwd=tmp_path))
    assert "in.csv is not UTF-8 text (byte 43)" in line, line


def test_tune_scenario_toml_not_utf8_is_one_line(tmp_path):
    from plan_cli.scenario_file import load_scenario
    from planner.errors import PlanError

    path = tmp_path / "plan.toml"
    path.write_bytes(b"[scenario]\nmodel = \"caf\xe9\"\n")
    with pytest.raises(PlanError, match=r"plan.toml is not UTF-8 text \(byte 23\)"):
        load_scenario(path)


def test_runs_file_with_a_header_and_no_rows(tmp_path):
    (tmp_path / "runs.csv").write_text("id,n_gpus,gpu_type,measured_iter_time_s\n")
    line = one_line_error(plan("validate", "runs.csv", cwd=tmp_path))
    assert "runs.csv has a header but no runs" in line and "missing" not in line, line


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_an_empty_runs_file_says_it_is_empty(tmp_path, text):
    """It said "has no columns id, n_gpus, gpu_type" of a file with nothing in it."""
    (tmp_path / "runs.csv").write_text(text)
    for cmd in (("validate", "runs.csv"), ("calibrate", "runs.csv", "--stack", "hf", "--out", "c/stacks/hf.toml")):
        line = one_line_error(plan(*cmd, cwd=tmp_path))
        assert "runs.csv is empty" in line and "no columns" not in line, line


def test_runs_file_missing_a_column_names_only_that_one(tmp_path):
    (tmp_path / "runs.csv").write_text("id,n_gpus,measured_iter_time_s\nr1,8,1.0\n")
    line = one_line_error(plan("validate", "runs.csv", cwd=tmp_path))
    assert "runs.csv has no columns gpu_type (" in line, line


def test_calibration_file_of_another_kind_names_the_field(tmp_path):
    """It said only "1 validation error for Calibration" (pydantic's first line)."""
    (tmp_path / "cal.json").write_text('{"hidden_size": 4096}')
    line = one_line_error(plan("estimate", "--model", "7b", "--gpus", "8", "--calibration", "cal.json", cwd=tmp_path))
    assert "cal.json is not a calibration JSON (`plan tune --calibration-out` writes one" in line, line
    assert line.endswith("hidden_size: Extra inputs are not permitted"), line


def test_a_scenarios_file_whose_every_row_fails_exits_2(tmp_path):
    """Every row an error (a typo'd model, a count that is no count, a sharding as people write it) exited 0 after
    '3 rows written (3 with an error)': a script went on as if the batch had run. The rows are still written; a
    closed choice's cell suggests what was meant."""
    from typer.testing import CliRunner

    from plan_cli.main import app

    src, out = tmp_path / "s.csv", tmp_path / "o.csv"
    src.write_text("id,model,gpus,sharding\na,7b,abc,\nb,7x,8,\nc,7b,8,ZeRO-3\n")
    r = CliRunner().invoke(app, ["estimate", "--scenarios", str(src), "--out", str(out)], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert "error: scenarios: every row of" in r.output and "see the error column of" in r.output
    assert "unknown value 'ZeRO-3'; did you mean zero3" in out.read_text()
    src.write_text("id,model,gpus\na,7b,8\nb,7x,8\n")
    r = CliRunner().invoke(app, ["estimate", "--scenarios", str(src), "--out", str(out)])
    assert r.exit_code == 0 and "2 rows written" in r.output and "(1 with an error)" in r.output
