"""The GPU-side rules of trainer/dist.py that are pure functions (run without a GPU): which visible GPU a rank
takes, and bf16 refused where the GPU has no bf16 tensor cores."""

import pytest

from planner.errors import PlanError
from trainer.dist import check_precision, local_device_index


def test_local_rank_picks_its_gpu():
    assert [local_device_index(r, 8) for r in range(8)] == list(range(8))  # torchrun, srun seeing the node


def test_one_gpu_bound_per_task_is_index_zero():
    """srun --gpus-per-task=1 / --gpu-bind: task 5 of a node sees one GPU; cuda:5 was "invalid device ordinal"."""
    assert local_device_index(5, 1) == 0


def test_more_ranks_than_visible_gpus_is_a_clear_error():
    with pytest.raises(PlanError, match="local rank 3 but 2 GPUs are visible") as e:
        local_device_index(3, 2)
    assert e.value.field == "nproc"


@pytest.mark.parametrize("precision", ["bf16", "bf16_pure"])
def test_bf16_refused_without_bf16_tensor_cores(precision):
    with pytest.raises(PlanError, match=r"Tesla V100-SXM2-32GB has no bf16 tensor cores.*fp16.*fp32"):
        check_precision(precision, "Tesla V100-SXM2-32GB", bf16_native=False)


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_fp16_and_fp32_run_on_a_v100(precision):
    check_precision(precision, "Tesla V100-SXM2-32GB", bf16_native=False)


def test_bf16_runs_where_native():
    check_precision("bf16", "NVIDIA H100 80GB HBM3", bf16_native=True)
