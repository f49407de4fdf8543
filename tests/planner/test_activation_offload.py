"""activation_offload: DeepSpeed's cpu_checkpointing (+ partition_activations) as a plan knob:
its memory effect, its host-link time, the rules, the trainer's refusal and the DeepSpeed export."""

import numpy as np
import pytest

from planner import rules
from planner.comm import HOST_LINK_EFFICIENCY
from planner.errors import PlanError
from planner.exports import deepspeed_config
from planner.layout import Layout
from planner.host_memory import offloaded_checkpoint_bytes
from planner.memory import memory_arrays
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance
from trainer.config import TrainConfig, validate_plan

GPT52 = resolve_model("gpt2-52b")
SYSTEM = resolve_system(Scenario(cluster="jean-zay-v100-32gb", gpus=64))
PLAN = ExecutionPlan(stack="megatron_deepspeed", tp=4, dp=16, sharding="zero3", activation_checkpointing="full",
                     precision="fp16", micro_batch=48, seq_len=1024)


def _one(d: dict) -> dict:
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in d.items() if k != "bottleneck"}


def test_checkpoints_leave_gpu_memory_for_host_memory():
    on, off = (_one(memory_arrays(GPT52, Layout.from_plan(PLAN.model_copy(update={"activation_offload": a})),
                                  SYSTEM, Settings())) for a in (False, True))
    # the block input s*b*h in fp16 of each of the 64 blocks, split over tp=4
    per_rank = 64 * 1024 * 48 * 8192 * 2 / 4
    # with the offload nothing of the checkpoints stays: the GPU keeps what tp splits (sequence
    # parallelism is off, so the stored input is the whole s*b*h on every TP rank)
    assert on["activations_bytes"] - off["activations_bytes"] == pytest.approx(64 * 1024 * 48 * 8192 * 2)
    # the node's 4 ranks hold theirs in host RAM (next to the model built there at start)
    assert offloaded_checkpoint_bytes(GPT52, Layout.from_plan(PLAN.model_copy(update={"activation_offload": True}))) \
        == pytest.approx(per_rank)
    assert off["host_bytes_per_node"] > on["host_bytes_per_node"]
    assert off["host_bytes_per_node"] >= 4 * per_rank


def test_copies_cost_host_link_time_both_ways():
    on, off = (_one(performance(GPT52, Layout.from_plan(PLAN.model_copy(update={"activation_offload": a})),
                                SYSTEM, Settings())) for a in (False, True))
    nbytes = 64 * 1024 * 48 * 8192 * 2 / 4
    host_Bps = SYSTEM.host_to_gpu_gbps * 1e9 / 8 * HOST_LINK_EFFICIENCY  # achievable share of the line rate
    extra = off["offload_s"] - on["offload_s"]
    assert extra >= 2 * nbytes / host_Bps  # D2H in forward, H2D in backward, plus the TP gather
    assert extra < 1.2 * 2 * nbytes / host_Bps  # the NVLink all-gather is small next to PCIe
    assert off["step_time_s"] - on["step_time_s"] == pytest.approx(extra)


def test_needs_full_or_blocks_checkpointing():
    plan = PLAN.model_copy(update={"activation_offload": True, "activation_checkpointing": "selective"})
    with pytest.raises(PlanError) as e:
        rules.check(plan.model_dump(include={"activation_offload", "activation_checkpointing"}))
    assert e.value.field == "activation_offload"


def test_only_stacks_with_the_deepspeed_checkpointing_api_run_it():
    from planner.settings import stack_profiles
    from planner.stacks import unsupported

    profiles = stack_profiles(Settings())
    lay = Layout.from_plans([PLAN.model_copy(update={"activation_offload": True, "stack": s})
                             for s in ("megatron_deepspeed", "megatron")])
    assert list(unsupported(profiles, lay)) == [False, True]


def test_bundled_trainer_refuses_it():
    cfg = TrainConfig(plan=ExecutionPlan(stack="bundled", precision="fp32", seq_len=64, activation_offload=True,
                                         activation_checkpointing="full"))
    with pytest.raises(PlanError) as e:
        validate_plan(cfg)
    assert e.value.field == "activation_offload"


def test_deepspeed_export_turns_on_cpu_checkpointing():
    plan = PLAN.model_copy(update={"activation_offload": True, "tp": 1, "dp": 64})
    section = deepspeed_config(plan)["activation_checkpointing"]
    assert section["cpu_checkpointing"] is True and section["partition_activations"] is True
    plain = deepspeed_config(PLAN.model_copy(update={"tp": 1, "dp": 64}))["activation_checkpointing"]
    assert plain["cpu_checkpointing"] is False
