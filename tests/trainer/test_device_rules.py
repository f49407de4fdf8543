"""The GPU-side rules of trainer/dist.py that are pure functions (run without a GPU): which visible GPU a rank
takes, and bf16 refused where the GPU has no bf16 tensor cores."""

import pytest
import torch

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


def test_fused_adam_buildable(tmp_path):
    from trainer.backends.deepspeed_backend import fused_adam_buildable

    assert fused_adam_buildable(True, None)  # prebuilt (DS_BUILD_FUSED_ADAM=1)
    assert not fused_adam_buildable(False, None)  # pip's torch: no CUDA_HOME
    assert not fused_adam_buildable(False, str(tmp_path))  # a runtime-only CUDA: no nvcc
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    assert fused_adam_buildable(False, str(tmp_path))


def _ds_conf(**plan):
    from trainer.backends.deepspeed_backend import ds_config_from_knobs
    from trainer.config import TrainConfig
    from trainer.spec import resolve_spec

    cfg = TrainConfig(model="tiny", nproc=2, sharding="zero2", precision="bf16", **plan)
    return ds_config_from_knobs(cfg, 2, True, resolve_spec(cfg.model))  # the trainer's own, on a GPU


def test_gpu_adamw_runs_torch_adam_where_fused_adam_cannot_be_built():
    """On a GPU the shared builder asks for FusedAdam (JIT-compiled with nvcc); this machine's real deepspeed
    and CUDA_HOME say whether it can be built, and the trainer's config follows."""
    import torch.utils.cpp_extension
    from deepspeed.git_version_info import installed_ops

    from trainer.backends.deepspeed_backend import fused_adam_buildable, torch_adam_where_no_fused_adam

    buildable = fused_adam_buildable(bool(installed_ops.get("fused_adam")), torch.utils.cpp_extension.CUDA_HOME)
    conf = _ds_conf()
    assert "torch_adam" not in conf["optimizer"]["params"]  # what `plan export deepspeed` writes: unchanged
    note = torch_adam_where_no_fused_adam(conf, on_gpu=True)
    assert conf["optimizer"]["params"].get("torch_adam", False) is (not buildable)
    assert ("FusedAdam" in note and "nvcc" in note) is (not buildable)
    offload = _ds_conf(offload="optimizer")  # DeepSpeedCPUAdam, not FusedAdam
    assert torch_adam_where_no_fused_adam(offload, on_gpu=True) == "" and "torch_adam" not in offload["optimizer"]["params"]
    cpu = _ds_conf()
    assert torch_adam_where_no_fused_adam(cpu, on_gpu=False) == "" and "torch_adam" not in cpu["optimizer"]["params"]


def test_fused_adam_buildable_with_hipcc_on_rocm(tmp_path):
    """ROCm torch: DeepSpeed builds FusedAdam with hipcc under ROCM_HOME; CUDA_HOME is None there (no nvcc), which
    ran torch_adam on every MI250X / MI300X."""
    from trainer.backends.deepspeed_backend import fused_adam_buildable

    assert not fused_adam_buildable(False, None, str(tmp_path))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "hipcc").write_text("")
    assert fused_adam_buildable(False, None, str(tmp_path))


def test_which_configs_build_fused_adam():
    from trainer.backends.deepspeed_backend import fused_adam_in_config

    assert fused_adam_in_config(_ds_conf(), on_gpu=True)
    assert not fused_adam_in_config(_ds_conf(), on_gpu=False)  # CPU: the shared builder asks for torch's AdamW
    assert not fused_adam_in_config(_ds_conf(offload="optimizer"), on_gpu=True)  # DeepSpeedCPUAdam
    torch_adam = _ds_conf()
    torch_adam["optimizer"]["params"]["torch_adam"] = True
    assert not fused_adam_in_config(torch_adam, on_gpu=True)


def test_deepspeed_reads_the_device_index_as_local_rank():
    """srun --gpus-per-task=1: task 3 of a node sees one GPU (cuda:0) but LOCAL_RANK=3, which DeepSpeed passes to
    set_device ("invalid device ordinal"); torchrun's LOCAL_RANK is the device already; CPU ranks are left alone."""
    from trainer.backends.deepspeed_backend import deepspeed_local_rank

    assert deepspeed_local_rank("3", torch.device("cuda", 0)) == "0"
    assert deepspeed_local_rank("5", torch.device("cuda", 5)) is None
    assert deepspeed_local_rank("1", torch.device("cpu")) is None


def test_process_group_binds_the_gpu():
    """NCCL bound to the rank's GPU (init_process_group's device_id: barrier() allocates there, the communicator
    forms at start-up); gloo on CPU, as before."""
    from trainer.dist import process_group_args

    cuda3 = torch.device("cuda", 3)
    assert process_group_args(cuda3) == {"backend": "nccl", "device_id": cuda3}
    assert process_group_args(torch.device("cpu")) == {"backend": "gloo"}


def test_bench_iterations_on_gpu_are_nccl_tests_defaults():
    from trainer.collectives import iterations

    assert {iterations(s, on_gpu=True) for s in (2**20, 2**28, 2**30)} == {(5, 20)}  # nccl-tests -w 5 -n 20
    assert [iterations(s) for s in (2**20, 2**28, 2**30)] == [(3, 20), (2, 8), (1, 4)]  # CPU: unchanged


def test_two_elastic_ranks_on_one_visible_gpu_is_an_error():
    """torchrun / plan's elastic launch with --nproc 2 where one GPU is visible: both ranks took cuda:0 (NCCL's
    "Duplicate GPU detected"); only a launcher that binds one GPU per task (srun) maps local rank 1 to index 0."""
    with pytest.raises(PlanError, match="local rank 1 but 1 GPUs are visible"):
        local_device_index(1, 1, shared=True)
    assert local_device_index(0, 1, shared=True) == 0
    assert local_device_index(1, 1) == 0  # srun --gpus-per-task=1
