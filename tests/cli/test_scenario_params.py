"""`plan estimate --scenarios` (CSV and JSONL), `--csv` and a sweep's --csv/--json carry the model's total and
active parameter counts, as `--json` does (n_params / active_params): a user comparing an MoE with a dense model
row by row had no parameter column."""

import csv
import io
import json
from pathlib import Path

from typer.testing import CliRunner

from plan_cli.main import app
from planner import moe
from planner.presets import resolve_model

runner = CliRunner()


def _counts(model: str) -> tuple[int, int]:
    spec = resolve_model(model)
    return spec.n_params, (moe.active_params(spec) if spec.moe_experts else spec.n_params)


def test_scenarios_csv_and_jsonl_have_parameter_columns(tmp_path: Path):
    src = tmp_path / "in.csv"
    src.write_text("id,model,gpus,seq_len\nm,mixtral-8x7b,64,4096\nd,7b,16,\n")
    out = tmp_path / "out.csv"
    r = runner.invoke(app, ["estimate", "--scenarios", str(src), "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = {row["id"]: row for row in csv.DictReader(out.open())}
    for rid, model in (("m", "mixtral-8x7b"), ("d", "7b")):
        total, active = _counts(model)
        assert (int(rows[rid]["n_params"]), int(rows[rid]["active_params"])) == (total, active), rows[rid]
    assert int(rows["m"]["active_params"]) < int(rows["m"]["n_params"]) / 3  # 12.9B of 46.7B
    jl = tmp_path / "in.jsonl"
    jl.write_text(json.dumps({"model": "mixtral-8x7b", "gpus": 64, "seq_len": 4096}) + "\n")
    out2 = tmp_path / "out.jsonl"
    r = runner.invoke(app, ["estimate", "--scenarios", str(jl), "--out", str(out2)])
    assert r.exit_code == 0, r.output
    line = json.loads(out2.read_text().splitlines()[0])
    assert (line["n_params"], line["active_params"]) == _counts("mixtral-8x7b")


def test_estimate_csv_and_sweep_have_parameter_columns():
    r = runner.invoke(app, ["estimate", "--model", "mixtral-8x7b", "--gpus", "64", "--seq-len", "4096",
                            "--top", "2", "--csv"])
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.output)))
    assert [(int(x["n_params"]), int(x["active_params"])) for x in rows] == [_counts("mixtral-8x7b")] * 2
    r = runner.invoke(app, ["estimate", "--model", "7b", "--gpus", "8:16", "--json"])
    assert r.exit_code == 0, r.output
    points = json.loads(r.output)
    assert [(p["n_params"], p["active_params"]) for p in points] == [_counts("7b")] * 2
