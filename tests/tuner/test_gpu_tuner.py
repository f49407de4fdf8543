"""The tuner on a GPU machine: the GPUs it counts and names, and the NCCL bus bandwidth it measures feeding
the planner's system. Skipped without a GPU (`pytest -rs` shows why); the bandwidth needs two GPUs. The
pure-function side runs everywhere: tests/tuner/test_gpu_visibility.py."""

import pytest
import torch

from hardware.catalog import load_catalog
from hardware.gpu_names import match_gpu_id

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU (torch.cuda.is_available() is False here)")]


def test_counts_and_names_the_gpus_torch_sees():
    """nvidia-smi / amd-smi (narrowed by CUDA_VISIBLE_DEVICES) and torch agree on how many GPUs and which."""
    from tuner import device

    rows = device.local_gpus()
    assert device.has_cuda_gpu() and len(rows) == GPUS
    name, gib = rows[0]
    props = torch.cuda.get_device_properties(0)
    assert gib == pytest.approx(props.total_memory / 2**30, rel=0.03)
    cat = load_catalog()
    assert device.guess_gpu_id(cat, name, gib) == match_gpu_id(cat, torch.cuda.get_device_name(0),
                                                               props.total_memory / 2**30)


@pytest.mark.slow
@pytest.mark.skipif(GPUS < 2, reason=f"needs 2 CUDA GPUs to measure an NCCL all-reduce ({GPUS} here)")
def test_measured_nccl_busbw_feeds_the_planner():
    from tuner.config import TuneConfig
    from tuner.setup import _system_for

    props = torch.cuda.get_device_properties(0)
    gid = match_gpu_id(load_catalog(), torch.cuda.get_device_name(0), props.total_memory / 2**30)
    cfg = TuneConfig(model="tiny", gpus=2, budget_s=60, gpu=gid or "h100-80gb")
    system, note, assumed = _system_for(cfg, 2, on_gpu=True)
    assert note.startswith("measured all-reduce busbw"), note
    assert system.measured_intranode_busbw_gbps > 0
    assert assumed.measured_intranode_busbw_gbps is None  # the catalog's network, to show what changed
