"""A speed without its +-N% says why: the bundled trainer's stack profile is fitted on no measured runs
(catalog/stacks/bundled.toml has no cross-validated error), so its tokens/s has no band and a note says so;
a fitted stack keeps its band and gets no such note."""

import json

from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()
ARGS = ["estimate", "--model", "125m", "--gpus", "8", "--top", "3"]


def test_a_stack_with_no_cross_validated_error_is_named_under_the_table():
    bundled = [*ARGS, "--stack", "bundled"]
    report = json.loads(runner.invoke(app, [*bundled, "--json"]).output)
    fitting = [e for e in report["results"] if e["fits"]]
    assert fitting and all(e["performance"]["expected_error_pct"] is None for e in fitting)
    r = runner.invoke(app, bundled, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "tokens/s no +- on bundled: fitted on no measured runs, its error is unknown" in r.output, r.output
    fsdp = runner.invoke(app, [*ARGS, "--stack", "fsdp"], env={"COLUMNS": "200"})
    assert fsdp.exit_code == 0, fsdp.output
    assert "tokens/s +-: the cross-validated error of the plan's stack profile (fsdp 6%" in fsdp.output
    assert "no +- on" not in fsdp.output
