"""`plan export` of estimate's #1 when that plan was ranked and timed as another stack than the software
the file is for (the default stack of a zero1 plan is Megatron-LM, whose predicted speed is ~27% above
HF + DeepSpeed's for 7b on 16 A100): a note names both and the --stack that plans for the file, on
stderr also when the file goes to stdout (stdout stays the file)."""

import json

from typer.testing import CliRunner

from plan_cli.main import app
from planner import api
from planner.exports.bundle import RUN_BY, other_stack_note
from planner.scenario import ExecutionPlan, Scenario

runner = CliRunner()


def test_note_only_where_the_plan_stack_does_not_run_the_file():
    zero1 = ExecutionPlan(stack="megatron", tp=1, pp=1, dp=16, sharding="zero1", micro_batch=4, grad_accum=16)
    note = other_stack_note("deepspeed", zero1)
    assert note is not None and "stack megatron" in note and "--stack hf" in note
    assert other_stack_note("megatron", zero1) is None
    for fmt, stacks in RUN_BY.items():
        for stack in stacks:
            assert other_stack_note(fmt, zero1.model_copy(update={"stack": stack})) is None, (fmt, stack)
    assert "--stack bundled" in other_stack_note("slurm", zero1)


def test_the_note_is_true_of_the_default_plan_and_gone_with_the_stack_pinned(tmp_path):
    report = api.estimate(Scenario(model="7b", gpus=16), top=1)
    assert report.best.plan.stack == "megatron"  # the case: zero1 -> megatron by default
    hf = api.estimate(Scenario(model="7b", gpus=16, stack="hf"), top=1)
    assert hf.best.performance.tokens_per_s < 0.9 * report.best.performance.tokens_per_s  # why it matters

    r = runner.invoke(app, ["export", "deepspeed", "--model", "7b", "--gpus", "16"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["plan"]["stack"] == "megatron"  # stdout: the file alone
    assert "ranked and timed as stack megatron" in r.stderr and "--stack hf" in r.stderr

    out = tmp_path / "ds.json"
    r = runner.invoke(app, ["export", "deepspeed", "--model", "7b", "--gpus", "16", "--stack", "hf", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["plan"]["stack"] == "hf" and "ranked and timed" not in r.stderr

    r = runner.invoke(app, ["export", "slurm", "--model", "7b", "--gpus", "16", "--tokens", "10B", "--json"])
    assert r.exit_code == 0, r.output
    assert any("--stack bundled" in n for n in json.loads(r.stdout)["notes"])
