"""`plan export FORMAT` writes the best plan of `plan estimate`'s ranking that FORMAT can express: where
#1 needs Megatron-style model code (tp/pp > 1) a DeepSpeed JSON takes the first pure data-parallel plan,
with a note naming why #1 was passed over and what it costs by the model."""

import json

from typer.testing import CliRunner

from plan_cli.main import app

ARGS = ["--model", "llama2-70b", "--gpus", "64", "--cluster", "dgx-h100"]


def _json(args):
    r = CliRunner().invoke(app, args + ["--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_deepspeed_takes_the_best_plan_it_can_express():
    first = _json(["estimate", *ARGS])["results"][0]["plan"]
    assert first["tp"] * first["pp"] > 1  # the premise: #1 needs model parallelism
    out = _json(["export", "deepspeed", *ARGS])
    plan = out["plan"]
    assert plan["tp"] == 1 and plan["pp"] == 1 and plan["sharding"].startswith("zero")
    rank = int(out["source"].split("rank ")[1].split()[0])
    assert rank > 1
    note = next(n for n in out["notes"] if "cannot be written as deepspeed" in n)
    assert f"#{rank}" in note and "fewer tokens/s" in note
    est = _json(["estimate", *ARGS, "--top", str(rank)])["results"][rank - 1]["plan"]
    assert {k: est[k] for k in ("tp", "pp", "dp", "sharding", "micro_batch", "stack")} == \
        {k: plan[k] for k in ("tp", "pp", "dp", "sharding", "micro_batch", "stack")}


def test_megatron_keeps_number_one():
    out = _json(["export", "megatron", *ARGS])
    assert out["source"].startswith("plan estimate rank 1 ")
    assert not any("cannot be written" in n for n in out["notes"])


def test_nothing_it_can_express_is_one_line():
    r = CliRunner().invoke(app, ["export", "deepspeed", *ARGS, "--sharding", "fsdp_full_shard"])
    assert r.exit_code == 2
    assert "cannot be written as deepspeed" in r.output and "pin the knobs" in r.output
    assert len(r.output.strip().splitlines()) == 1
