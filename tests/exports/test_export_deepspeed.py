"""DeepSpeed JSON export: consistent batch sizes, the sections each knob asks for, and
DeepSpeed's own config class accepting every exported config for its world size."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap

import pytest

from planner.errors import PlanError
from planner.exports import Recipe, deepspeed_config
from planner.scenario import (
    CHECKPOINTINGS, OFFLOADS, OPTIMIZERS, PRECISIONS, SHARDINGS, ExecutionPlan,
)

DS_SHARDINGS = ("none", "zero1", "zero2", "zero3")


def all_plans() -> list[tuple[ExecutionPlan, str]]:
    """Every sharding x offload x precision x optimizer x checkpointing, on several layouts."""
    layouts = [dict(dp=8, micro_batch=2, grad_accum=4), dict(dp=2, micro_batch=1, grad_accum=1),
               dict(dp=4, tp=2, micro_batch=3, grad_accum=5), dict(dp=16, pp=2, micro_batch=1, grad_accum=8)]
    out = []
    for lay, sh, off, prec, opt, ck, target in itertools.product(
            layouts, SHARDINGS, OFFLOADS, PRECISIONS, OPTIMIZERS, CHECKPOINTINGS, ("gpu", "cpu")):
        plan = ExecutionPlan(sharding=sh, offload=off, precision=prec, optimizer=opt,
                             activation_checkpointing=ck, reduce_bucket_elems=200_000_000,
                             allgather_bucket_elems=300_000_000, stage3_prefetch_elems=40_000_000,
                             stage3_max_live_params=700_000_000, **lay)
        out.append((plan, target))
    return out


def exportable() -> list[tuple[ExecutionPlan, str, dict]]:
    out = []
    for plan, target in all_plans():
        try:
            out.append((plan, target, deepspeed_config(plan, target=target, recipe=Recipe(steps=1000))))
        except PlanError:
            continue
    return out


def test_batch_sizes_are_consistent():
    for plan, _, cfg in exportable():
        assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * plan.dp
        assert cfg["train_micro_batch_size_per_gpu"] == plan.micro_batch


def test_every_deepspeed_sharding_offload_precision_is_exported():
    """Refusals are only the combinations DeepSpeed cannot run (FSDP plans, offload without
    ZeRO, param offload below stage 3, pp with ZeRO-2/3, bf16_pure without ZeRO)."""
    got = {(p.sharding, p.offload, p.precision) for p, _, _ in exportable()}
    expected = set()
    for sh, off, prec in itertools.product(DS_SHARDINGS, OFFLOADS, PRECISIONS):
        if off != "none" and sh == "none":
            continue
        if off == "optimizer+params" and sh != "zero3":
            continue
        if prec == "bf16_pure" and sh == "none":
            continue
        expected.add((sh, off, prec))
    assert got == expected


def test_sections_follow_the_plan():
    for plan, target, cfg in exportable():
        zero = cfg["zero_optimization"]
        assert zero["stage"] == {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3}[plan.sharding]
        pin = target == "gpu"
        if plan.offload != "none":
            assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": pin}
        else:
            assert "offload_optimizer" not in zero
        assert ("offload_param" in zero) == (plan.offload == "optimizer+params")
        if "offload_param" in zero:
            assert zero["offload_param"]["pin_memory"] is pin
        if zero["stage"] >= 1:
            assert zero["reduce_bucket_size"] == 200_000_000
            assert zero["overlap_comm"] is (target == "gpu")
        if zero["stage"] in (1, 2):
            assert zero["allgather_bucket_size"] == 300_000_000
        if zero["stage"] == 3:
            assert zero["stage3_prefetch_bucket_size"] == 40_000_000
            assert zero["stage3_max_live_parameters"] == 700_000_000
        assert ("fp16" in cfg) == (plan.precision == "fp16")
        assert ("bf16" in cfg) == (plan.precision in ("bf16", "bf16_pure"))
        assert ("activation_checkpointing" in cfg) == (plan.activation_checkpointing != "none")
        assert cfg["gradient_clipping"] == 1.0
        assert cfg["optimizer"]["type"] == {"adamw": "AdamW", "sgd": "SGD", "adafactor": "Adafactor"}[plan.optimizer]
        assert cfg["scheduler"]["params"]["total_num_steps"] == 1000
        assert cfg["plan"]["sharding"] == plan.sharding


def test_refusals_name_the_field():
    with pytest.raises(PlanError) as e:
        deepspeed_config(ExecutionPlan(sharding="fsdp_full_shard"))
    assert e.value.field == "sharding"
    with pytest.raises(PlanError) as e:
        deepspeed_config(ExecutionPlan(sharding="zero2", offload="optimizer+params"))
    assert e.value.field == "offload"
    with pytest.raises(PlanError) as e:
        deepspeed_config(ExecutionPlan(sharding="zero1"), target="tpu")  # type: ignore[arg-type]
    assert e.value.field == "target"


VALIDATE = textwrap.dedent("""
    import json, os, sys
    import torch.distributed as dist
    import deepspeed
    from deepspeed.runtime.config import DeepSpeedConfig

    class DataParallelMpu:
        # what Megatron-style code hands DeepSpeed: the data-parallel group size
        def __init__(self, dp): self.dp = dp
        def get_data_parallel_world_size(self): return self.dp
        def get_data_parallel_rank(self): return 0
        def get_model_parallel_world_size(self): return 1
        def get_model_parallel_rank(self): return 0

    dist.init_process_group("gloo", rank=0, world_size=1)
    deepspeed.init_distributed(dist_backend="gloo")
    failures = []
    cases = json.load(open(sys.argv[1]))
    for case in cases:
        try:
            ds = DeepSpeedConfig(case["config"], mpu=DataParallelMpu(case["dp"]))
            assert ds.world_size == case["dp"], (ds.world_size, case["dp"])
            assert ds.train_batch_size == case["config"]["train_batch_size"]
            assert ds.zero_optimization_stage == case["config"]["zero_optimization"]["stage"]
        except Exception as e:
            failures.append([case["name"], type(e).__name__, str(e)[:300]])
    json.dump({"checked": len(cases), "failures": failures}, open(sys.argv[2], "w"))
""")


def run_validator(tmp_path, cases):
    src, out = tmp_path / "cases.json", tmp_path / "result.json"
    src.write_text(json.dumps(cases))
    env = os.environ | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", VALIDATE, str(src), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_deepspeed_accepts_every_exported_config(tmp_path):
    cases = [{"name": f"{p!r} target={t}", "dp": p.dp, "config": c} for p, t, c in exportable()]
    assert len(cases) > 300
    result = run_validator(tmp_path, cases)
    assert result["checked"] == len(cases)
    assert result["failures"] == []


def test_deepspeed_accepts_what_the_planner_proposes(tmp_path):
    """The planner's own top plan for every DeepSpeed sharding x offload x precision (and a
    few unpinned scenarios), exported and validated for its data-parallel world size."""
    from planner import api
    from planner.scenario import Scenario

    cases = []
    for sh, off, prec in itertools.product(DS_SHARDINGS, OFFLOADS, PRECISIONS):
        try:
            report = api.estimate(Scenario(model="gpt2-xl", gpus=16, sharding=sh, offload=off, precision=prec), top=1)
        except PlanError:
            continue
        for est in report.results:
            for target in ("gpu", "cpu"):
                try:
                    cfg = deepspeed_config(est.plan, target=target, model=report.model)
                except PlanError as e:  # only the documented refusals
                    p = est.plan
                    assert (p.sharding, p.precision, e.field) == ("none", "bf16_pure", "precision") or (
                        e.field == "pp" and p.pp > 1), (p, e)
                    continue
                cases.append({"name": f"{sh}/{off}/{prec}/{target}", "dp": est.plan.dp, "config": cfg})
    for model, gpus in (("7b", 16), ("llama2-13b", 64), ("gpt2", 2)):
        report = api.estimate(Scenario(model=model, gpus=gpus, sharding="zero3", activation_checkpointing="full"), top=3)
        cases += [{"name": f"{model}/{gpus}/{i}", "dp": e.plan.dp, "config": deepspeed_config(e.plan, model=report.model)}
                  for i, e in enumerate(report.results)]
    assert len({c["name"].rsplit("/", 1)[0] for c in cases}) >= 20  # many shardings x offloads x precisions
    result = run_validator(tmp_path, cases)
    assert result["failures"] == []


def test_deepspeed_rejects_an_inconsistent_config(tmp_path):
    """The validator can fail: a wrong batch size or a wrong world size is caught."""
    cfg = deepspeed_config(ExecutionPlan(dp=8, sharding="zero2", micro_batch=2, grad_accum=4))
    bad_batch = dict(cfg, train_batch_size=cfg["train_batch_size"] + 8)
    bad_zero = dict(cfg, zero_optimization=dict(cfg["zero_optimization"], no_such_key=1))
    cases = [{"name": "batch", "dp": 8, "config": bad_batch},
             {"name": "world", "dp": 4, "config": cfg},
             {"name": "zero-key", "dp": 8, "config": bad_zero}]
    result = run_validator(tmp_path, cases)
    assert sorted(f[0] for f in result["failures"]) == ["batch", "world", "zero-key"]
