"""Which stacks run a mixture-of-experts model under ZeRO-3, and how torchtitan shards its experts with ep > 1.

- DeepSpeed refuses ZeRO-3 only with its own MoE layer (deepspeed/runtime/engine.py
  _validate_zero3_moe_compatibility): Megatron-DeepSpeed's. Hugging Face MoE blocks (plain modules, a ZeRO-3 leaf
  module) run: `plan estimate --stack hf --sharding zero3` ranks plans.
- torchtitan with ep > 1 (torchtitan/models/llama4/infra/parallelize.py apply_fsdp): each MoE layer's routed experts
  are an FSDP unit of their own over the expert mesh (efsdp = dp_shard x cp x tp / (etp x ep)), so a MoE layer is
  two units and its experts' gathers and reduce-scatter run one call per layer over that group.
"""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from hardware.catalog import load_catalog
from plan_cli.main import app
from planner import comm, dp_comm, moe, moe_parallel, shard_units
from planner.layout import Layout
from planner.memory import compute_dtype_bytes
from planner.moe_memory import expert_params_per_gpu
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance

CATALOG = load_catalog()
SYSTEM = resolve_system(Scenario(gpu="h100-80gb", gpus=64), CATALOG)
SETTINGS = Settings(stacks=CATALOG.stacks)
MIXTRAL = resolve_model("mixtral-8x7b")
MIXTRAL_CLI = ["--model", "mixtral-8x7b", "--gpu", "h100-80gb", "--gpus", "64", "--seq-len", "4096",
               "--global-batch", "512"]


def test_hf_zero3_mixtral_ranks_plans():
    r = CliRunner().invoke(app, ["estimate", *MIXTRAL_CLI, "--stack", "hf", "--sharding", "zero3", "--json"])
    assert r.exit_code == 0, r.output
    plans = json.loads(r.output)["results"]
    assert plans and all(p["plan"]["sharding"] == "zero3" and p["plan"]["stack"] == "hf" for p in plans)


def test_megatron_deepspeed_zero3_moe_is_still_refused_in_one_line():
    r = CliRunner().invoke(app, ["estimate", *MIXTRAL_CLI, "--stack", "megatron_deepspeed", "--sharding", "zero3"])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: sharding:")
    assert "Native DeepSpeed MoE is not supported with ZeRO Stage 3" in lines[0]


def _titan(ep: int, **kw) -> Layout:
    base = dict(dp=64, ep=ep, seq_len=4096, micro_batch=1, grad_accum=2, sharding="fsdp_full_shard",
                stack="torchtitan", activation_checkpointing="full")
    return Layout.from_plan(ExecutionPlan(**{**base, **kw}))


def _x(a) -> float:
    return float(np.asarray(a, dtype=np.float64).reshape(-1)[0])


def _perf(spec, lay):
    out = performance(spec, lay, SYSTEM, SETTINGS, fit_columns=True)
    return {k: _x(out[k]) for k in ("raw_unit_overhead_s", "moe_expert_grad_s", "tokens_per_s")}


@pytest.mark.parametrize("preset, moe_share", [("mixtral-8x7b", 1.0), ("llama4-maverick", 0.5)])
@pytest.mark.parametrize("ep", [2, 4])
def test_torchtitan_ep_adds_one_fsdp_unit_per_moe_layer(preset, moe_share, ep):
    spec = resolve_model(preset)
    assert moe.n_moe_layers(spec) / spec.n_layers == moe_share
    one = _perf(spec, _titan(1))["raw_unit_overhead_s"]  # ep 1: the experts are in the block's unit
    got = _perf(spec, _titan(ep))["raw_unit_overhead_s"]
    assert got == pytest.approx(one * (1.0 + moe_share))
    # the plain FSDP stack has no expert units (and no ep), torchtitan's DDP no units at all
    assert _x(shard_units.expert_units(_titan(ep, stack="fsdp"), 32.0)) == 0.0
    assert _x(shard_units.expert_units(_titan(ep, sharding="none"), 32.0)) == 0.0


@pytest.mark.parametrize("ep", [2, 4])
def test_torchtitan_expert_collectives_are_per_layer_calls_over_the_expert_mesh(ep):
    """Per micro batch: two gathers and one reduce-scatter of every local expert, one call per MoE layer, over
    efsdp = 64 / ep ranks (8 per node), less what the view's dp group already charged for the top-k share."""
    from planner.moe_memory import view_expert_params_per_gpu
    from planner.moe_time import _grad_collective_s

    lay = _titan(ep)
    view = moe.dense_view(MIXTRAL)
    efsdp = 64 / ep
    assert _x(moe_parallel.edp(lay)) == efsdp
    links = comm.Links.of(SYSTEM, SETTINGS)
    g = comm.Group.of(links, np.float64(efsdp), np.float64(8.0 / ep))
    p_e = _x(expert_params_per_gpu(MIXTRAL, view, lay))
    # torchtitan reduce-scatters in fp32 (mixed_precision_reduce "float32"), its experts as its dense gradients
    gbytes = 4.0
    assert _x(dp_comm.grad_bytes(lay, None, np.asarray([1.0]))) == gbytes
    layers = 32.0
    per_micro = 2 * g.allgather_s(p_e * _x(compute_dtype_bytes(lay)), layers) + g.allgather_s(p_e * gbytes, layers)
    in_view = _grad_collective_s(links, np.float64(64.0), lay.tp, view_expert_params_per_gpu(MIXTRAL, view, lay),
                                 gbytes, lay)
    prof = CATALOG.stacks["torchtitan"]
    expected = (lay.grad_accum[0] * _x(per_micro) - _x(in_view)) * prof.comm_time_factor
    assert _perf(MIXTRAL, lay)["moe_expert_grad_s"] == pytest.approx(expected, rel=1e-9)
