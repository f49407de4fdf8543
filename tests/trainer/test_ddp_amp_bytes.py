"""torch DDP under autocast (the bundled trainer's sharding none, bf16/fp16) holds fp32 parameters and fp32 gradients
(each gradient has its parameter's dtype) and no separate master copy: the planner's memory terms (planner/main_grads.py
amp_ddp) say so, and agree with the 4 bytes a gradient planner/dp_comm.py all-reduces. Measured on 2 real CPU ranks
(gloo) against memory.memory_arrays as the search calls it (the bundled stack profile)."""

from __future__ import annotations

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import dp_comm, memory
from planner.layout import Layout
from planner.presets import resolve_model
from planner.scenario import ExecutionPlan
from planner.settings import Settings
from planner.system import System
from trainer.config import TrainConfig
from trainer.launch import launch


def _terms(plan: ExecutionPlan) -> dict[str, float]:
    system = System(gpu=load_catalog().gpus["h100-80gb"], gpus=2, gpus_per_node=2, host_ram_gib=24,
                    host_to_gpu_gbps=100, intranode_gbps=100, internode_gbps=100)
    out = memory.memory_arrays(resolve_model("tiny"), Layout.from_plan(plan), system, Settings())
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in out.items()}


@pytest.mark.parametrize("stack", ["bundled", "hf", "fsdp", "torchtitan"])
def test_torch_ddp_under_amp_counts_fp32_params_and_grads_and_no_master(stack):
    spec = resolve_model("tiny")
    amp = _terms(ExecutionPlan(dp=2, seq_len=64, stack=stack, sharding="none", precision="bf16"))
    p = spec.n_params
    assert amp["weights_bytes"] == pytest.approx(4.0 * p) and amp["grads_bytes"] == pytest.approx(4.0 * p)
    assert amp["optimizer_bytes"] == pytest.approx(8.0 * p)  # AdamW's two fp32 moments; the params are the master
    # the wire: 4 bytes a gradient, the dtype the memory holds them in
    assert float(dp_comm.grad_bytes(Layout.from_plan(ExecutionPlan(dp=2, stack=stack, sharding="none")))[0]) == 4.0
    # Megatron-Core's DDP keeps its own layout: bf16 params, the fp32 grad buffer its fp32 all-reduce fills
    # (main_grads.resident_fp32; dist_optimizer.md "bf16 parameters, fp32 gradients: 18"), an fp32 master in the optimizer
    core = _terms(ExecutionPlan(dp=2, seq_len=64, stack="megatron", sharding="none", precision="bf16"))
    assert (core["weights_bytes"], core["grads_bytes"], core["optimizer_bytes"]) == pytest.approx((2.0 * p, 4.0 * p, 12.0 * p))
    assert sum(amp[k] for k in ("weights_bytes", "grads_bytes", "optimizer_bytes")) == pytest.approx(16.0 * p)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_bundled_ddp_run_holds_what_the_planner_counts(tmp_path, precision):
    cfg = TrainConfig(model="tiny", nproc=2, steps=3, warmup_steps=2, micro_batch=2, seq_len=64, sharding="none",
                      precision=precision, timeout_s=240, json_out=str(tmp_path / "r.json"))
    r = launch(cfg)
    assert r.status == "ok", r.error
    pred = _terms(ExecutionPlan(dp=2, seq_len=64, micro_batch=2, stack="bundled", sharding="none", precision=precision))
    measured = {"weights_bytes": r.memory.params_bytes, "grads_bytes": r.memory.grads_bytes,
                "optimizer_bytes": r.memory.optimizer_bytes}
    for k, v in measured.items():
        assert v == pytest.approx(pred[k], rel=0.02), (k, measured, pred)
