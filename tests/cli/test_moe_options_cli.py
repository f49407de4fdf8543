"""The MoE settings (planner/moe_options.py) on `plan estimate` and `plan export`: each flag's bad value is exit
code 2 with one line naming the field and what is allowed; `plan estimate --json` reports the settings used."""

import json

import pytest
from typer.testing import CliRunner

from plan_cli.main import app

MIXTRAL = ["--gpu", "h100-80gb", "--gpus", "64", "--model", "mixtral-8x7b"]
PINNED = MIXTRAL + ["--tp", "1", "--pp", "1", "--ep", "8", "--micro-batch", "1", "--grad-accum", "4",
                    "--sharding", "zero1", "--seq-len", "4096"]
BAD = [
    (["--moe-capacity-factor", "0"], "moe_capacity_factor", "allowed: a number > 0"),
    (["--moe-capacity-factor", "-1.25"], "moe_capacity_factor", "allowed: a number > 0"),
    (["--moe-capacity-factor", "inf"], "moe_capacity_factor", "allowed: a number > 0"),
    (["--moe-node-limit", "0"], "moe_node_limit", "allowed: an integer >= 1"),
    (["--moe-a2a-overlap", "--moe-shared-expert-overlap"], "moe_shared_expert_overlap", "allowed: one of the two"),
]
# on a dense model every MoE flag is bad input: it would change nothing
DENSE = [(["--moe-fp8-dispatch"], "moe_fp8_dispatch"), (["--moe-a2a-overlap"], "moe_a2a_overlap"),
         (["--moe-shared-expert-overlap"], "moe_shared_expert_overlap"), (["--moe-node-limit", "2"], "moe_node_limit"),
         (["--moe-capacity-factor", "1.25"], "moe_capacity_factor")]


def _one_line_error(result, field: str, allowed: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), result.output
    assert allowed in lines[0]


@pytest.mark.parametrize("command", ["estimate", "export megatron"])
@pytest.mark.parametrize("flags, field, allowed", BAD)
def test_bad_values_exit_2_in_one_line(command, flags, field, allowed):
    _one_line_error(CliRunner().invoke(app, command.split() + MIXTRAL + flags), field, allowed)


@pytest.mark.parametrize("command", ["estimate", "export deepspeed"])
@pytest.mark.parametrize("flags, field", DENSE)
def test_moe_flags_on_a_dense_model_exit_2(command, flags, field):
    result = CliRunner().invoke(app, command.split() + ["--gpu", "h100-80gb", "--gpus", "8", "--model", "7b"] + flags)
    _one_line_error(result, field, "allowed: only with a mixture-of-experts model")


def test_estimate_json_reports_the_moe_settings():
    flags = ["--moe-capacity-factor", "1.5", "--moe-fp8-dispatch", "--moe-node-limit", "2", "--moe-a2a-overlap"]
    result = CliRunner().invoke(app, ["estimate", *PINNED, "--json", *flags])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["moe_settings"] == {
        "moe_capacity_factor": 1.5, "moe_fp8_dispatch": True, "moe_node_limit": 2, "moe_a2a_overlap": True,
        "moe_shared_expert_overlap": False}
    plain = json.loads(CliRunner().invoke(app, ["estimate", *PINNED, "--json"]).output)
    assert plain["moe_settings"]["moe_capacity_factor"] is None and plain["moe_settings"]["moe_node_limit"] is None
    dense = CliRunner().invoke(app, ["estimate", "--gpu", "h100-80gb", "--gpus", "8", "--model", "7b", "--json",
                                     "--top", "1"])
    assert dense.exit_code == 0 and json.loads(dense.output)["moe_settings"] is None
