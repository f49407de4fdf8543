"""`plan train` errors name the option the user typed (steps), not the config's nested path (run.steps)."""

import pytest
from typer.testing import CliRunner

from plan_cli.main import app


@pytest.mark.parametrize("flags,name", [
    (["--steps", "-1"], "steps"),
    (["--micro-batch", "0"], "micro_batch"),
    (["--lr", "-1"], "lr"),
])
def test_a_refused_value_names_the_option(flags, name):
    r = CliRunner().invoke(app, ["train", "--model", "tiny", *flags])
    assert r.exit_code == 2
    assert f"error: {name}: " in r.output
    assert "run." not in r.output and "plan." not in r.output
