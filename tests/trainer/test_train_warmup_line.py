"""`plan train --steps 1` said "warmup_steps: must be < steps (1)": a flag the user never gave, its default (2)
unnamed, no way out. The line names --warmup-steps with its value and default and the two fixes."""

from typer.testing import CliRunner

from plan_cli.main import app


def test_steps_below_the_default_warmup_names_the_flag_and_the_fixes():
    res = CliRunner().invoke(app, ["train", "--model", "tiny", "--nproc", "2", "--steps", "1"], env={"COLUMNS": "400"})
    lines = (res.stderr or res.output).strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert "--warmup-steps 2 (default 2" in lines[0] and "below --steps 1" in lines[0], lines[0]
    assert "give --steps 3 or more, or --warmup-steps 0" in lines[0], lines[0]
