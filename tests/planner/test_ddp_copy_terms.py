"""torch DDP's bucket copy of the gradients (planner/comm_buffers.py ddp_bucket_copy_bytes): counted where a stack
profile keeps torch's default gradient_as_bucket_view=False (catalog/stacks ddp_bucket_view = false: hf, generic, fsdp's
Composer DDP, torchtitan's replicate), in the dtype DDP reduces (fp32 gradients of an autocast model: 4 B a parameter;
pure bf16: 2 B), on plain data parallelism only; the measured bytes are tests/trainer/test_ddp_default_copy.py's."""

from __future__ import annotations

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import memory
from planner.layout import Layout
from planner.presets import resolve_model
from planner.scenario import ExecutionPlan
from planner.settings import Settings
from planner.system import System

SYSTEM = System(gpu=load_catalog().gpus["h100-80gb"], gpus=8, gpus_per_node=8, host_ram_gib=512,
                host_to_gpu_gbps=100, intranode_gbps=100, internode_gbps=100)


def _copy(model: str = "tiny", settings: Settings | None = None, **knobs) -> float:
    """comm_buffers_bytes beyond the staging buffers comm_buffer_bytes counts, in bytes a parameter."""
    spec = resolve_model(model)
    layout = Layout.from_plan(ExecutionPlan(**({"dp": 2, "seq_len": 64, "sharding": "none"} | knobs)))
    out = memory.memory_arrays(spec, layout, SYSTEM, settings or Settings())
    extra = out["comm_buffers_bytes"] - memory.comm_buffer_bytes(spec, layout)
    return float(np.asarray(extra).reshape(-1)[0]) / spec.n_params


@pytest.mark.parametrize("stack", ["hf", "generic", "fsdp", "torchtitan"])
def test_torch_ddp_with_its_default_holds_a_second_copy_of_the_gradients(stack):
    assert _copy(stack=stack, precision="bf16") == pytest.approx(4.0)  # autocast: fp32 grads, fp32 buckets
    assert _copy(stack=stack, precision="fp16") == pytest.approx(4.0)
    assert _copy(stack=stack, precision="fp32") == pytest.approx(4.0)
    assert _copy(stack=stack, precision="bf16_pure") == pytest.approx(2.0)  # bf16 params: bf16 grads and buckets


def test_only_plain_data_parallel_over_several_replicas_copies():
    assert _copy(stack="hf", dp=1) == 0.0  # one process: no DDP
    ulysses = {"cp": 2, "cp_impl": "ulysses", "seq_len": 4096}  # DeepSpeed's Ulysses (its all-to-all buffers): no DDP
    assert _copy(stack="hf", **ulysses) == pytest.approx(_copy(stack="bundled", **ulysses))
    for sharding in ("zero1", "zero2", "zero3", "fsdp_full_shard"):
        assert _copy(stack="hf", sharding=sharding) == 0.0
    # an fp32 main-gradient buffer (grad_reduce_dtype fp32 under bf16): its buckets are views of it
    assert _copy(stack="hf", precision="bf16", grad_reduce_dtype="fp32") == 0.0
    # generic under tensor parallelism: the data-parallel replicas' DDP copies the stage's gradients
    spec = resolve_model("7b")
    layout = Layout.from_plan(ExecutionPlan(dp=2, tp=2, seq_len=64, sharding="none", stack="generic", precision="bf16"))
    out = memory.memory_arrays(spec, layout, SYSTEM, Settings())
    copy = out["comm_buffers_bytes"] - memory.comm_buffer_bytes(spec, layout)
    assert float(copy[0]) == pytest.approx(float(out["grads_bytes"][0])) and float(copy[0]) > 0


def test_the_profile_fact_decides():
    # bucket views (the bundled trainer) and stacks without torch DDP (Megatron-Core, DeepSpeed's engine): no copy
    for stack in ("bundled", "megatron", "megatron_deepspeed"):
        for precision in ("bf16", "fp32", "bf16_pure"):
            assert _copy(stack=stack, precision=precision) <= 0.0
    stacks = load_catalog().stacks
    views = stacks | {"hf": stacks["hf"].model_copy(update={"ddp_bucket_view": True})}
    assert _copy(stack="hf", settings=Settings(stacks=views)) <= 0.0
    copies = stacks | {"bundled": stacks["bundled"].model_copy(update={"ddp_bucket_view": False})}
    assert _copy(stack="bundled", settings=Settings(stacks=copies)) == pytest.approx(4.0)


def test_an_moe_model_copies_its_experts_gradients_too():
    spec = resolve_model("mixtral-8x7b")
    layout = Layout.from_plan(ExecutionPlan(dp=2, seq_len=64, sharding="none", stack="hf", precision="bf16"))
    out = memory.memory_arrays(spec, layout, SYSTEM, Settings())
    views = memory.memory_arrays(spec, Layout.from_plan(ExecutionPlan(dp=2, seq_len=64, sharding="none",
                                                                      stack="bundled", precision="bf16")),
                                 SYSTEM, Settings())
    grads = float(out["grads_bytes"][0])  # the view's and the experts' fp32 gradients, ~4 B a parameter
    assert grads == pytest.approx(4.0 * spec.n_params, rel=1e-3)
    assert float(out["comm_buffers_bytes"][0] - views["comm_buffers_bytes"][0]) == pytest.approx(grads)
