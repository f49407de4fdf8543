"""`plan estimate --gpus LO:HI` shows, per GPU count, the global batch it trains with (it changes
with the count: the GPT-3 rule rounds to the count's odd part), the memory column and, with
--price-per-gpu-hour, the cost the `--objective cost` ranks by."""

import json
import re

from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()
ARGS = ["estimate", "--model", "125m", "--gpus", "8:24", "--tokens", "10B"]


def _rows(output: str) -> dict[int, list[str]]:
    return {int(cells[0]): cells for line in output.splitlines()
            if (cells := [c.strip() for c in line.strip("│ ").split("│")]) and cells[0].isdigit()}


def test_sweep_table_shows_batch_memory_and_cost_like_the_json():
    r = runner.invoke(app, [*ARGS, "--price-per-gpu-hour", "2", "--objective", "cost"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    header = next(line for line in r.output.splitlines() if "GPUs" in line)
    for col in ("batch", "GiB/GPU", "cost", "days"):
        assert col in header, header
    cols = [c.strip() for c in header.strip("┃ ").split("┃")]
    data = {row["gpus"]: row for row in json.loads(runner.invoke(app, [*ARGS, "--price-per-gpu-hour", "2", "--json"]).output)}
    rows = _rows(r.output)
    assert sorted(rows) == [8, 16, 24]
    for gpus, cells in rows.items():
        cell = dict(zip(cols, cells))
        assert int(cell["batch"]) == data[gpus]["global_batch"]
        assert float(cell["cost"].replace(",", "")) == round(data[gpus]["cost"])
        assert re.fullmatch(r"\d+\.\d/80\*?", cell["GiB/GPU"]), cell["GiB/GPU"]


def test_sweep_without_a_price_has_no_cost_column():
    r = runner.invoke(app, ARGS, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    header = next(line for line in r.output.splitlines() if "GPUs" in line)
    assert "batch" in header and "cost" not in header


def test_explain_prints_large_speeds_and_gpu_hours_as_whole_numbers():
    args = ["estimate", "--model", "125m", "--gpus", "16", "--tokens", "100B", "--explain"]
    r = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    perf = json.loads(runner.invoke(app, [*args, "--json"]).output)["estimate"]["performance"]
    line = next(ln for ln in r.output.splitlines() if "│ tokens_per_s " in ln)
    assert f"{perf['tokens_per_s']:,.0f}" in line and "e+" not in line, line
