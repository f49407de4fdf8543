"""One vocabulary: every model field is a flag of every face that carries the model, with the
field's description as its help (a field missing from a face fails here)."""

import pytest
import typer

from plan_cli.main import app
from planner.fields import cli_fields
from planner.scenario import NOT_PINNED, ExecutionPlan, Scenario


def _command(name: str):
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def _options(command) -> dict:
    return {p.name: p for p in command.params if p.param_type_name == "option"}


def test_scenario_carries_every_plan_knob():
    for name, field in ExecutionPlan.model_fields.items():
        if name not in NOT_PINNED:
            assert Scenario.model_fields[name].description == field.description


@pytest.mark.parametrize("command", ["estimate", "export"])
def test_scenario_commands_carry_every_scenario_field(command):
    options = _options(_command(command))
    for name, field in Scenario.model_fields.items():
        assert name in options, f"plan {command} has no --{name.replace('_', '-')}"
        opt = options[name]
        assert f"--{name.replace('_', '-')}" in opt.opts
        if name != "gpus" or command == "export":  # estimate's --gpus also takes a sweep
            assert opt.help.startswith(field.description), (name, opt.help)
        assert opt.default is None  # blank: the planner chooses


def test_generated_options_reach_the_model():
    fields = {f.name: f for f in cli_fields(Scenario)}
    assert fields["tokens"].kind is str  # "100B" goes to the model as written
    assert fields["sharding"].choices == ("none", "zero1", "zero2", "zero3", "fsdp_full_shard",
                                          "fsdp_shard_grad_op", "fsdp_hybrid")
    assert fields["compile"].kind is bool and fields["compile"].flag == "--compile"
