"""Context parallelism in the exports: each framework's own setting for the plan's cp_impl, read back
by the framework's own classes, or a one-line refusal naming the field."""

from __future__ import annotations

import json

import pytest

from planner.errors import PlanError
from planner.exports import accelerate_config, deepspeed_config, to_yaml
from planner.exports.cp_settings import megatron_args
from planner.exports.torchrun import trainer_args
from planner.scenario import ExecutionPlan
from tests.exports.test_export_accelerate import system


def test_megatron_flags_per_implementation():
    assert megatron_args(ExecutionPlan(cp=1), 8) == []
    assert megatron_args(ExecutionPlan(cp=4, dp=2), 8) == ["--context-parallel-size", "4", "--cp-comm-type", "p2p"]
    assert megatron_args(ExecutionPlan(cp=4, cp_impl="ulysses"), 8)[-1] == "a2a"
    assert megatron_args(ExecutionPlan(cp=4, cp_impl="allgather"), 8)[-1] == "allgather"
    # hierarchical: the all-to-all inside the node first (8 / tp 2 = 4 cp ranks per node), ring of 4 across
    assert megatron_args(ExecutionPlan(tp=2, cp=16, cp_impl="a2a+p2p"), 8)[-4:] == [
        "a2a+p2p", "--hierarchical-context-parallel-sizes", "4", "4"]


def test_deepspeed_ulysses_key_and_refusals():
    cfg = deepspeed_config(ExecutionPlan(cp=4, cp_impl="ulysses", dp=2, sharding="zero3", micro_batch=1, grad_accum=2))
    assert cfg["sequence_parallel_size"] == 4
    assert cfg["train_batch_size"] == 1 * 2 * 2  # DeepSpeed's data-parallel world = world / sequence_parallel_size
    assert "sequence_parallel_size" not in deepspeed_config(ExecutionPlan(sharding="zero1"))
    for impl in ("ring", "allgather", "a2a+p2p"):
        with pytest.raises(PlanError) as e:
            deepspeed_config(ExecutionPlan(cp=4, cp_impl=impl, sharding="zero1"))
        assert e.value.field == "cp_impl" and "ulysses" in str(e.value) and "\n" not in str(e.value)


def test_deepspeed_reads_the_ulysses_config(tmp_path):
    from tests.exports.test_export_deepspeed import run_validator

    plan = ExecutionPlan(cp=4, cp_impl="ulysses", dp=2, sharding="zero2", micro_batch=2, grad_accum=4)
    result = run_validator(tmp_path, [{"name": "ulysses", "dp": plan.dp, "config": deepspeed_config(plan)}])
    assert result == {"checked": 1, "failures": []}


@pytest.mark.parametrize("impl, strategy", [("ring", "alltoall"), ("allgather", "allgather")])
def test_accelerate_fsdp2_context_parallel(impl, strategy, tmp_path, monkeypatch):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils.launch import prepare_multi_gpu_env

    plan = ExecutionPlan(cp=4, cp_impl=impl, dp=4, sharding="fsdp_full_shard")
    path = tmp_path / "accelerate.yaml"
    path.write_text(to_yaml(accelerate_config(plan, system(plan.gpus))))
    args = launch_command_parser().parse_args(["--config_file", str(path), "--main_process_ip", "10.0.0.1", "train.py"])
    args, _, _ = _validate_launch_command(args)
    for key, value in prepare_multi_gpu_env(args).items():
        monkeypatch.setenv(key, value)
    pc = ParallelismConfig()  # what accelerate builds from the launch environment
    assert (pc.cp_size, pc.dp_shard_size, pc.cp_handler.cp_comm_strategy) == (4, 4, strategy)
    assert pc.total_size == plan.gpus


def test_accelerate_deepspeed_ulysses_and_refusals(tmp_path):
    plan = ExecutionPlan(cp=8, cp_impl="ulysses", dp=2, sharding="zero3")
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(deepspeed_config(plan)))
    cfg = accelerate_config(plan, system(plan.gpus), deepspeed_config_file=str(ds))
    assert cfg["parallelism_config"] == {"parallelism_config_sp_size": 8, "parallelism_config_sp_backend": "deepspeed"}
    for bad, field in ((ExecutionPlan(cp=4, cp_impl="ulysses", dp=2, sharding="fsdp_full_shard"), "cp_impl"),
                       (ExecutionPlan(cp=4, cp_impl="a2a+p2p", dp=2, sharding="fsdp_full_shard"), "cp_impl"),
                       (ExecutionPlan(cp=4, cp_impl="ring", dp=2, sharding="none"), "cp")):
        with pytest.raises(PlanError) as e:
            accelerate_config(bad, system(bad.gpus))
        assert e.value.field == field


def test_bundled_trainer_refuses_context_parallelism():
    with pytest.raises(PlanError) as e:
        trainer_args(ExecutionPlan(cp=2, dp=4, stack="bundled"), model="tiny")
    assert e.value.field == "cp"
