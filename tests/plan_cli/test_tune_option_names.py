"""`plan tune` errors name the option the user typed (--budget), not the config field (budget_s)."""

import pytest
from typer.testing import CliRunner

from plan_cli.main import app


@pytest.mark.parametrize("flags,name", [
    (["--budget", "0s"], "budget"),
    (["--budget", "abc"], "budget"),
    (["--budget", "1m", "--trial-timeout", "xyz"], "trial_timeout"),
])
def test_a_refused_value_names_the_option(tmp_path, flags, name):
    r = CliRunner().invoke(app, ["tune", "--model", "tiny", "--gpus", "2", "--storage", f"sqlite:///{tmp_path}/s.db",
                                 *flags])
    assert r.exit_code == 2
    assert f"error: {name}: " in r.output and "_s:" not in r.output
