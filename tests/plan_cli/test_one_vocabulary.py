"""One vocabulary: every model field is a flag of every face that carries the model, with the
field's description as its help (a field missing from a face fails here)."""

import json

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
            # the plan's own words, extended where a blank cell is not the search's (seq_len: the model's maximum)
            assert Scenario.model_fields[name].description.startswith(field.description), name


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


def _trainer_expected():
    from trainer.config import NOT_FLAGS, LaunchSettings, RunSettings, TrainConfig

    models = {"plan": ExecutionPlan, "run": RunSettings, "launch": LaunchSettings}
    expected = {n: f for n, f in TrainConfig.model_fields.items() if n not in (*models, "spec")}
    for model in models.values():
        expected |= {n: f for n, f in model.model_fields.items() if n not in NOT_FLAGS}
    return expected


def test_trainer_argparse_carries_every_train_config_field():
    from trainer.cli import parser

    actions = {a.dest: a for a in parser()._actions if a.dest != "help"}
    for name, field in _trainer_expected().items():
        assert name in actions, f"python -m trainer has no flag for {name}"
        assert actions[name].help.startswith(field.description), (name, actions[name].help)
    assert actions["json_out"].option_strings == ["--json"]
    args = vars(parser().parse_args(["--tp", "2", "--no-measure-memory", "--timeout-s", "30m", "--compile"]))
    assert args == {"tp": 2, "measure_memory": False, "timeout_s": "30m", "compile": True}  # left out: not passed


def test_plan_train_carries_every_train_config_field():
    options = _options(_command("train"))
    for name, field in _trainer_expected().items():
        assert name in options, f"plan train has no option for {name}"
        assert options[name].help.startswith(field.description)


def test_train_config_parts_and_flat_input():
    """Flat fields (flags, result files and tuner configs written before the split) are sorted
    into plan/run/launch; dp and sequence parallelism follow the launch and tp."""
    from trainer.config import TrainConfig

    old = '{"model": "tiny", "spec": null, "nproc": 4, "tp": 2, "sharding": "fsdp_full_shard", "steps": 3, ' \
          '"warmup_steps": 1, "json_out": "r.json", "precision": "fp32", "pp_schedule": null}'
    cfg = TrainConfig.model_validate_json(old)
    assert (cfg.plan.tp, cfg.plan.dp, cfg.plan.sequence_parallel, cfg.plan.stack) == (2, 2, True, "bundled")
    assert (cfg.run.steps, cfg.run.json_out, cfg.launch.nproc) == (3, "r.json", 4)
    assert TrainConfig.model_validate_json(cfg.model_dump_json()) == cfg  # what each rank reads
    assert cfg.on_ranks(nproc=8, nnodes=2).plan.dp == 8
    assert TrainConfig(precision="bf16").plan.seq_len == 64  # the trainer's defaults, not the planner's


def test_scenario_columns_are_the_scenario_fields(tmp_path):
    from plan_cli.scenario_file import load_scenario, save_scenario
    from plan_cli.scenarios_io import _scenario, read_rows

    path = tmp_path / "s.csv"
    path.write_text(",".join(Scenario.model_fields) + "\n" + ",".join("" for _ in Scenario.model_fields) + "\n")
    assert list(read_rows(path)[0]) == list(Scenario.model_fields)  # every field is a column
    assert _scenario({"model": "7b", "tokens": "100B", "cp": "2", "compile": "true"}).tokens == 1e11
    path.write_text("model,bogus\n7b,1\n")
    with pytest.raises(Exception, match="bogus"):
        read_rows(path)
    saved = Scenario(model="7b", gpus=16, cp=2, async_tp=True, tokens="1T", global_batch_tokens="4M")
    assert load_scenario(save_scenario(saved, tmp_path / "plan.toml")) == saved


def test_service_schema_carries_every_scenario_field(tmp_path):
    from plan_service.app import ServiceConfig, create_app

    app = create_app(ServiceConfig(storage=f"sqlite:///{tmp_path}/t.db", workdir=tmp_path))
    schemas = app.openapi()["components"]["schemas"]
    body = schemas["EstimateRequest"]["properties"]
    for name, field in Scenario.model_fields.items():
        assert name in body, f"POST /estimate has no {name}"
        assert body[name].get("description") == field.description
    assert '"type": "string"' in json.dumps(body["tokens"])  # "100B" is accepted as written
