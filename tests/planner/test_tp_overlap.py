"""Transformer Engine userbuffers TP overlap (Megatron-Core --tp-comm-overlap): planner/tp_overlap.py."""
from types import SimpleNamespace

import numpy as np
import pytest

from planner import tp_overlap
from planner.layout import Layout
from planner.presets import resolve_model
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from planner.throughput import performance

L3_70B = resolve_model("llama3-70b")
GRID = np.linspace(0.0, 4.0, 41)


@pytest.mark.parametrize("method", [tp_overlap.RING, tp_overlap.PIPELINE, tp_overlap.BULK])
def test_pair_exposed_is_monotone_in_comm_and_gemm_and_within_bounds(method):
    c, g = np.meshgrid(GRID, GRID, indexing="ij")
    out = tp_overlap.pair_exposed_s(c, g, method, 8)
    assert np.all(np.diff(out, axis=0) >= -1e-12)  # more communication never exposes less
    assert np.all(np.diff(out, axis=1) <= 1e-12)  # a longer GEMM never exposes more
    assert np.all(out <= c + 1e-12) and np.all(out >= 0.0)


def test_pipelined_reduce_scatter_never_hides_its_last_chunk():
    """num_splits = 4: the last chunk's reduce-scatter follows the last GEMM chunk, C/4 exposed at least."""
    out = tp_overlap.pair_exposed_s(GRID, 100.0, tp_overlap.PIPELINE, 8)
    assert out == pytest.approx(GRID / tp_overlap.PIPELINE_SPLITS)
    slow = tp_overlap.pair_exposed_s(1.0, 0.4, tp_overlap.PIPELINE, 8)
    assert slow == pytest.approx(1.0 - 0.4 * 0.75)  # comm-bound: C - G (1 - 1/n)


def test_ring_exchange_hides_behind_all_but_one_chunk_of_the_gemm():
    """tp chunks, the first local: C - G (1 - 1/tp) exposed, nothing once the GEMM's other chunks cover it."""
    assert tp_overlap.pair_exposed_s(1.0, 0.8, tp_overlap.RING, 8) == pytest.approx(1.0 - 0.8 * 7.0 / 8.0)
    assert tp_overlap.pair_exposed_s(1.0, 2.0, tp_overlap.RING, 8) == 0.0
    assert tp_overlap.pair_exposed_s(1.0, 0.8, tp_overlap.RING, 2) == pytest.approx(1.0 - 0.8 * 0.5)


def _layout(**kw):
    return SimpleNamespace(**{"micro_batch": 1, "seq_len": 4096, "cp": 1, "tp": 8, "sequence_parallel": 1, **kw})


def test_long_gemms_leave_only_the_reduce_scatter_tails_and_the_contention():
    """GEMMs far longer than the collectives: of the 8 collectives per block the 2 forward pipelined
    reduce-scatters keep C/4, and the pipelined/bulk ones (4 of 8) save 1 - 16/132 of what they hide."""
    raw = 1e-3
    out = tp_overlap.exposed_s(L3_70B, _layout(), raw, 1e3, 80.0, 0.0, 0.0, 132)
    c = raw / 8.0
    k = 16.0 / 132.0
    expect = 2 * c / 4 + 2 * (c * 3 / 4) * k + 2 * c * k  # pipeline tails + their contention + bulk contention
    assert out == pytest.approx(expect)


def test_no_overlap_without_sequence_parallelism():
    """Userbuffers overlaps all-gathers and reduce-scatters; all-reduces (no SP) stay exposed."""
    out = tp_overlap.exposed_s(L3_70B, _layout(sequence_parallel=0), 0.5, 10.0, 80.0, 0.0, 0.0, 132)
    assert out == pytest.approx(0.5)


def _tp_s(stack: str, async_on: bool, compile_on: bool) -> float:
    plan = ExecutionPlan(stack=stack, tp=8, dp=4, seq_len=8192, micro_batch=1, sequence_parallel=True,
                         sharding="fsdp_full_shard" if stack == "torchtitan" else "zero1",
                         activation_checkpointing="full", compile=compile_on, async_tp=async_on)
    system = resolve_system(Scenario(cluster="grand-teton-h100-96gb", gpus=32))
    return float(performance(L3_70B, Layout.from_plan(plan), system, Settings())["tp_comm_s"][0])


def test_megatron_tp_comm_overlap_hides_between_none_and_all_of_the_tp_time():
    off, on = _tp_s("megatron", False, False), _tp_s("megatron", True, False)
    assert 0.0 < on < off


def test_torchtitan_async_tp_still_uses_the_fused_pair_model(monkeypatch):
    """The micro-pipelined PyTorch async TP path is untouched: replacing tp_overlap changes nothing there."""
    before = _tp_s("torchtitan", True, True)
    monkeypatch.setattr(tp_overlap, "exposed_s", lambda *a: np.asarray(a[2]) * 0.0)
    assert _tp_s("torchtitan", True, True) == pytest.approx(before)
