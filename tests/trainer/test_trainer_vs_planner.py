"""Measured bytes of real 2-rank CPU runs against planner/memory.py's prediction.

The trainer measures at a quiescent point of a step (after the last backward, before the
optimizer step; ZeRO-1 just before its gradient reduce), so it sees the resident shards.
The planner's ZeRO-3/FSDP terms add the gathered modules in flight (a peak, not resident):
those unit terms are taken off the prediction here, using the planner's own unit size.
Activations: saved-tensor hooks over one micro batch forward; with full recompute the planner
also counts the one block rebuilt during backward, which a forward cannot see.
"""

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import memory
from planner.layout import Layout
from planner.presets import resolve_model
from planner.scenario import ExecutionPlan
from planner.system import System
from trainer.config import TrainConfig
from trainer.launch import launch

pytestmark = pytest.mark.slow

# (knobs, gathered units in flight the planner adds to weights / grads)
CASES = [
    (dict(sharding="zero1"), 0, 0),
    (dict(sharding="zero2", activation_checkpointing="full"), 0, 0),
    (dict(sharding="zero2", activation_checkpointing="selective", attention="eager"), 0, 0),
    (dict(sharding="zero3", attention="eager"), 1, 1),
    (dict(sharding="fsdp_full_shard", activation_checkpointing="full"), 2, 1),
    (dict(sharding="fsdp_full_shard", precision="bf16"), 2, 1),
]


def one(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


@pytest.mark.parametrize("knobs, w_units, g_units", CASES, ids=lambda c: str(c))
def test_measured_bytes_match_planner(tmp_path, knobs, w_units, g_units):
    spec = resolve_model("tiny")
    cfg = TrainConfig(model="tiny", nproc=2, steps=3, warmup_steps=2, micro_batch=2, seq_len=64,
                      timeout_s=240, json_out=str(tmp_path / "r.json"), **knobs)
    r = launch(cfg)
    assert r.status == "ok", r.error
    m = r.memory
    plan = ExecutionPlan(dp=2, seq_len=64, micro_batch=2, precision=cfg.precision,
                         **{k: v for k, v in knobs.items() if k != "precision"})
    layout = Layout.from_plan(plan)
    system = System(gpu=load_catalog().gpus["h100-80gb"], gpus=2, gpus_per_node=2, host_ram_gib=24,
                    host_to_gpu_gbps=100, intranode_gbps=100, internode_gbps=100)
    unit = one(memory.compute_dtype_bytes(layout)) * one(memory._unit_params(spec, layout))
    predicted = {
        "params": one(memory.weights_bytes(spec, layout, system)) - w_units * unit,
        "grads": one(memory.grads_bytes(spec, layout, system)) - g_units * unit,
        "optimizer": one(memory.optimizer_bytes(spec, layout, system)),
    }
    measured = {"params": m.params_bytes, "grads": m.grads_bytes, "optimizer": m.optimizer_bytes}
    for k in predicted:
        assert measured[k] == pytest.approx(predicted[k], rel=0.02), (k, measured, predicted)
    act = one(memory.activation_bytes(spec, layout))
    if cfg.activation_checkpointing == "full":
        act -= one(memory.layer_activation_bytes(spec, layout))  # the block rebuilt in backward
    assert m.saved_activations_bytes == pytest.approx(act, rel=0.10), (m.saved_activations_bytes, act)
