"""--help says what the commands do now: `plan export` writes FSDP2 settings too, every `plan tune` and
`plan allreduce-bench` option has a line of help, and --budget states its limit."""

import re

import pytest
from typer.testing import CliRunner

from plan_cli.main import app

runner = CliRunner()


def _help(*args: str) -> str:
    r = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "240"})
    assert r.exit_code == 0, r.output
    return r.output


def test_export_help_names_the_fsdp_settings():
    assert "FSDP2 settings" in _help("export").split("Arguments")[0]
    assert "FSDP2 settings" in _help()  # the command list's line


@pytest.mark.parametrize("command, options", [
    (("allreduce-bench",), ("--nnodes", "--node-rank")),
    (("tune",), ("--seq-len", "--seed")),
])
def test_options_that_had_no_help_have_some(command, options):
    text = _help(*command)
    for opt in options:
        line = next(ln for ln in text.splitlines() if re.search(rf"{opt}\s", ln))
        words = re.sub(r"<[^>]*>|\[[^\]]*\]|[│╭╰─]", " ", line.split(opt, 1)[1]).split()
        assert len(words) >= 3, f"{opt} has no help: {line.strip()}"


def test_tune_budget_help_states_its_limit():
    assert "at most 7d" in _help("tune")
