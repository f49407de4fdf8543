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


def _rows(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("│ ")]


def test_a_flag_and_its_negative_share_one_cell():
    """typer gave '--no-...' a column of its own as wide as the longest one (30 characters in `plan estimate`),
    which left the help text a quarter of an 80-column terminal: the negative form now sits under its flag."""
    r = CliRunner().invoke(app, ["estimate", "--help"], env={"COLUMNS": "80"})
    rows = _rows(r.output)
    at = next(i for i, line in enumerate(rows) if line.startswith("│ --moe-shared-expert-overlap "))
    assert rows[at + 1].startswith("│ --no-moe-shared-expert-overlap ")
    assert not any("--moe-shared-expert-overlap  " in line and "--no-moe-shared" in line for line in rows)
    # the type and help columns start where the longest name ends (was at column 46 of 80) ...
    assert rows[at].index("<bool>") < 40, rows[at]
    # ... and nothing is lost: each option name still reads whole
    assert "--fragmentation-margin" in r.output and "--no-parallel-block" in r.output


def test_estimate_help_shows_the_scenario_first():
    """The options a new user needs (--model, --gpus, --gpu) come before the ranking inputs and MoE switches."""
    r = CliRunner().invoke(app, ["estimate", "--help"], env={"COLUMNS": "100"})
    panels = [line.split("─ ", 1)[1].split(" ─")[0] for line in r.output.splitlines() if line.startswith("╭─ ")]
    assert panels[:2] == ["Options", "Scenario (blank = planner chooses)"], panels
    assert panels.index("Ranking, measurements and memory margins") > 1
    assert panels[-1] == "Output"
    options = r.output.split("╭─ Options")[1].split("╰")[0]
    assert "--help" in options and "--objective" not in options and "--moe" not in options
