import json
from dataclasses import fields

import numpy as np
import pytest

from planner.errors import PlanError
from planner.layout import Layout
from planner.network import load_network
from planner.stage_split import SPLIT_KNOBS
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Performance, Scenario, StepTimeBreakdown
from planner.settings import Calibration, Settings
from planner.search import simplicity
from planner.throughput import at, performance

BLOOM = resolve_model("bloom-7b1")


def _system(gpus, cluster="jean-zay-a100", **kw):
    return resolve_system(Scenario(cluster=cluster, gpus=gpus)).model_copy(update=kw)


def _perf(plan_kw, gpus=8, settings=Settings(), spec=BLOOM, **sys_kw):
    plan = ExecutionPlan(**{"dp": gpus, "seq_len": 1024, **plan_kw})
    return {k: np.asarray(v)[0] for k, v in performance(spec, Layout.from_plan(plan), _system(gpus, **sys_kw), settings).items()}


def test_seed003_shape_on_a_slow_internode_network():
    """bloom-7b1 ZeRO-1: 8 -> 16 A100 without accumulation gets slower; with accumulation 256,
    16 -> 48 GPUs scales ~linearly (seed 003: 258 days -> '2x slower'; 57 -> 19 days)."""
    slow = dict(measured_internode_busbw_gbps=100.0)
    tok = Settings(tokens=1e11)
    d8 = _perf(dict(sharding="zero1", micro_batch=1), 8, tok, **slow)["days"]
    d16 = _perf(dict(sharding="zero1", micro_batch=2), 16, tok, **slow)
    assert d16["days"] > d8
    assert d16["bottleneck"] == "network"
    ga16 = _perf(dict(sharding="zero1", micro_batch=2, grad_accum=256), 16, tok, **slow)
    ga48 = _perf(dict(sharding="zero1", micro_batch=2, grad_accum=256), 48, tok, **slow)
    assert ga16["days"] / ga48["days"] == pytest.approx(3.0, rel=0.05)
    assert ga16["bottleneck"] == "compute"


def test_gradient_accumulation_amortises_the_exchange():
    one = _perf(dict(sharding="none", micro_batch=2), 16)
    many = _perf(dict(sharding="none", micro_batch=2, grad_accum=64), 16)
    assert many["comm_exposed_s"] / 64 < one["comm_exposed_s"] / 10
    assert many["tokens_per_s"] > one["tokens_per_s"]


def test_checkpointing_costs_a_recomputed_forward_and_hfu_counts_it():
    none = _perf(dict(sharding="zero1", micro_batch=2, grad_accum=8))
    full = _perf(dict(sharding="zero1", micro_batch=2, grad_accum=8, activation_checkpointing="full"))
    sel = _perf(dict(sharding="zero1", micro_batch=2, grad_accum=8, activation_checkpointing="selective"))
    assert full["compute_s"] / none["compute_s"] == pytest.approx(4 / 3, rel=0.05)
    assert none["compute_s"] < sel["compute_s"] < full["compute_s"]
    assert full["hfu"] > full["mfu"] and none["hfu"] == pytest.approx(none["mfu"])
    assert 0.2 < none["mfu"] < 0.8


def test_pipeline_bubble_is_p_minus_1_over_m_v():
    spec = resolve_model("llama2-13b")
    kw = dict(tp=2, pp=4, dp=1, micro_batch=1, seq_len=2048)
    for ga, vpp in ((8, 1), (16, 1), (8, 2)):
        p = _perf({**kw, "grad_accum": ga, "vpp": vpp}, gpus=8, spec=spec, cluster="dgx-a100")
        # the bubble is (p-1)/(m v) of the busy time (compute minus optimizer + tp/pp sends), less
        # where the last stage, which also runs the output layer, is the slowest (pipeline_stages.py)
        busy = p["step_time_s"] - p["bubble_s"] - p["optimizer_s"] - p["dp_comm_s"] - p["offload_s"]
        assert p["bubble_s"] / busy == pytest.approx(3 / (ga * vpp) * p["bubble_stage_factor"], rel=0.02)
        assert 0.9 < p["bubble_stage_factor"] < 1.0  # 10 blocks a stage; the output layer is ~half a block
    assert _perf({**kw, "pp": 1, "dp": 4, "grad_accum": 8}, gpus=8, spec=spec, cluster="dgx-a100")["bubble_s"] == 0


def test_offload_pays_the_host_link_and_cpu_adam():
    base = dict(sharding="zero2", micro_batch=2, grad_accum=1)
    no = _perf(base)
    off = _perf({**base, "offload": "optimizer"})
    slow = _perf({**base, "offload": "optimizer+params"}, host_to_gpu_gbps=8.0)
    assert no["offload_s"] == 0 < off["offload_s"] < slow["offload_s"]
    assert slow["bottleneck"] == "offload"


def test_time_to_train_gpu_hours_and_cost():
    p = _perf(dict(sharding="zero1", micro_batch=2, grad_accum=4), settings=Settings(tokens=1e11, price_per_gpu_hour=2.0))
    assert p["days"] == pytest.approx(1e11 / p["tokens_per_s"] / 86400)
    assert p["gpu_hours"] == pytest.approx(p["days"] * 24 * 8)
    assert p["cost"] == pytest.approx(2.0 * p["gpu_hours"])
    assert np.isnan(_perf(dict(), settings=Settings(tokens=1e11))["cost"])
    assert "days" not in _perf(dict())


def test_measured_busbw_starves_a_two_node_plan():
    two = _perf(dict(sharding="zero3", micro_batch=1), 16)
    starved = _perf(dict(sharding="zero3", micro_batch=1), 16, measured_internode_busbw_gbps=5.0)
    assert starved["bottleneck"] == "network" and starved["tokens_per_s"] < two["tokens_per_s"]


def test_calibration_compute_scales_compute_time():
    """Calibration.compute scales the GPU's achievable throughput: the GPU's parts of the compute time go as
    1 / compute, the host's fixed times (the stack's step_overhead_s, per-layer and per-unit framework overheads,
    launch syncs) stay: compute_s = fixed + gpu / compute, so each halving adds twice what the previous one did."""
    plan = dict(sharding="zero1", micro_batch=2)
    c1, c05, c025 = (_perf(plan, settings=Settings(calibration=Calibration(compute=k)))["compute_s"]
                     for k in (1.0, 0.5, 0.25))
    gpu = c05 - c1
    assert c025 - c05 == pytest.approx(2 * gpu)
    assert 0.8 * c1 < gpu < c1  # the GPU's work is most of it, the host's fixed times the rest


def _many_plans(n: int) -> Layout:
    rng = np.random.default_rng(0)
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4], n)
    cp = rng.choice([1, 2], n)
    cols = dict(stack=rng.integers(0, 6, n), tp=tp, pp=pp, vpp=rng.choice([1, 2], n), cp=cp, cp_impl=rng.integers(0, 4, n),
                dp=np.maximum(np.full(n, 64) // (tp * pp * cp), 1),
                checkpoint_fraction=rng.choice([0.5, 1.0], n), compile=rng.integers(0, 2, n),
                async_tp=rng.integers(0, 2, n), activation_offload=rng.integers(0, 2, n),
                sequence_parallel=rng.integers(0, 2, n), sharding=rng.integers(0, 7, n),
                offload=rng.integers(0, 3, n), activation_checkpointing=rng.integers(0, 5, n),
                precision=rng.choice([2, 4], n), fp8_recipe=rng.integers(0, 3, n), optimizer=rng.integers(0, 3, n),
                grad_reduce_dtype=rng.integers(0, 3, n),
                attention=rng.integers(0, 2, n), zeropp_qwz=rng.integers(0, 2, n),
                zeropp_hpz_partition_size=rng.choice([1, 8], n), zeropp_qgz=rng.integers(0, 2, n),
                micro_batch=rng.choice([1, 2, 4, 8], n), grad_accum=rng.choice([1, 4, 16], n),
                seq_len=np.full(n, 2048), reduce_bucket_elems=np.full(n, 2**24),
                allgather_bucket_elems=np.full(n, 2**24), stage3_prefetch_elems=np.full(n, 2**23),
                stage3_max_live_params=np.full(n, 10**9), ep=np.ones(n), etp=np.ones(n),
                **{k: np.zeros(n) for k in SPLIT_KNOBS})
    return Layout(**{f.name: np.asarray(cols[f.name], dtype=np.float64 if f.name == "checkpoint_fraction" else np.int64)
                     for f in fields(Layout)})


def test_vectorised_matches_one_by_one_and_keys():
    lay = _many_plans(50)
    system = _system(64, cluster="dgx-a100")
    spec = resolve_model("llama2-7b")
    settings = Settings(tokens=1e11, price_per_gpu_hour=1.0)
    allp = performance(spec, lay, system, settings)
    keys = {"step_time_s", "compute_s", "comm_exposed_s", "bubble_s", "offload_s", "bottleneck", "tokens_per_s",
            "tokens_per_s_per_gpu", "samples_per_s", "model_tflops_per_gpu", "hw_tflops_per_gpu", "mfu", "hfu",
            "dp_comm_s", "tp_comm_s", "cp_comm_s", "pp_comm_s", "days", "gpu_hours", "cost"}
    assert keys <= set(allp) and all(len(allp[k]) == 50 for k in keys)
    assert set(allp["bottleneck"]) <= {"compute", "network", "bubble", "offload"}
    for i in (0, 17, 49):
        one = performance(spec, lay.take(np.array([i])), system, settings)
        for k in keys - {"bottleneck"}:
            assert one[k][0] == pytest.approx(allp[k][i]), k
    assert np.all(np.isfinite(allp["step_time_s"])) and np.all(allp["step_time_s"] > 0)
    t, p = at(allp, 3)
    assert isinstance(t, StepTimeBreakdown) and isinstance(p, Performance) and p.days > 0


def test_simplicity_rank_prefers_plain_setups():
    plans = [ExecutionPlan(), ExecutionPlan(sharding="zero1"), ExecutionPlan(sharding="zero3"),
             ExecutionPlan(sharding="zero3", activation_checkpointing="full"),
             ExecutionPlan(sharding="zero3", offload="optimizer"), ExecutionPlan(tp=2)]
    r = simplicity(Layout.from_plans(plans))
    assert r[0] < r[1] < r[2] < r[3] < r[4]
    assert r[0] < r[5] < r[2]


def test_load_network(tmp_path):
    good = tmp_path / "net.json"
    good.write_text(json.dumps({"busbw_gbps": {"intranode": 1800.5, "internode": None}, "sizes": []}))
    assert load_network(good) == {"intranode_busbw_gbps": 1800.5, "internode_busbw_gbps": None}
    for bad in ({"busbw_gbps": {"intranode": -1}}, {"x": 1}, {"busbw_gbps": {}}, {"busbw_gbps": {"internode": "fast"}}):
        good.write_text(json.dumps(bad))
        with pytest.raises(PlanError, match="network_from"):
            load_network(good)
    good.write_text("{not json")
    with pytest.raises(PlanError, match="not JSON"):
        load_network(good)
    with pytest.raises(PlanError, match="not found"):
        load_network(tmp_path / "missing.json")
