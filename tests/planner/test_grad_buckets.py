"""Bucketed gradient reduction overlapped with backward as a pipeline, and Megatron-Core's buckets
(planner/grad_buckets.py, planner/dp_comm.py, planner/megatron_ddp.py)."""

from pathlib import Path

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import grad_buckets, megatron_ddp
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.runs import load_runs
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"
COMM = np.linspace(0.0, 2.0, 21)
HIDE = np.linspace(0.0, 3.0, 31)


@pytest.mark.parametrize("buckets", [1, 2, 8, 40, 400])
@pytest.mark.parametrize("last", [0.0, 0.05, 0.3, 1.0])
def test_exposure_is_between_the_last_bucket_and_all_of_it(buckets, last):
    c, h = np.meshgrid(COMM, HIDE)
    e = grad_buckets.pipelined_s(c, h, buckets, last)
    assert np.all(e >= 0.0)
    assert np.all(e >= c * last - 1e-15)  # the last bucket has no backward left beside it
    assert np.all(e <= c + 1e-15)


@pytest.mark.parametrize("buckets", [1, 3, 40])
def test_more_backward_never_exposes_more_and_never_makes_the_step_shorter(buckets):
    """d(exposure)/d(hide) is in [-1, 0]: hiding compute is compute, so backward + exposure never falls."""
    for c in COMM:
        e = grad_buckets.pipelined_s(c, HIDE, buckets, 0.1)
        assert np.all(np.diff(e) <= 1e-15)
        assert np.all(np.diff(HIDE + e) >= -1e-15)


def test_one_bucket_waits_for_the_whole_backward():
    """A single bucket is ready only when backward ends: nothing hides it (Megatron's local DDP, a
    non-overlapped Megatron-Core DDP)."""
    assert grad_buckets.pipelined_s(0.5, 10.0, 1, 0.0) == pytest.approx(0.5)


def test_the_first_bucket_s_share_of_backward_hides_nothing():
    # 4 buckets: the communication starts after 1/4 of a 0.4 s backward, 0.3 s of it left beside 0.5 s of comm
    assert grad_buckets.pipelined_s(0.5, 0.4, 4, 0.0) == pytest.approx(0.2)
    # enough backward: the last bucket's 30% only
    assert grad_buckets.pipelined_s(0.5, 4.0, 4, 0.3) == pytest.approx(0.15)


def test_megatron_bucket_rule():
    """max(40M, 1M x dp) parameters (megatron/core/distributed/distributed_data_parallel.py), as a profile
    can state it."""
    prof = {"grad_bucket_params": 40e6, "grad_bucket_params_per_rank": 1e6}
    assert grad_buckets.count(1.7e9, 4e6, 8, prof) == 43  # 40M buckets, not the plan's 4M knob
    assert grad_buckets.count(1.7e9, 4e6, 48, prof) == 36  # 48M at dp 48
    assert grad_buckets.count(10e6, 4e6, 48, prof) == 1
    off = {"grad_bucket_params": 0.0, "grad_bucket_params_per_rank": 0.0}
    assert grad_buckets.count(1.7e9, 4e6, 48, off) == 425  # the plan's knob


def test_megatron_profile_states_its_buckets():
    stacks = load_catalog().stacks
    assert stacks["megatron"].grad_bucket_params == grad_buckets.MEGATRON_BUCKET_PARAMS
    # with the dp term: planner/comm.py charges a ring its n - 1 latency steps
    assert stacks["megatron"].grad_bucket_params_per_rank == grad_buckets.MEGATRON_BUCKET_PARAMS_PER_RANK
    for other in ("fsdp", "hf", "megatron_deepspeed", "torchtitan", "generic"):
        assert stacks[other].grad_bucket_params == 0.0


def _perf(stack, sharding, core_buckets, gpus=48, update=None):
    stacks = load_catalog().stacks
    if update:
        stacks = {**stacks, stack: stacks[stack].model_copy(update=update)}
    plan = ExecutionPlan(stack=stack, tp=1, pp=1, dp=gpus, micro_batch=1, grad_accum=4, sharding=sharding,
                         activation_checkpointing="selective", precision="bf16", seq_len=4096,
                         reduce_bucket_elems=2048 ** 2, allgather_bucket_elems=2048 ** 2)
    system = resolve_system(Scenario(cluster="dgx-h100", gpus=gpus)).model_copy(
        update={"megatron_core_buckets": core_buckets})
    perf = performance(resolve_model("llama3-8b"), Layout.from_plan(plan), system, Settings(stacks=stacks))
    return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in perf.items() if k != "bottleneck"}


def test_a_core_run_keeps_its_buckets_on_any_profile():
    """Under `generic` (no bucket rule of its own) a run stated with --overlap-grad-reduce still reduces in
    Megatron-Core's 40M-parameter buckets: fewer collectives, less latency than hidden^2 (4M) buckets."""
    tiny, core = _perf("generic", "zero1", False), _perf("generic", "zero1", True)
    assert core["raw_dp_comm_s"] < tiny["raw_dp_comm_s"]
    assert core["step_time_s"] < tiny["step_time_s"]
    own = _perf("megatron", "zero1", False)
    assert own["raw_dp_comm_s"] == pytest.approx(_perf("megatron", "zero1", True)["raw_dp_comm_s"])


@pytest.mark.parametrize("sharding", ["none", "zero1"])
def test_more_compute_never_shortens_a_megatron_step(sharding):
    """Slower GEMMs add backward beside the bucketed reduce: with the comm factor at most 1 / overlap (the
    fitted megatron value is ~0.5) the step never gets shorter."""
    for k in (0.5, 1.0):
        steps = [_perf("megatron", sharding, True, update={"comm_time_factor": k, "gemm_time_factor": f})
                 ["step_time_s"] for f in (0.5, 0.75, 1.0, 1.5, 2.0, 3.0)]
        assert np.all(np.diff(steps) > 0), (k, steps)


def test_rows_read_overlap_grad_reduce():
    notes: list[str] = []
    assert megatron_ddp.core_buckets_of({"notes": "end-to-end; --overlap-grad-reduce --overlap-param-gather"}, notes)
    assert notes
    assert not megatron_ddp.core_buckets_of({"notes": "DDP-impl torch"}, [])
    runs = {r.id: r for r in load_runs(DATA / "published_dev.csv")}
    assert runs["megatron_core_h100_004"].system.megatron_core_buckets
    assert not runs["megatron_sc21_001"].system.megatron_core_buckets


def test_local_ddp_reduces_its_contiguous_buffer_in_one_call():
    prof = {"overlap_ddp": np.array([0.9]), "grad_bucket_params": np.array([0.0]),
            "grad_bucket_params_per_rank": np.array([0.0])}
    local = megatron_ddp.with_ddp_overlap(prof, True)
    assert local["overlap_ddp"][0] == 0.0
    assert grad_buckets.count(2e9, 4e6, 64, local)[0] == 1
    assert grad_buckets.count(2e9, 4e6, 64, megatron_ddp.with_ddp_overlap(prof, False))[0] == 500


@pytest.mark.parametrize("row, precision, wire", [
    ({"framework": "Megatron-LM (2020)", "notes": ""}, "fp16", 2.0),  # --fp32-allreduce off by default
    ({"framework": "Megatron-LM", "notes": "DDP-impl local"}, "fp16", 2.0),
    ({"framework": "Megatron-LM", "notes": "--fp32-allreduce"}, "fp16", None),
    ({"framework": "Megatron-LM", "notes": "--accumulate-allreduce-grads-in-fp32"}, "fp16", None),
    ({"framework": "Megatron-LM", "notes": ""}, "bf16", None),
    ({"framework": "Megatron-DeepSpeed", "notes": ""}, "fp16", None),
    ({"framework": "NeMo 24.07 (Megatron-Core)", "notes": ""}, "fp16", None),
    ({"framework": "PyTorch FSDP", "notes": ""}, "fp16", None),
])
def test_megatron_fp16_gradients_travel_in_fp16(row, precision, wire):
    notes: list[str] = []
    assert megatron_ddp.reduce_bytes_of(row, precision, notes) == wire
    assert bool(notes) is (wire is not None)


def test_fp16_reduce_halves_the_megatron_all_reduce():
    plan = ExecutionPlan(stack="megatron", tp=1, pp=1, dp=32, micro_batch=4, grad_accum=1,
                         activation_checkpointing="full", precision="fp16", seq_len=2048)
    base = resolve_system(Scenario(cluster="dgx-a100", gpus=32)).model_copy(update={"ddp_after_backward": True})
    out = []
    for wire in (None, 2.0):
        system = base.model_copy(update={"grad_reduce_bytes": wire})
        perf = performance(resolve_model("gpt2-7.5b"), Layout.from_plan(plan), system, Settings())
        out.append(float(np.asarray(perf["raw_dp_comm_s"]).reshape(-1)[0]))
    # one call's latency aside, the whole all-reduce (after backward, one bucket) halves
    assert out[1] == pytest.approx(out[0] / 2, rel=1e-3)
    runs = {r.id: r for r in load_runs(DATA / "published_dev.csv")}
    assert runs["megatron_2020_012"].system.grad_reduce_bytes == 2.0
    assert runs["megatron_core_h100_004"].system.grad_reduce_bytes is None
