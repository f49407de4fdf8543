"""The tuner on a GPU machine, the parts that are pure functions (run without a GPU): how many GPUs it may use
(nvidia-smi lists every GPU; CUDA_VISIBLE_DEVICES narrows what the trials' ranks see) and no bf16 in the
default space of a GPU without bf16 tensor cores."""

import pytest

from hardware.catalog import load_catalog
from tuner.device import parse_nvidia_smi
from tuner.space import build_space

# `nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits` on a 4-GPU node
SMI = """0, GPU-1b2c0000-aaaa-bbbb-cccc-000000000000, NVIDIA H100 80GB HBM3, 81559
1, GPU-2d3e0000-aaaa-bbbb-cccc-000000000001, NVIDIA H100 80GB HBM3, 81559
2, GPU-3f4a0000-aaaa-bbbb-cccc-000000000002, NVIDIA H100 80GB HBM3, 81559
3, GPU-4b5c0000-aaaa-bbbb-cccc-000000000003, NVIDIA H100 80GB HBM3, 81559
"""


@pytest.mark.parametrize("visible,count", [
    (None, 4), ("0,1", 2), ("3", 1), ("2,0", 2), ("", 0), ("-1", 0),
    ("1,7,2", 1),  # CUDA stops at the first entry that names no device
    ("GPU-3f4a", 1), ("GPU-3f4a,0", 2),  # UUIDs (a unique prefix)
])
def test_cuda_visible_devices_narrows_nvidia_smi(visible, count):
    rows = parse_nvidia_smi(SMI, visible)
    assert len(rows) == count
    assert all(name == "NVIDIA H100 80GB HBM3" and gib == pytest.approx(81559 / 1024) for name, gib in rows)


def test_mig_entries_leave_the_list_as_is():
    assert len(parse_nvidia_smi(SMI, "MIG-5a1b2c3d-0000-0000-0000-000000000000")) == 4


def test_v100_space_has_no_bf16():
    v100 = load_catalog().gpus["v100-32gb"]
    space = build_space("deepspeed", on_gpu=True, bf16=v100.bf16_tflops is not None)
    assert space.choices["precision"] == ("fp16", "fp32")
    assert "bf16" in build_space("deepspeed", on_gpu=True).choices["precision"]
    assert build_space("fsdp", on_gpu=False).choices["precision"] == ("bf16", "fp32")  # CPU ranks: as before


@pytest.mark.parametrize("gpu,has_bf16", [("v100-32gb", False), ("a100-80gb", True)])
def test_new_study_on_a_gpu_searches_the_precisions_it_has(gpu, has_bf16):
    """The study a GPU machine opens (tuner/setup.py, the planner's real system for the catalog part)."""
    from tuner.config import TuneConfig
    from tuner.setup import _new_meta

    cfg = TuneConfig(model="tiny", gpu=gpu, measure_network=False, budget_s=60)
    meta = _new_meta(cfg, 2, on_gpu=True)
    assert ("bf16" in meta.space["precision"]) is has_bf16
    assert "fp16" in meta.space["precision"]


def test_a_cgroup_constrained_job_keeps_the_gpus_nvidia_smi_lists():
    """Slurm with ConstrainDevices: nvidia-smi shows only the job's GPUs with their host indices (2, 3) while
    CUDA_VISIBLE_DEVICES numbers them 0,1: those two are the visible ones (it read as none: the tuner fell to CPU)."""
    job = "\n".join(SMI.strip().splitlines()[2:]) + "\n"
    assert len(parse_nvidia_smi(job, "0,1")) == 2
    assert len(parse_nvidia_smi(SMI, "1,7,2")) == 1  # an unconstrained node keeps CUDA's rule
