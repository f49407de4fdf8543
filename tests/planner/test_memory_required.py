"""What must fit (planner/memory_required.py) against the reserved peak (memory.memory_arrays' sum).

The reserved peak keeps every freed buffer cached; short of memory the caching allocator flushes
its cache and retries (torch.cuda.memory_stats: num_alloc_retries), so a run fits while the bytes
alive at once fit: the optimizer step's fp32 gradient partition reuses the freed activations,
cached transients are given back. Golden rows: seed 002's HF + DeepSpeed ZeRO-3 52B runs on 32 GB
V100 and seed 003's ZeRO-3 BLOOM-7b1 run on 2 A100 that ran "at the limit" with cache-flush
warnings (shared/seeds/003).
"""

from pathlib import Path

import numpy as np
import pytest

from planner import memory, memory_required
from planner.layout import Layout
from planner.model import ModelSpec
from planner.runs import load_runs
from planner.scenario import ExecutionPlan
from planner.settings import Settings
from planner.validate import predict
from tests.planner.test_memory import system

DATA = Path(__file__).resolve().parents[2] / "validation" / "data"
GIB = 2**30
SPEC = ModelSpec(name="t", n_layers=24, hidden=2048, n_heads=16, vocab=50304, max_positions=2048)


def arrays(spec=SPEC, gpus=16, **knobs):
    plan = ExecutionPlan(dp=gpus, seq_len=2048, precision="bf16", stack="hf", **knobs)
    lay = Layout.from_plan(plan)
    return lay, memory.memory_arrays(spec, lay, system(gpus=gpus), Settings())


def one(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def test_step_fp32_partition_reuses_the_activations():
    # ZeRO-3, activations larger than the step's fp32 partition + its 16-bit source: what must fit
    # is the reserved peak less the fp32 partition and the cached transients
    lay, m = arrays(sharding="zero3", micro_batch=8, activation_checkpointing="none")
    fp32, step_peak = (one(v) for v in memory_required.step_only_bytes(SPEC, lay, system()))
    assert fp32 == pytest.approx(4 * SPEC.n_params / 16)
    assert step_peak == pytest.approx(6 * SPEC.n_params / 16)
    assert one(m["activations_bytes"]) > step_peak
    cached = one(m["fragmentation_bytes"]) - 0.03 * one(m["capacity_bytes"])
    logits_grad = 4.0 * 2048 * 8 * SPEC.vocab_padded  # alive with every saved activation (no recompute)
    expected = one(m["total_bytes"]) - fp32 - cached + logits_grad
    assert one(m["required_bytes"]) == pytest.approx(expected, rel=1e-9)


def test_the_step_peak_wins_when_activations_are_small():
    # 2 ranks, recompute, micro batch 1: the step's fp32 partition (+ the flattened 16-bit one it
    # is cast from) outweighs the activations and the gathered modules freed before the step
    lay, m = arrays(gpus=2, sharding="zero3", micro_batch=1, activation_checkpointing="full")
    _, step_peak = memory_required.step_only_bytes(SPEC, lay, system(gpus=2))
    backward = one(m["activations_bytes"]) + one(memory_required.gathered_bytes(SPEC, lay))
    assert one(step_peak) > backward
    assert one(m["required_bytes"]) < one(m["total_bytes"])
    resident = one(m["total_bytes"]) - 4 * SPEC.n_params / 2 - backward
    cached = one(m["fragmentation_bytes"]) - 0.03 * one(m["capacity_bytes"])
    assert one(m["required_bytes"]) == pytest.approx(resident - cached + one(step_peak), rel=1e-9)


@pytest.mark.parametrize("sharding", ["none", "fsdp_full_shard"])
def test_no_step_copy_without_deepspeed_partitions(sharding):
    lay, m = arrays(sharding=sharding, activation_checkpointing="full")
    fp32, peak = memory_required.step_only_bytes(SPEC, lay, system())
    assert one(fp32) == one(peak) == 0
    assert one(m["required_bytes"]) <= one(m["total_bytes"])


def test_fixed_margin_keeps_no_transient_to_give_back():
    lay = Layout.from_plan(ExecutionPlan(dp=16, seq_len=2048, precision="bf16", sharding="none", stack="hf",
                                         activation_checkpointing="none"))
    m = memory.memory_arrays(SPEC, lay, system(), Settings(fragmentation_margin=0.1))
    assert one(m["required_bytes"]) == pytest.approx(one(m["total_bytes"]))


@pytest.fixture(scope="module")
def seed_runs():
    return {r.id: r for r in load_runs(DATA / "seed_runs.csv")}


def test_run_at_the_limit_with_cache_flushes_fits(seed_runs):
    # s003-23: "VRAM hyper-limite: warnings de GPU cache flushing": above the reserved peak,
    # within the bytes alive at once
    p = predict(seed_runs["s003-23"], Settings())
    assert p.predicted_mem_gib > p.capacity_gib
    assert p.fits, p.verdict


@pytest.mark.parametrize("rid", ["s002-34", "s002-41", "s002-43", "s002-44"])
def test_seed002_zero3_runs_that_ran_fit_in_32_gb(seed_runs, rid):
    assert predict(seed_runs[rid], Settings()).fits


def test_rule_reads_what_must_fit():
    from planner import rules

    mem = {"total_bytes": 90.0 * GIB, "required_bytes": 79.0 * GIB, "capacity_bytes": 80.0 * GIB}
    assert not rules.BY_NAME["gpu_memory"].bad(rules.Knobs(mem=mem))
    mem["required_bytes"] = 81.0 * GIB
    assert rules.BY_NAME["gpu_memory"].bad(rules.Knobs(mem=mem))
    assert "reserved peak 90.0" in rules.BY_NAME["gpu_memory"].explain(rules.Knobs(mem=mem))


@pytest.mark.parametrize("micro_batch", [1, 8])
def test_loss_backward_and_rebuilt_block_are_not_alive_together(micro_batch):
    # one stage, full recompute: block inputs + max(the loss's backward, the rebuilt last block)
    lay, m = arrays(sharding="zero1", micro_batch=micro_batch, activation_checkpointing="full")
    sb = 2048 * micro_batch
    inputs = SPEC.n_layers * sb * SPEC.hidden * 2
    final = 2 * sb * SPEC.hidden * 2
    loss = 4.0 * sb * SPEC.vocab_padded * 2 + final  # saved fp32 log-probs + their fp32 gradient
    rebuilt = one(memory.layer_activation_bytes(SPEC, lay, 1.0))
    assert one(m["activations_bytes"]) == pytest.approx(inputs + rebuilt + loss - 4.0 * sb * SPEC.vocab_padded)
    from planner.settings import stack_profiles
    from planner.stacks import per_candidate

    prof = per_candidate(stack_profiles(Settings()), lay)
    logits_grad = 4.0 * sb * SPEC.vocab_padded
    live = memory_required.backward_live_bytes(SPEC, lay, m["activations_bytes"], logits_grad, prof)
    assert one(live) == pytest.approx(inputs + max(loss, rebuilt), rel=1e-9)
