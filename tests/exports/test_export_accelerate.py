"""accelerate export: the YAML parses, holds the plan's values, and accelerate's own launch
path (config loader, launch validation, env preparation, FSDP/DeepSpeed plugin) accepts it."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from hardware.models import GPU
from planner.errors import PlanError
from planner.exports import accelerate_config, deepspeed_config, to_yaml, torchrun_command
from planner.exports.accelerate import accelerate_yaml
from planner.exports.torchrun import render
from planner.scenario import ExecutionPlan
from planner.system import System

GPU_H100 = GPU(id="h100-sxm", name="H100 SXM", vendor="nvidia", hbm_gib=80, hbm_gbytes_per_s=3350,
               fp32_tflops=67, fp16_tflops=989, bf16_tflops=989, intranode_gbps=3600, source="test")


def system(gpus: int, per_node: int = 8) -> System:
    return System(gpu=GPU_H100, gpus=gpus, gpus_per_node=per_node, host_ram_gib=2048,
                  host_to_gpu_gbps=512, intranode_gbps=3600, internode_gbps=3200)


PLANS = [
    ExecutionPlan(dp=16, sharding="fsdp_full_shard", activation_checkpointing="full", precision="bf16"),
    ExecutionPlan(dp=16, sharding="fsdp_shard_grad_op", offload="optimizer+params", precision="fp16"),
    ExecutionPlan(dp=16, sharding="fsdp_hybrid", precision="bf16_pure", activation_checkpointing="selective"),
    ExecutionPlan(dp=16, sharding="zero3", offload="optimizer+params", activation_checkpointing="full"),
    ExecutionPlan(dp=16, sharding="zero1", precision="fp32"),
    ExecutionPlan(dp=16, sharding="none", precision="bf16", micro_batch=4),
    ExecutionPlan(dp=4, sharding="fsdp_full_shard", precision="bf16"),  # half a node
]


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: f"{p.sharding}-{p.offload}-{p.precision}-dp{p.dp}")
def test_yaml_parses_and_holds_the_plan(plan, tmp_path):
    sysm = system(plan.gpus)
    cfg = accelerate_config(plan, sysm, deepspeed_config_file=str(tmp_path / "ds.json"))
    parsed = yaml.safe_load(to_yaml(cfg))
    assert parsed == cfg
    assert parsed["num_processes"] == plan.gpus
    assert parsed["num_machines"] == max(1, plan.gpus // 8)
    if plan.sharding.startswith("fsdp"):
        fsdp = parsed["fsdp_config"]
        assert parsed["distributed_type"] == "FSDP"
        assert fsdp["fsdp_version"] == 2
        assert fsdp["fsdp_reshard_after_forward"] is (plan.sharding != "fsdp_shard_grad_op")
        assert fsdp["fsdp_activation_checkpointing"] is (plan.activation_checkpointing != "none")
        assert fsdp["fsdp_offload_params"] is (plan.offload == "optimizer+params")
        assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
        assert parsed["mixed_precision"] == {"bf16": "bf16", "bf16_pure": "bf16", "fp16": "fp16", "fp32": "no"}[plan.precision]
    elif plan.sharding.startswith("zero"):
        assert parsed["distributed_type"] == "DEEPSPEED"
        assert parsed["deepspeed_config"]["deepspeed_config_file"] == str(tmp_path / "ds.json")
    else:
        assert parsed["distributed_type"] == "MULTI_GPU"


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: f"{p.sharding}-{p.offload}-{p.precision}-dp{p.dp}")
def test_accelerate_launch_path_accepts_it(plan, tmp_path, monkeypatch):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import DeepSpeedPlugin, FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    ds_path = tmp_path / "ds.json"
    if plan.sharding.startswith("zero"):
        ds_path.write_text(json.dumps(deepspeed_config(plan)))
    path = tmp_path / "accelerate.yaml"
    path.write_text(to_yaml(accelerate_config(plan, system(plan.gpus), deepspeed_config_file=str(ds_path))))
    assert isinstance(load_config_from_file(str(path)), ClusterConfig)

    # what `accelerate launch --config_file FILE train.py` does before it starts processes
    args = launch_command_parser().parse_args(["--config_file", str(path), "--main_process_ip", "10.0.0.1", "train.py"])
    args, defaults, mp_from_config = _validate_launch_command(args)
    assert args.num_processes == plan.gpus
    if args.use_deepspeed:
        fields = list(defaults.deepspeed_config.keys()) + (["mixed_precision"] if mp_from_config else [])
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _, env = prepare_deepspeed_cmd_env(args)
    else:
        env = prepare_multi_gpu_env(args)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if plan.sharding.startswith("fsdp"):
        fsdp = FullyShardedDataParallelPlugin()
        assert fsdp.fsdp_version == 2
        assert fsdp.reshard_after_forward is (plan.sharding != "fsdp_shard_grad_op")
        assert fsdp.activation_checkpointing is (plan.activation_checkpointing != "none")
        assert fsdp.transformer_cls_names_to_wrap == ["Block"]
        assert (type(fsdp.cpu_offload).__name__ == "CPUOffloadPolicy") is (plan.offload == "optimizer+params")
        if plan.sharding == "fsdp_hybrid":
            assert env["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] == "2"
            assert env["PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "8"
    elif plan.sharding.startswith("zero"):
        ds = DeepSpeedPlugin()  # reads the JSON through accelerate's HfDeepSpeedConfig
        assert ds.zero_stage == int(plan.sharding[-1])
        assert ds.deepspeed_config["train_batch_size"] == plan.global_batch
    else:
        assert args.multi_gpu


def test_accelerate_refusals_name_the_field():
    with pytest.raises(PlanError) as e:
        accelerate_config(ExecutionPlan(dp=8, sharding="fsdp_full_shard", offload="optimizer"), system(8))
    assert e.value.field == "offload"
    with pytest.raises(PlanError) as e:
        accelerate_config(ExecutionPlan(dp=4, pp=2, sharding="zero1"), system(8))
    assert e.value.field == "pp"


def test_torchrun_command_for_the_bundled_trainer():
    plan = ExecutionPlan(dp=16, sharding="fsdp_full_shard", activation_checkpointing="full",
                         micro_batch=2, grad_accum=4, seq_len=4096)
    argv = torchrun_command(plan, system(16), model="7b", steps=100)
    text = render(argv)
    words = shlex.split(text)
    assert words[:5] == ["torchrun", "--nnodes", "2", "--nproc-per-node", "8"]
    assert "--rdzv-backend" in words and words[words.index("--rdzv-backend") + 1] == "c10d"
    assert '"$MASTER_ADDR:$MASTER_PORT"' in text  # left to the shell
    i = words.index("-m")
    assert words[i + 1] == "trainer"
    flags = dict(zip(words[i + 2::2], words[i + 3::2]))
    assert flags["--model"] == "7b"
    assert flags["--sharding"] == "fsdp_full_shard"
    assert flags["--activation-checkpointing"] == "full"
    assert flags["--micro-batch"] == "2" and flags["--grad-accum"] == "4"
    assert flags["--seq-len"] == "4096" and flags["--steps"] == "100"
    single = torchrun_command(ExecutionPlan(dp=2), system(2), model="tiny")
    assert "--standalone" in single and "--rdzv-backend" not in single
    with pytest.raises(PlanError) as e:
        torchrun_command(ExecutionPlan(dp=8, tp=2), system(16), model="7b")
    assert e.value.field == "tp"


def test_yaml_comment_derives_the_port_accelerate_then_uses(tmp_path):
    """main_process_port 29500 in the file: two jobs sharing a first node took it both. The file's comment derives the
    port from the job (the trainer's formula, trainer/dist.py) and passes it as accelerate's --main_process_port,
    which wins over the file's key in accelerate's own launch path."""
    import os
    import subprocess

    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    from trainer.dist import slurm_master_port

    plan = ExecutionPlan(dp=16, sharding="fsdp_full_shard", precision="bf16")
    path = tmp_path / "accelerate.yaml"
    text = accelerate_yaml(accelerate_config(plan, system(16)))
    path.write_text(text)
    assert yaml.safe_load(text) == accelerate_config(plan, system(16))  # the comment changes nothing accelerate reads
    comment = [line.removeprefix("#").strip() for line in text.splitlines() if line.startswith("#   ")]
    port_line, launch_line = comment
    for job in ("777", "778"):
        proc = subprocess.run(["bash", "-c", f'set -euo pipefail; {port_line}; printf "%s" "$MASTER_PORT"'],
                              env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": job}, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert int(proc.stdout) == slurm_master_port({"SLURM_JOB_ID": job})[0]
        words = shlex.split(launch_line.replace("$MASTER_PORT", proc.stdout).replace("accelerate.yaml", str(path)))
        assert words[:2] == ["accelerate", "launch"] and words[-1] == "..."
        args = launch_command_parser().parse_args([*words[2:-1], "--main_process_ip", "10.0.0.1", "train.py"])
        args, _, _ = _validate_launch_command(args)
        prepare_multi_gpu_env(args)  # the torchrun arguments accelerate launch hands on (2 nodes: an endpoint)
        assert getattr(args, "rdzv_endpoint", None) or getattr(args, "master_port", None)
        assert proc.stdout in (getattr(args, "master_port", None), getattr(args, "rdzv_endpoint", ":").rpartition(":")[2])



def test_a_partial_recompute_written_as_accelerates_whole_block_switch_says_so():
    """accelerate's fsdp_activation_checkpointing wraps whole blocks (accelerate applies checkpoint_wrapper to every
    transformer layer class it wraps): a plan timed with less recompute (op, selective) runs more than planned, and
    the export says so instead of writing `true` silently; full and none need no such note."""
    from typer.testing import CliRunner

    from plan_cli.main import app

    for ckpt, noted in (("op", True), ("selective", True), ("full", False), ("none", False)):
        r = CliRunner().invoke(app, ["export", "accelerate", "--model", "125m", "--gpus", "8", "--sharding",
                                     "fsdp_full_shard", "--activation-checkpointing", ckpt, "--json"])
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        section = yaml.safe_load(doc["files"][0]["content"])["fsdp_config"]
        assert section["fsdp_activation_checkpointing"] is (ckpt != "none")
        said = [n for n in doc["notes"] if n.startswith("activation checkpointing:")]
        assert bool(said) is noted, (ckpt, doc["notes"])
        if noted:
            assert f"timed with {ckpt}" in said[0] and "--activation-checkpointing full" in said[0]
