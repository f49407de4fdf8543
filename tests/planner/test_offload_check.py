"""validation/offload_check.py against the figures it prints (issue 10, point 5): the planner's host links
within 10% of pinned-copy micro-benchmarks; what offload adds (PCIe, CPU Adam, overlap), at the ZeRO-Offload
paper's 2019 compute speed, within 25% of the paper's figures or inside the ranges it states; the absolute
TFLOPs rows miss by the code's age (the compute factor ERA_SCALE), not by offload."""

import numpy as np
import pytest

from hardware.catalog import load_catalog
from planner import comm, offload_time
from planner.layout import Layout
from planner.resolve import resolve_system
from planner.scenario import ExecutionPlan, Scenario
from planner.settings import Settings
from validation import offload_check as oc

ERA = oc.era_scale()
ROWS = oc.rows(ERA)
TOLERANCE = {"host link": 0.10, "offload": 0.25}


@pytest.mark.parametrize("row", [r for r in ROWS if r.kind in TOLERANCE], ids=lambda r: f"{r.figure}|{r.config}")
def test_row_within_its_tolerance(row):
    assert abs(row.error) <= TOLERANCE[row.kind], (row.published, row.planner)


def test_absolute_tflops_miss_is_the_compute_era_only():
    """40 TFLOPs published for the 10B on one V100; the planner (2020+ compute) gives about 40 x ERA_SCALE,
    and every count of the 1-128 GPU scaling run clears the paper's 30 TFLOPs/GPU."""
    fig8 = next(r for r in ROWS if r.kind == "throughput" and "Fig. 8" in r.figure)
    assert fig8.planner == pytest.approx(40.0 * ERA, rel=0.10)
    fig11 = [r for r in ROWS if r.kind == "throughput" and "Fig. 11" in r.figure]
    assert len(fig11) == 8 and all(r.error == 0.0 for r in fig11)


def test_era_scale_is_the_2019_to_2020_megatron_gap():
    """Megatron-LM on one V100: 39 TFLOPs in 2019 (Shoeybi et al. abstract), 71.9 in the Sep-2020 README's
    DGX-2 column (megatron_2020_001): 1.84x, about the factor the check slows compute by."""
    assert 1.6 < ERA < 2.2


def _layout(precision: str, ga: int) -> Layout:
    return Layout.from_plan(ExecutionPlan(stack="generic", sharding="zero2", offload="optimizer", dp=1, micro_batch=1,
                                          grad_accum=ga, seq_len=1024, precision=precision,
                                          activation_checkpointing="full"))


def test_host_link_is_eighty_percent_of_the_line_rate():
    system = resolve_system(Scenario(cluster="dgx2-v100", gpus=1), load_catalog())
    assert comm.Links.of(system, Settings()).host_Bps == pytest.approx(126e9 / 8 * comm.HOST_LINK_EFFICIENCY)
    assert comm.HOST_LINK_EFFICIENCY == pytest.approx(0.8)


@pytest.mark.parametrize("precision,grad_bytes", [("fp16", 4.0), ("bf16", 4.0), ("bf16_pure", 2.0)])
def test_gradients_reach_the_host_in_fp32_every_micro_batch(precision, grad_bytes):
    """ZeRO-2 offload with 4 micro batches, no overlap, no CPU time: the exposed gradient copies are
    4 x shard x 4 B (2 B in pure bf16) over the host link, then the 16-bit parameters come back."""
    system = resolve_system(Scenario(cluster="dgx2-v100", gpus=1), load_catalog())
    links = comm.Links.of(system, Settings())
    shard = 1e9
    prof = {"overlap_host": 0.0, "overlap_zero3": 0.0, "cpu_optimizer_threads_per_rank": 0.0}
    lay = _layout(precision, 4)
    t = offload_time.offload_s(lay, links, system, shard, 0.0, np.array([1.0]), np.array([0.5]), prof)
    assert float(offload_time.host_grad_bytes(lay)[0]) == grad_bytes
    assert float(t[0]) == pytest.approx((4 * shard * grad_bytes + shard * 2.0) / links.host_Bps)


def test_fig14_cpu_adam_gains_lie_between_the_planners_batch_ends():
    """ZeRO-Offload sec. 6.2.5: DPU +7% and CPU-Adam over PT-CPU "up to 10%" (1B, 1 GPU, batch 1-8, GA not
    stated). Both depend on the planner's CPU Adam seconds; each published gain lies between the planner's
    GA-to-512 and GA-1 ends, so CPU Adam is neither negligible nor a step-sized cost there."""
    g = oc.fig14_gains(ERA)
    lo, hi = g["dpu"]
    assert lo <= oc.FIG14_DPU_GAIN <= hi, g
    lo, hi = g["cpu_adam"]
    assert lo <= oc.FIG14_CPU_ADAM_GAIN_MAX <= hi, g
