""""100B", "4M", "2h": parsed once, by the model field (planner/units.py), on every face."""

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from plan_cli.main import app
from planner.scenario import ExecutionPlan, Scenario
from planner.units import parse_duration_s
from trainer.config import TrainConfig
from tuner.config import TuneConfig


def test_counts_and_durations_parse_on_the_model():
    s = Scenario(tokens="1.5T", global_batch_tokens="4M")
    assert s.tokens == 1.5e12 and s.global_batch_tokens == 4_000_000
    assert Scenario(tokens=3e9).tokens == 3e9  # numbers pass as they are
    assert ExecutionPlan(reduce_bucket_elems="200M").reduce_bucket_elems == 200_000_000
    assert TrainConfig(timeout_s="1h30m").run.timeout_s == 5400
    assert TuneConfig(model="tiny", budget_s="90m").budget_s == 5400


@pytest.mark.parametrize("field,value,allowed", [
    ("tokens", "10X", "100B"), ("global_batch_tokens", "4 megabytes", "4M"), ("tokens", "0", "greater than 0")])
def test_bad_quantity_names_the_field_and_what_is_allowed(field, value, allowed):
    with pytest.raises(ValidationError) as e:
        Scenario(**{field: value})
    err = e.value.errors()[0]
    assert err["loc"] == (field,) and allowed in err["msg"]


def test_bad_duration_names_the_field():
    with pytest.raises(ValidationError) as e:
        TrainConfig(timeout_s="1 30m")
    assert e.value.errors()[0]["loc"][-1] == "timeout_s" and "2h, 90m" in e.value.errors()[0]["msg"]
    with pytest.raises(Exception, match="max_tune_budget"):
        parse_duration_s("max_tune_budget", "soon")


def test_cli_bad_count_is_one_line_exit_2():
    r = CliRunner().invoke(app, ["estimate", "--model", "tiny", "--gpus", "1", "--tokens", "10X"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: tokens: '10X' is not a count"), r.output
