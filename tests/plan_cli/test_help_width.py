"""`plan COMMAND --help` in an 80-column terminal loses nothing: typer cut long option names and allowed values
with '…' ('--activation-checkp…', '(ring|ulysses|allga…'); they fold onto the next line now."""

import pytest
from typer.testing import CliRunner

from plan_cli.main import app


@pytest.mark.parametrize("command", ["estimate", "train", "tune", "export", "serve", "calibrate"])
def test_help_at_80_columns_cuts_nothing(command):
    r = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80
    cut = [line for line in r.output.splitlines() if "…" in line]
    assert not cut, "\n".join(cut)


def test_a_folded_option_reads_whole():
    r = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "80"})
    cells = [line.strip("│ ").split("  ")[0].strip() for line in r.output.splitlines() if line.startswith("│ ")]
    joined = "".join(cells)
    assert "--activation-checkpointing" in joined and "--checkpoint-fraction" in joined
