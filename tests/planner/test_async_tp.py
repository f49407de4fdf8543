"""Async TP as PyTorch's micro-pipelined fused matmul+collective pairs (planner/async_tp.py)."""
from types import SimpleNamespace

import numpy as np
import pytest

from planner import async_tp, flops
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance

L3_70B = resolve_model("llama3-70b")


def _layout(**kw):
    return SimpleNamespace(**{"micro_batch": 16, "seq_len": 8192, "cp": 1, "tp": 8, **kw})


def test_collectives_shorter_than_their_matmuls_hide_all_but_the_backward_reduce_scatters():
    """Without recompute 8 collectives per block, 6 fused (forward 4, backward all-gathers 2)."""
    raw = 1e-3  # tiny collectives: every adjacent matmul is longer
    out = async_tp.exposed_s(L3_70B, _layout(), raw, 10.0, 80.0, 0.0, 0.0, 1.0)
    assert out == pytest.approx(raw * 2.0 / 8.0)
    full = async_tp.exposed_s(L3_70B, _layout(), raw, 10.0, 80.0, 1.0, 0.0, 1.0)
    assert full == pytest.approx(raw * 2.0 / 12.0)  # + the recompute forward's 4, all fused
    half = async_tp.exposed_s(L3_70B, _layout(), raw, 10.0, 80.0, 0.0, 0.0, 0.5)
    assert half == pytest.approx(raw * (1.0 - 0.5 * 6.0 / 8.0))


def test_a_collective_hides_only_behind_its_own_matmul():
    """Matmuls far shorter than the collectives: what hides is at most the fused matmuls' time."""
    raw, gemm = 10.0, 0.1
    out = async_tp.exposed_s(L3_70B, _layout(), raw, gemm, 80.0, 0.0, 0.0, 1.0)
    fwd = gemm / 3.0
    shares = np.array([ft for ft, _ in flops.block_gemms(L3_70B, 1.0, 8)])
    shares = shares / shares.sum()
    hidden = fwd * (shares.sum() + shares[1] + shares[3])
    assert out == pytest.approx(raw - hidden)


def _torchtitan_tp(async_on: bool):
    plan = ExecutionPlan(stack="torchtitan", tp=8, dp=4, seq_len=8192, micro_batch=16, sequence_parallel=True,
                         sharding="fsdp_full_shard", activation_checkpointing="full", compile=True,
                         async_tp=async_on)
    system = resolve_system(Scenario(cluster="grand-teton-h100-96gb", gpus=32))
    perf = performance(L3_70B, Layout.from_plan(plan), system, Settings())
    return float(perf["tp_comm_s"][0])


def test_torchtitan_async_tp_hides_at_most_the_fused_share_of_its_tp_time():
    """Llama 3 70B, TP 8, full AC: at most 0.6 x 10/12 of the TP time hides (the old model hid 90%)."""
    vanilla, fused = _torchtitan_tp(False), _torchtitan_tp(True)
    assert fused >= vanilla * (1.0 - 0.6 * 10.0 / 12.0) - 1e-9
    assert fused < vanilla * 0.8
