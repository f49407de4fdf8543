"""`plan estimate --gpus LO:HI` shows, per GPU count, the global batch it trains with (it changes
with the count: the GPT-3 rule rounds to the count's odd part), the memory column and, with
--price-per-gpu-hour, the cost the `--objective cost` ranks by."""

import json
import re

from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()
ARGS = ["estimate", "--model", "125m", "--gpus", "8:24", "--tokens", "10B"]


def _cells(line: str) -> list[str]:
    """A line of the table: cells are two or more spaces apart (one space is inside a cell: '2 x 128', 'net %')."""
    return re.split(r"\s{2,}", line.strip())


def _header(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("GPUs"))


def _rows(output: str) -> dict[int, list[str]]:
    lines = output.splitlines()
    body = lines[lines.index(_header(output)) + 1:]
    return {int(cells[0]): cells for line in body if (cells := _cells(line)) and cells[0].isdigit()}


def test_sweep_table_shows_batch_memory_and_cost_like_the_json():
    r = runner.invoke(app, [*ARGS, "--price-per-gpu-hour", "2", "--objective", "cost"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    header = _header(r.output)
    for col in ("batch", "GiB/GPU", "cost", "days"):
        assert col in header, header
    cols = _cells(header)
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


def test_sweep_shows_what_the_network_costs_each_count_and_cuts_no_cell_at_80_columns():
    args = ["estimate", "--model", "13b", "--gpus", "8:24:8", "--internode-gbps", "100", "--tokens", "1T",
            "--price-per-gpu-hour", "2"]
    r = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "…" not in r.output
    assert _cells(_header(r.output))[-1] == "net %"
    data = {row["gpus"]: row for row in json.loads(runner.invoke(app, [*args, "--json"]).output)}
    shares = {g: cells[-1] for g, cells in _rows(r.output).items()}
    assert shares == {g: f"{data[g]['network_share']:.0%}" for g in (8, 16, 24)}
    assert data[8]["network_share"] == 0 < data[16]["network_share"] < data[24]["network_share"]


def test_within_days_names_the_fewest_gpus_that_meet_it_like_the_json():
    args = ["estimate", "--model", "13b", "--gpus", "64:256:64", "--tokens", "1T", "--within-days", "30"]
    rows = json.loads(runner.invoke(app, [*args, "--json"]).output)
    meets = [r["gpus"] for r in rows if r["days"] <= 30]
    chosen = [r["gpus"] for r in rows if r["fewest_within_days"]]
    assert chosen == [min(meets)] and min(meets) > 64  # 64 GPUs take longer than 30 days
    r = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.output.splitlines() if ln.startswith("Fewest GPUs"))
    best = next(x for x in rows if x["fewest_within_days"])
    assert line.startswith(f"Fewest GPUs that train 1T tokens within 30 days: {best['gpus']} ({best['days']:.1f} days")


def test_within_days_that_no_count_meets_names_the_fastest():
    r = runner.invoke(app, ["estimate", "--model", "13b", "--gpus", "64:128:64", "--tokens", "1T", "--within-days", "3"],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "No GPU count of the sweep trains 1T tokens within 3 days; the fastest, 128 GPUs, takes" in r.output


def test_within_days_needs_tokens_and_a_sweep():
    for extra, said in ((["--gpus", "64:128"], "add --tokens"), (["--gpus", "64", "--tokens", "1T"], "--gpus LO:HI")):
        r = runner.invoke(app, ["estimate", "--model", "13b", "--within-days", "3", *extra])
        assert r.exit_code == 2 and "within_days" in r.output and said in r.output, r.output


def test_within_one_day_is_singular():
    r = runner.invoke(app, ["estimate", "--model", "7b", "--gpus", "8:64", "--tokens", "1e10", "--within-days", "1"],
                      env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "within 1 day:" in r.output or "within 1 day;" in r.output, r.output


def test_sweep_speeds_carry_their_stack_error_and_the_memory_marks_are_explained():
    """Every printed speed carries its expected error: the sweep's tokens/s as the ranked table's (+-N%, the
    plan's stack profile), and its `*` (a plan within the memory model's error of capacity) is explained."""
    args = ["estimate", "--model", "7b", "--gpus", "8:16", "--gpu", "a100-40gb"]
    data = {row["gpus"]: row for row in json.loads(runner.invoke(app, [*args, "--json"]).output)}
    r = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    cols = _cells(_header(r.output))
    for gpus, cells in _rows(r.output).items():
        cell = dict(zip(cols, cells))
        row = data[gpus]
        assert cell["tokens/s"] == f"{row['tokens_per_s']:,.0f} +-{row['expected_error_pct']:.0f}%", cell
    assert any(row["mem_tight"] for row in data.values())  # the 16-GPU plan is tight: its `*` needs the note
    assert "* tight: within the memory model's error" in r.output, r.output
    assert "tokens/s +-: the cross-validated error of the plan's stack profile (megatron 7%" in r.output, r.output


def test_wide_over_a_sweep_is_one_line_exit_2_not_ignored():
    r = runner.invoke(app, ["estimate", "--model", "125m", "--gpus", "8:16", "--wide"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: wide:") and "--json or --csv" in lines[0], r.output
