"""`plan validate` on a file with rows it cannot express: each such row is 'not predicted' with its field
and reason, the others are scored, and the command does not fail."""

import csv
import json

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from tests.planner.test_run_spellings import BASE, COLUMNS

runner = CliRunner()

# invented rows (no measurements of anyone's): id suffix -> cells that differ from BASE, and the field
# named in the 'not predicted' reason (None: the row is predicted)
ODD = {
    "good": ({}, None),
    "jax": (dict(framework="MaxText (JAX)"), None),  # generic stack, noted
    "nodivide": (dict(tp="8", pp="3", dp=""), None),  # predicted, not scored: 8 x 3 does not divide 64
    "tpu": (dict(gpu_type="TPU v4"), "gpu_type"),
    "h20": (dict(gpu_type="H20"), "gpu_type"),
    "negative": (dict(micro_batch="-2"), "micro_batch"),
    "zero_tp": (dict(tp="0"), "tp"),
    "text": (dict(n_gpus="sixty-four"), "n_gpus"),
    "blank_gpus": (dict(n_gpus="", dp=""), "n_gpus"),
    "ckpt": (dict(activation_checkpointing="sometimes"), "activation_checkpointing"),
    "huge_tp": (dict(tp="4096", dp=""), "tp"),
    "noshape": (dict(n_layers="", hidden="", n_heads="", n_params_B=""), "model"),
    "moe": (dict(ep="8"), "ep"),
}


@pytest.fixture
def odd_csv(tmp_path):
    path = tmp_path / "odd.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS + ["ep"])
        w.writeheader()
        for name, (cells, _) in ODD.items():
            w.writerow({**BASE, "ep": "", **cells, "id": f"odd_{name}"})
    return path


def test_odd_rows_are_not_predicted_and_the_rest_scored(odd_csv):
    r = runner.invoke(app, ["validate", str(odd_csv), "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    missing = {m["id"]: m["field"] for m in rep["not_predicted"]}
    assert missing == {f"odd_{n}": field for n, (_, field) in ODD.items() if field}
    predicted = {p["id"] for p in rep["runs"]}
    assert predicted == {f"odd_{n}" for n, (_, field) in ODD.items() if not field}
    scored = {p["id"] for p in rep["runs"] if p["error"] is not None}
    assert scored == {"odd_good", "odd_jax"} and rep["inconsistent_rows"] == 1


def test_text_output_names_each_row_and_reason(odd_csv):
    r = runner.invoke(app, ["validate", str(odd_csv)])
    assert r.exit_code == 0, r.output
    assert "not predicted: odd_tpu: gpu_type: TPU v4 (no model of this accelerator) is not a GPU the planner models" in r.output
    assert "not predicted: odd_negative: micro_batch: '-2' must be > 0" in r.output
    assert f"{len(ODD)} runs, 3 predicted (10 not predicted)" in r.output


def test_calibrate_stays_strict(odd_csv, tmp_path):
    r = runner.invoke(app, ["calibrate", str(odd_csv), "--stack", "megatron", "--out",
                            str(tmp_path / "stacks" / "megatron.toml")])
    assert r.exit_code == 2 and "gpu_type" in r.output


def test_a_file_with_no_predictable_row_is_an_error(tmp_path):
    path = tmp_path / "tpu.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerow({**BASE, "gpu_type": "TPU v5p"})
    r = runner.invoke(app, ["validate", str(path)])
    assert r.exit_code == 2 and "gpu_type" in r.output and "no row" in r.output


def test_summary_counts_read_as_words(odd_csv):
    """'1 row not scored' (was '1 rows'), and the per-source column of rows scored on speed is named so
    (was 'speed', which read as a speed)."""
    r = runner.invoke(app, ["validate", str(odd_csv)], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "; 1 row not scored: layout contradicts the GPU count" in r.output and "1 rows" not in r.output
    header = next(line for line in r.output.splitlines() if line.startswith("source "))
    assert header.split()[1:4] == ["runs", "scored", "MAPE"], header


@pytest.fixture
def twice_csv(tmp_path):
    """An invented row pasted twice (lines 2 and 4), another once."""
    path = tmp_path / "twice.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for rid, mb in (("run_a", "1"), ("run_b", "2"), ("run_a", "1")):
            w.writerow({**BASE, "id": rid, "micro_batch": mb})
    return path


def test_validate_names_an_id_on_two_rows(twice_csv):
    """Both rows are scored (as written), with a note naming the id and its lines: it was scored twice with no
    word, weighing double in every average."""
    r = runner.invoke(app, ["validate", str(twice_csv)])
    assert r.exit_code == 0, r.output
    assert f"note: id run_a on lines 2 and 4 of {twice_csv}: each row is scored" in r.output
    js = runner.invoke(app, ["validate", str(twice_csv), "--json"])
    assert js.exit_code == 0
    rep = json.loads(js.stdout)
    assert rep["repeated_ids"] == {"run_a": [2, 4]} and len(rep["runs"]) == 3


def test_calibrate_refuses_an_id_on_two_rows(twice_csv, tmp_path):
    """A fit weighs a pasted-twice row double: refused, one line naming the id and its lines (calibrate is strict)."""
    out = tmp_path / "stacks" / "megatron.toml"
    r = runner.invoke(app, ["calibrate", str(twice_csv), "--stack", "megatron", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "id run_a on lines 2 and 4" in r.output and "weigh that run twice" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not out.exists()


def test_no_note_without_repeated_ids(odd_csv):
    r = runner.invoke(app, ["validate", str(odd_csv)])
    assert "note: id" not in r.output
