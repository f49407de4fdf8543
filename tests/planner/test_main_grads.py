"""Megatron-Core's fp32 main-gradient buffer (hardware/stacks.py main_grads_fp32, planner/memory.py
grads_bytes): model-state bytes per parameter against Megatron-LM's own table
(docs/source/api-guide/dist_optimizer.md: fp16 params and grads 20 / 4 + 16/d, bf16 params with fp32
grads 18 / 6 + 12/d, without / with the distributed optimizer, d the data-parallel size)."""

import pytest

from planner import memory, memory_required, moe
from planner.layout import Layout
from planner.moe_memory import view_expert_params_per_gpu
from planner.resolve import resolve_model, resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings, stack_profiles
from planner.stacks import per_candidate
from validation.sanity_plans import catalog

_STACKS = catalog().stacks
# Megatron-Core's own distributed optimizer (the catalog's megatron profile keeps it off: NeMo 24.07's rows)
SETTINGS = Settings(stacks={**_STACKS, "megatron": _STACKS["megatron"].model_copy(update={"main_grads_fp32": True})})


def _states_per_param(stack, sharding, precision, dp=8, settings=SETTINGS):
    spec = resolve_model(Scenario(n_layers=8, hidden=1024, n_heads=16, ffn_hidden=4096, vocab=32000))
    system = resolve_system(Scenario(cluster="dgx-h100", gpus=dp))
    lay = Layout.from_plan(ExecutionPlan(tp=1, pp=1, dp=dp, micro_batch=1, grad_accum=1, seq_len=1024, stack=stack,
                                         sharding=sharding, precision=precision))
    mem = memory.memory_arrays(spec, lay, system, settings)
    states = sum(float(mem[k][0]) for k in ("weights_bytes", "grads_bytes", "optimizer_bytes"))
    return states / float(memory.params_per_gpu(spec, lay)[0]), mem, (spec, lay, system)


@pytest.mark.parametrize("dp", [2, 8, 64])
def test_megatron_bytes_per_parameter_follow_its_table(dp):
    assert _states_per_param("megatron", "zero1", "bf16", dp)[0] == pytest.approx(6 + 12 / dp)
    assert _states_per_param("megatron", "zero1", "fp16", dp)[0] == pytest.approx(4 + 16 / dp)
    assert _states_per_param("megatron", "none", "bf16", dp)[0] == pytest.approx(18)


def test_deepspeed_zero1_keeps_its_own_rule():
    """DeepSpeed ZeRO-1 (its estimator: 2P 16-bit grads + the 4P/N fp32 partition): 4 + 16/d, with its
    overlap_comm bucket buffers; the catalog's megatron profile (main_grads_fp32 off: bf16 grads) has the
    same states, but its buckets are views of Megatron-Core's contiguous grad buffer (no buffers)."""
    ds_per_param, ds_mem, _ = _states_per_param("megatron_deepspeed", "zero1", "bf16", 8)
    assert ds_per_param == pytest.approx(4 + 16 / 8)
    with_buffer = _states_per_param("megatron", "zero1", "bf16", 8)[1]
    per_param, catalog_mem, _ = _states_per_param("megatron", "zero1", "bf16", 8, Settings(stacks=_STACKS))
    assert per_param == pytest.approx(4 + 16 / 8)
    assert float(ds_mem["comm_buffers_bytes"][0]) > 0.0
    assert float(catalog_mem["comm_buffers_bytes"][0]) == 0.0 == float(with_buffer["comm_buffers_bytes"][0])


def test_the_buffer_is_resident_not_step_only():
    """The fp32 main grads accumulate through backward (not made at the optimizer step, as DeepSpeed's
    partition): nothing of them is released before the step."""
    _, mem, (spec, lay, system) = _states_per_param("megatron", "zero1", "bf16", 8)
    prof = per_candidate(stack_profiles(SETTINGS), lay)
    fp32, peak = memory_required.step_only_bytes(spec, lay, system, prof["main_grads_fp32"])
    assert float(fp32[0]) == 0.0 and float(peak[0]) == 0.0
    fp32_ds, _ = memory_required.step_only_bytes(spec, lay, system, False)
    assert float(fp32_ds[0]) > 0.0


def test_deepseek_v3_experts_and_dense_part():
    """DeepSeek-V3 on Megatron at the paper's layout (pp 16, ep 64, dp 128 ZeRO-1, fp8): the dense part
    (dp-sharded over 128) gains 2 - 4/128 bytes a parameter; the experts (sharded over edp = 128 / 64
    = 2) keep 2 + 4/2 = 4, the fp32 buffer's 4."""
    spec = resolve_model(Scenario(model="deepseek-v3"))
    system = resolve_system(Scenario(cluster="dgx-h100", gpus=2048))
    kw = dict(tp=1, pp=16, dp=128, ep=64, micro_batch=1, grad_accum=120, seq_len=4096, sharding="zero1",
              precision="fp8")
    got = {}
    for stack in ("megatron", "megatron_deepspeed"):
        lay = Layout.from_plan(ExecutionPlan(stack=stack, **kw))
        got[stack] = float(memory.memory_arrays(spec, lay, system, SETTINGS)["grads_bytes"][0])
    view = moe.dense_view(spec)
    lay = Layout.from_plan(ExecutionPlan(stack="megatron", **kw))
    dense = float(memory.params_per_gpu(view, lay)[0] - view_expert_params_per_gpu(spec, view, lay)[0])
    assert got["megatron"] - got["megatron_deepspeed"] == pytest.approx(dense * (2 - 4 / 128), rel=1e-6)
