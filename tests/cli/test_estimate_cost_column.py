"""`plan estimate --price-per-gpu-hour P --tokens N` showed days but no cost in its table (only --wide had it, the
sweep table had it); with a price and no --tokens it said nothing about the missing cost."""

import json

from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()
ARGS = ["estimate", "--model", "7b", "--gpus", "64", "--top", "3", "--price-per-gpu-hour", "2"]


def test_priced_run_shows_its_cost_in_the_table():
    r = runner.invoke(app, [*ARGS, "--tokens", "100B"], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    header = next(x for x in lines if x.lstrip().startswith("#  layout"))
    assert header.split()[-2:] == ["days", "cost"], header
    first = next(x for x in lines if x.lstrip().startswith("1 "))
    data = json.loads(runner.invoke(app, [*ARGS, "--tokens", "100B", "--json"]).output)
    assert first.split()[-1] == f"{data['results'][0]['performance']['cost']:,.0f}", first
    assert max(len(x) for x in lines[:lines.index(first) + 1]) <= 100


def test_price_without_tokens_says_why_there_is_no_cost():
    r = runner.invoke(app, ARGS, env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    assert "cost: --price-per-gpu-hour prices a run once --tokens says what to train" in r.output
    assert "cost" not in next(x for x in r.output.splitlines() if x.lstrip().startswith("#  layout"))
