"""`plan train --stack` / `python -m trainer --stack`: the bundled trainer runs only its own stack,
and its help says so (it listed the planner's seven stacks)."""

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from trainer.cli import parser, trainer_fields

runner = CliRunner()


def test_stack_flag_offers_only_bundled():
    (stack,) = [f for f in trainer_fields() if f.name == "stack"]
    assert stack.choices == ("bundled",) and stack.default == "bundled"
    r = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    assert "only bundled" in r.output and "megatron_deepspeed" not in r.output


def test_a_wrong_stack_is_one_line():
    r = runner.invoke(app, ["train", "--model", "tiny", "--stack", "megatron"])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "allowed: bundled; got megatron" in lines[0]
    with pytest.raises(SystemExit) as e:
        parser().parse_args(["--stack", "megatron"])
    assert e.value.code == 2
