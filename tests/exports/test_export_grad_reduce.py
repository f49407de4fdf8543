"""grad_reduce_dtype in the exports: Megatron-LM's flag (checked against its arguments.py), DeepSpeed's
`communication_data_type` / `data_types.grad_accum_dtype` (parsed back by DeepSpeed's own config class, as
installed), FSDP2's MixedPrecisionPolicy.reduce_dtype; the CLI flag and the bundled trainer's refusal."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from plan_cli.main import app
from tests.exports.deepspeed_parse import parse_with_deepspeed
from planner.errors import PlanError
from planner.exports import deepspeed_config
from planner.exports.fsdp_settings import fsdp_settings
from planner.exports.megatron_args import megatron_args
from planner.presets import resolve_model
from planner.scenario import ExecutionPlan

# NVIDIA/Megatron-LM@000c4ac24f61159c138b0975def722c65245983c megatron/training/arguments.py validate_args:
# "if args.grad_reduce_in_bf16: args.accumulate_allreduce_grads_in_fp32 = False" under --bf16;
# --accumulate-allreduce-grads-in-fp32 is store_true there and in 307dcf37 (2024)
MEGATRON_FLAGS = {"fp32": "--accumulate-allreduce-grads-in-fp32", "bf16": "--grad-reduce-in-bf16"}


@pytest.mark.parametrize("dtype", ["default", "fp32", "bf16"])
def test_megatron_writes_the_matching_flag(dtype):
    # default: the megatron profile's zero1 bf16 plan is timed with a bf16 reduce-scatter (2 bytes, dp_comm)
    args = megatron_args(ExecutionPlan(dp=8, sharding="zero1", grad_reduce_dtype=dtype), resolve_model("gpt2-xl"))
    written = [f for f in MEGATRON_FLAGS.values() if f in args]
    assert written == [MEGATRON_FLAGS["bf16" if dtype == "default" else dtype]]


@pytest.mark.parametrize(("dtype", "precision", "sharding", "noted", "flag"), [
    ("default", "bf16", "zero1", True, "bf16"), ("default", "fp8", "zero1", True, "bf16"),
    ("default", "fp16", "zero1", True, None), ("default", "bf16", "none", True, "fp32"),
    ("fp32", "bf16", "zero1", False, "fp32"), ("bf16", "bf16", "zero1", False, "bf16")])
def test_megatron_export_says_what_a_default_was_resolved_to(dtype, precision, sharding, noted, flag):
    # a default is resolved by the stack profile as dp_comm times it, written as a flag, and the note says which
    notes: list[str] = []
    args = megatron_args(ExecutionPlan(dp=8, sharding=sharding, grad_reduce_dtype=dtype, precision=precision),
                         resolve_model("gpt2-xl"), notes=notes)
    said = [n for n in notes if n.startswith("gradients:")]
    assert bool(said) == noted
    assert [f for f in MEGATRON_FLAGS.values() if f in args] == ([MEGATRON_FLAGS[flag]] if flag else [])
    if noted:
        assert "stack profile megatron" in said[0] and (MEGATRON_FLAGS[flag] in said[0] if flag else "no flag" in said[0])
        # DDP: timed as an fp32 all-reduce, and memory counts the fp32 buffer that reduction fills (it counted a
        # 16-bit one, 2 bytes a parameter short, before round 38)
        assert ("memory counts the fp32 main-gradient buffer" in said[0]) == (sharding == "none")


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp8"])
def test_megatron_ddp_memory_counts_the_fp32_buffer_its_reduction_fills(precision):
    """Megatron plain DDP in 16-bit mixed precision is timed as an fp32 all-reduce (dp_comm.grad_bytes: 4 bytes) and
    exported with Megatron-LM's fp32 gradient accumulation, so Megatron-Core's grad buffer is fp32: its memory must
    count 4 bytes a parameter of gradients (it counted 2). The distributed optimizer (zero1, reduced in bf16 as
    exported with --grad-reduce-in-bf16) keeps its 16-bit buffer; --grad-reduce-dtype bf16 on DDP too."""
    from planner import api
    from planner.scenario import Scenario

    def grads(sharding, dtype="default"):
        sc = Scenario(model="gpt2-xl", gpus=8, gpu="h100-80gb", stack="megatron", sharding=sharding, tp=1, pp=1,
                      precision=precision, grad_reduce_dtype=dtype, micro_batch=1, activation_checkpointing="full")
        est = api.evaluate(sc)
        return est.memory.grads_bytes / resolve_model("gpt2-xl").n_params

    assert grads("none") == pytest.approx(4.0, rel=0.01)
    assert grads("none", "bf16") == pytest.approx(2.0, rel=0.01)
    assert grads("zero1") == pytest.approx(2.0 + 4.0 / 8, rel=0.01)  # 16-bit buffer + the fp32 partition of 8


def test_fsdp_reduce_dtype_follows_the_knob():
    mp = lambda g, stack="bundled": fsdp_settings(ExecutionPlan(dp=4, sharding="fsdp_full_shard", stack=stack,  # noqa: E731
                                                                grad_reduce_dtype=g))["mixed_precision"]
    assert mp("default")["reduce_dtype"] == "float32" == mp("fp32")["reduce_dtype"] == mp("fp32", "fsdp")["reduce_dtype"]
    assert mp("bf16") == {"param_dtype": "bfloat16", "reduce_dtype": None}  # torch: None reduces in param_dtype


def test_deepspeed_parses_the_exported_dtypes(tmp_path):
    plans = [ExecutionPlan(dp=8, sharding="zero1", grad_reduce_dtype="fp32"),
             ExecutionPlan(dp=8, sharding="zero2", grad_reduce_dtype="bf16"),
             ExecutionPlan(dp=8, sharding="zero3", precision="fp16", grad_reduce_dtype="bf16"),
             ExecutionPlan(dp=8, sharding="zero1")]
    configs = [deepspeed_config(p, target="cpu") for p in plans]
    assert "communication_data_type" not in configs[3] and "data_types" not in configs[3]
    got = parse_with_deepspeed(tmp_path, configs, '{"comm": str(c.communication_data_type), "accum": str(c.grad_accum_dtype)}')
    assert got[0] == {"comm": "torch.float32", "accum": "fp32"}
    assert got[1]["comm"] == "torch.bfloat16" and got[2]["comm"] == "torch.float16"
    assert got[3]["comm"] == "None"


def test_the_cli_flag_and_a_bad_value():
    runner = CliRunner()
    ok = runner.invoke(app, ["estimate", "--model", "7b", "--gpus", "16", "--gpu", "h100-80gb", "--tp", "1", "--pp", "1",
                             "--sharding", "zero1", "--stack", "megatron", "--grad-reduce-dtype", "fp32", "--json"])
    assert ok.exit_code == 0, ok.output
    assert {r["plan"]["grad_reduce_dtype"] for r in json.loads(ok.output)["results"]} == {"fp32"}
    bad = runner.invoke(app, ["estimate", "--model", "7b", "--gpus", "16", "--grad-reduce-dtype", "fp64"])
    assert bad.exit_code != 0
    assert "grad_reduce_dtype" in bad.output and "allowed: default, fp32, bf16" in bad.output
    assert len(bad.output.strip().splitlines()) == 1


def test_the_bundled_ddp_backend_refuses_a_dtype_it_does_not_run():
    from trainer.config import TrainConfig, validate_config

    def cfg(precision, dtype):
        return TrainConfig(model="tiny", nproc=2, precision=precision, grad_reduce_dtype=dtype)
    with pytest.raises(PlanError) as e:
        validate_config(cfg("bf16", "bf16"))
    assert e.value.field == "grad_reduce_dtype" and "allowed: default, fp32" in str(e.value)
    validate_config(cfg("bf16", "fp32"))  # torch DDP under AMP: fp32 gradients, what it runs


def test_the_scenarios_file_and_the_text_output_carry_the_knob(tmp_path):
    runner = CliRunner()
    src, out = tmp_path / "s.csv", tmp_path / "out.csv"
    src.write_text("model,gpus,gpu,tp,pp,sharding,stack,micro_batch,grad_reduce_dtype\n"
                   "7b,16,h100-80gb,1,1,zero1,megatron,1,fp32\n7b,16,h100-80gb,1,1,zero1,megatron,1,\n")
    r = runner.invoke(app, ["estimate", "--scenarios", str(src), "--out", str(out)])
    assert r.exit_code == 0, r.output
    import csv
    fp32, default = csv.DictReader(out.open())
    assert (fp32["grad_reduce_dtype"], default["grad_reduce_dtype"]) == ("fp32", "default")
    assert float(fp32["mem_grads_gib"]) == pytest.approx(4.0 / (2 + 4 / 16) * float(default["mem_grads_gib"]), rel=1e-3)
    text = runner.invoke(app, ["estimate", "--model", "7b", "--gpus", "16", "--gpu", "h100-80gb", "--grad-reduce-dtype", "bf16"])
    assert "gradients reduced in bf16" in text.output
