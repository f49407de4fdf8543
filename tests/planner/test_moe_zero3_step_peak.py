"""ZeRO-3 releases its gathered module before the optimizer step (memory_required.gathered_bytes), also the part an
MoE plan gathers beyond its dense view (the bundled trainer's stacked experts, hf's leaf block:
moe_memory.zero3_gathered_extra_bytes): where the step's own peak sets the plan's peak, those bytes are not held."""

import numpy as np
import pytest

from planner import memory, memory_required as mr, moe, moe_memory
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.settings import stack_profiles
from planner.stacks import per_candidate

SYSTEM = resolve_system(Scenario(gpu="h100-80gb", gpus=8))
SPEC = resolve_model("mixtral-8x7b")


def _x(a) -> float:
    return float(np.asarray(a, dtype=np.float64).reshape(-1)[0])


def _layout(stack: str, seq_len: int) -> Layout:
    return Layout.from_plan(ExecutionPlan(dp=8, seq_len=seq_len, micro_batch=1, sharding="zero3", stack=stack,
                                          precision="bf16", activation_checkpointing="full"))


@pytest.mark.parametrize("stack", ["bundled", "hf"])
def test_gathered_expert_bytes_are_gone_at_the_optimizer_step(stack):
    lay = _layout(stack, 512)
    view = moe.dense_view(SPEC)
    extra = moe_memory.zero3_gathered_extra_bytes(SPEC, view, lay)
    assert _x(extra) > 1e9  # the stacked experts (bundled) or the leaf block (hf): GBs beyond the view's module
    terms = memory.memory_arrays(SPEC, lay, SYSTEM, Settings())
    prof = per_candidate(stack_profiles(Settings()), lay)
    # a step peak far above backward (as with a huge fp32 partition): the gathered bytes are not part of it
    step_heavy = dict(terms, activations_bytes=np.zeros(1))
    held = mr.required_bytes(view, lay, SYSTEM, step_heavy, 0.0, prof, 0.0, 0.0)
    released = mr.required_bytes(view, lay, SYSTEM, step_heavy, 0.0, prof, 0.0, extra)
    fp32, step = mr.step_only_bytes(view, lay, SYSTEM, prof["main_grads_fp32"])
    live_and_gathered = _x(mr.gathered_bytes(view, lay)) + _x(extra)
    assert _x(step) > live_and_gathered  # 8 GPUs, no activations: the step sets the peak
    assert _x(held) - _x(released) == pytest.approx(_x(extra), rel=1e-9)


def test_memory_arrays_releases_the_moe_gathered_bytes_at_the_step():
    """The search's memory terms use it: a plan whose peak is the step holds the experts' gathered copy nowhere."""
    lay = _layout("bundled", 128)
    view = moe.dense_view(SPEC)
    terms = memory.memory_arrays(SPEC, lay, SYSTEM, Settings())
    extra = _x(moe_memory.zero3_gathered_extra_bytes(SPEC, view, lay))
    prof = per_candidate(stack_profiles(Settings()), lay)
    fp32, step = mr.step_only_bytes(view, lay, SYSTEM, prof["main_grads_fp32"])
    # every term held at once less what is gone at the step: the step's own peak replaces backward's live bytes
    gone = _x(terms["total_bytes"]) - _x(terms["required_bytes"])
    assert gone >= extra + _x(mr.gathered_bytes(view, lay)) + _x(fp32) - _x(step), (gone, extra)
