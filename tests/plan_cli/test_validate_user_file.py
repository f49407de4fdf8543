"""`plan validate` / `plan calibrate` on a small file a user wrote by hand (invented rows, nobody's
measurements): every row left out says why, an error names the column the file has."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from plan_cli.main import app

HEAD = "id,source,model_name,gpu_type,n_gpus,framework,tp,pp,dp,sharding,micro_batch,seq_len,global_batch,measured_tflops_per_gpu,outcome\n"
ROWS = {
    "good": "mine,7b,A100-80GB,8,hf,1,1,8,zero3,2,2048,16,150,ok",
    "maybe": "mine,7b,A100-80GB,16,hf,1,1,16,zero3,2,2048,32,140,maybe",
    "typo": "mine,7b,A100-80GB,16,hf,1,1,16,zero3,2,2048,32,99999,ok",
    "layout": "mine,7b,A100-80GB,16,hf,4,8,1,zero1,2,2048,32,140,ok",
    "nospeed": "mine,7b,A100-80GB,16,hf,1,1,16,zero3,2,2048,32,,ok",
    "zero9": "mine,7b,A100-80GB,16,hf,1,1,16,zero9,2,2048,32,140,ok",
}


def run(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


@pytest.fixture
def runs_csv(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(HEAD + "".join(f"{k},{v}\n" for k, v in ROWS.items()))
    return path


def test_rows_says_why_each_run_that_ran_is_not_scored(runs_csv):
    """The summary says '1 row not scored ... (--rows says which)': --rows now says which and why (it showed
    'ok/fits' with a blank error, the reason only in --json's assumptions)."""
    r = run("validate", str(runs_csv), "--rows")
    assert r.exit_code == 0, r.output
    line = {ln.split()[0]: ln for ln in r.output.splitlines() if ln.split() and ln.split()[0] in ROWS}
    assert "not scored" not in line["good"]
    assert line["maybe"].endswith("not scored: outcome 'maybe': neither ok nor OOM")
    assert "not scored: measured " in line["typo"] and "above the GPU's dense bf16 peak" in line["typo"]
    assert line["layout"].endswith("not scored: tp 4 x pp 8 x cp 1 x dp 1 = 32 GPUs, the row says 16")
    assert "not scored: no measured speed (measured_iter_time_s" in line["nospeed"]


def test_not_scored_is_in_the_json_too(runs_csv):
    import json

    r = run("validate", str(runs_csv), "--json")
    runs = {p["id"]: p for p in json.loads(r.output)["runs"]}
    assert runs["good"]["not_scored"] is None and runs["maybe"]["not_scored"].startswith("outcome 'maybe'")


def test_a_bad_sharding_cell_names_the_files_column(runs_csv):
    r = run("validate", str(runs_csv))
    assert "not predicted: zero9: sharding: 'zero9' is not a sharding" in r.output, r.output  # was zero_stage_or_fsdp


def test_calibrate_says_what_the_rows_lack(tmp_path):
    no_layout = tmp_path / "a.csv"
    no_layout.write_text("id,source,model_name,gpu_type,n_gpus,framework,sharding,micro_batch,seq_len,measured_tflops_per_gpu\n"
                         "r1,mine,7b,A100-80GB,8,hf,zero3,2,2048,150\nr2,mine,7b,A100-80GB,16,hf,zero3,2,2048,140\n")
    r = run("calibrate", str(no_layout), "--stack", "hf", "--out", str(tmp_path / "c" / "stacks" / "hf.toml"))
    words = " ".join(r.output.split())
    assert r.exit_code == 2 and "2 rows read; 2 state no parallel layout (columns tp and pp, or dp; e.g. r1)" in words, words
    no_speed = tmp_path / "b.csv"
    no_speed.write_text(HEAD + f"nospeed,{ROWS['nospeed']}\n")
    r = run("calibrate", str(no_speed), "--stack", "hf", "--out", str(tmp_path / "c" / "stacks" / "hf.toml"))
    words = " ".join(r.output.split())
    assert r.exit_code == 2 and "1 have no speed to fit (e.g. nospeed: no measured speed" in words, words
    assert not (tmp_path / "c").exists()
