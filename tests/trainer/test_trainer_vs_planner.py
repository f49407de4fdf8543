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


def predicted(spec, cfg: TrainConfig, knobs: dict, w_units: int, g_units: int) -> dict[str, float]:
    """The planner's bytes per rank for this run, less the gathered units in flight."""
    plan = ExecutionPlan(dp=cfg.plan.dp, seq_len=cfg.plan.seq_len, micro_batch=cfg.plan.micro_batch, precision=cfg.plan.precision,
                         sequence_parallel=cfg.plan.tp > 1, **{k: v for k, v in knobs.items() if k != "precision"})
    layout = Layout.from_plan(plan)
    system = System(gpu=load_catalog().gpus["h100-80gb"], gpus=2, gpus_per_node=2, host_ram_gib=24,
                    host_to_gpu_gbps=100, intranode_gbps=100, internode_gbps=100)
    unit = one(memory.compute_dtype_bytes(layout)) * one(memory._unit_params(spec, layout))
    act = one(memory.activation_bytes(spec, layout))
    if cfg.plan.activation_checkpointing == "full":
        act -= one(memory.layer_activation_bytes(spec, layout))  # the block rebuilt in backward
    return {
        "params": one(memory.weights_bytes(spec, layout, system)) - w_units * unit,
        "grads": one(memory.grads_bytes(spec, layout, system)) - g_units * unit,
        "optimizer": one(memory.optimizer_bytes(spec, layout, system)),
        "activations": act,
        "compute_dtype_bytes": one(memory.compute_dtype_bytes(layout)),
    }


def assert_matches(m, pred: dict, extra_activation_bytes: float = 0.0):
    measured = {"params": m.params_bytes, "grads": m.grads_bytes, "optimizer": m.optimizer_bytes}
    for k in measured:
        assert measured[k] == pytest.approx(pred[k], rel=0.02), (k, measured, pred)
    act = pred["activations"] + extra_activation_bytes
    assert m.saved_activations_bytes == pytest.approx(act, rel=0.10), (m.saved_activations_bytes, act)


@pytest.mark.parametrize("knobs, w_units, g_units", CASES, ids=lambda c: str(c))
def test_measured_bytes_match_planner(tmp_path, knobs, w_units, g_units):
    spec = resolve_model("tiny")
    cfg = TrainConfig(model="tiny", nproc=2, steps=3, warmup_steps=2, micro_batch=2, seq_len=64,
                      timeout_s=240, json_out=str(tmp_path / "r.json"), **knobs)
    r = launch(cfg)
    assert r.status == "ok", r.error
    assert_matches(r.memory, predicted(spec, cfg, knobs, w_units, g_units))


# Tensor and pipeline parallelism on 2 ranks: (model, knobs, gathered units as above)
PARALLEL_CASES = [
    ("tiny", dict(tp=2), 0, 0),
    ("tiny", dict(tp=2, sharding="fsdp_full_shard", precision="bf16"), 2, 1),
    ("tiny", dict(pp=2, grad_accum=2), 0, 0),  # 1F1B: the first stage holds 2 micro batches
    ("tiny4", dict(pp=2, vpp=2, grad_accum=4), 0, 0),  # interleaved: x (1 + (p-1)/(p*v))
]


@pytest.mark.parametrize("model, knobs, w_units, g_units", PARALLEL_CASES, ids=lambda c: str(c))
def test_tensor_and_pipeline_bytes_match_planner(tmp_path, model, knobs, w_units, g_units):
    """Rank 0 (first pipeline stage, tp rank 0) against the planner's busiest rank.

    Pipeline: the bytes saved for backward are the peak over a whole step (micro batches in
    flight), which is what the planner's pipeline term describes. Tensor parallelism with
    sequence parallelism: PyTorch's DTensor keeps the all-gathered norm output that the next
    column-parallel matmuls save (S*B*H per gather) where Megatron-LM (which the planner's
    Korthikanti terms follow) saves its S*B*H/t shard and gathers again in backward: that
    difference, (t-1)/t * S*B*H per all-gather (2 per block and the final norm), is added.
    """
    spec = resolve_model(model)
    cfg = TrainConfig(model=model, nproc=2, steps=3, warmup_steps=2, micro_batch=2, seq_len=64,
                      timeout_s=300, json_out=str(tmp_path / "r.json"), **knobs)
    r = launch(cfg)
    assert r.status == "ok", r.error
    pred = predicted(spec, cfg, knobs, w_units, g_units)
    extra = 0.0
    if cfg.plan.tp > 1:
        gathers = 2 * spec.n_layers / cfg.plan.pp + 1
        extra = gathers * cfg.plan.seq_len * cfg.plan.micro_batch * spec.hidden * pred["compute_dtype_bytes"] * (cfg.plan.tp - 1) / cfg.plan.tp
    assert_matches(r.memory, pred, extra)
    assert r.parallel.ranks[0].params_bytes == r.memory.params_bytes
