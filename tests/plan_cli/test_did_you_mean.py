"""A mistyped value is answered with what was likely meant: every closed choice suggests (`--kind gpu`
-> gpus), and ids that start with the typo come before difflib's nearest (`--gpu h100` meant one of the
H100s, not an H800, which difflib alone ranked first: one letter off). The real CLI."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from hardware.errors import closest
from plan_cli.main import app


@pytest.mark.parametrize("args, line", [
    (["catalog", "list", "--kind", "gpu"], "kind: unknown value 'gpu'; did you mean gpus? (allowed: gpus, clusters,"),
    (["export", "deepspeeed", "--model", "7b"], "format: unknown value 'deepspeeed'; did you mean deepspeed? (allowed: deepspeed, fsdp,"),
    (["estimate", "--model", "7b", "--objective", "day"], "objective: unknown value 'day'; did you mean days?"),
    (["export", "deepspeed", "--model", "7b", "--gpus", "8", "--target", "gpus"], "target: unknown value 'gpus'; did you mean gpu"),
    (["calibrate", "runs.csv", "--stack", "hff", "--out", "c/stacks/hf.toml"], "stack: unknown value 'hff'; did you mean hf?"),
])
def test_every_closed_choice_suggests_the_value_meant(args, line):
    """These choices listed what is allowed but suggested nothing (`--kind gpu` for gpus)."""
    r = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert line in " ".join(r.output.split()), r.output


@pytest.mark.parametrize("args, hint", [
    (["estimate", "--model", "7b", "--gpus", "8", "--gpu", "h100"], "did you mean h100-80gb, h100-96gb, h100-nvl?"),
    (["estimate", "--model", "7b", "--gpus", "8", "--gpu", "H100"], "did you mean h100-80gb, h100-96gb, h100-nvl?"),
    (["catalog", "show", "h100"], "did you mean h100-80gb, h100-96gb, h100-nvl?"),
    (["estimate", "--model", "llama2", "--gpus", "8"], "did you mean llama2-13b, llama2-70b, llama2-7b?"),
    (["estimate", "--model", "7b", "--gpus", "8", "--cluster", "dgx-h10"], "did you mean dgx-h100,"),
])
def test_ids_that_start_with_the_typo_come_first(args, hint):
    r = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert hint in " ".join(r.output.split()), r.output


def test_closest_keeps_difflib_for_a_typo_inside_the_name():
    assert closest("lama2-7b", ["llama2-7b", "llama2-70b", "gpt2"])[0] == "llama2-7b"
    assert closest("zzz", ["llama2-7b", "gpt2"]) == []
    assert closest("", ["a", "b"]) == []


@pytest.mark.parametrize("args, line", [
    (["--sharding", "ZeRO-3"], "sharding: unknown value 'ZeRO-3'; did you mean zero3"),
    (["--stack", "megatronn"], "stack: unknown value 'megatronn'; did you mean megatron"),
    (["--activation-checkpointing", "selctive"], "activation_checkpointing: unknown value 'selctive'; did you mean "
                                                 "selective? (allowed: none, selective, op, blocks, full)"),
    (["--precision", "bf-16"], "precision: unknown value 'bf-16'; did you mean bf16"),
])
def test_a_scenario_knob_suggests_too(args, line):
    """A scenario knob's closed choice said pydantic's "Input should be 'none', 'zero1', ..." and suggested
    nothing (--sharding ZeRO-3, as people write it)."""
    r = CliRunner().invoke(app, ["estimate", "--model", "7b", "--gpus", "8", *args], env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert line in " ".join(r.output.split()) and "Input should be" not in r.output, r.output
