"""Which GPUs the trials can use: the driver's list (nvidia-smi, the AMD tools) narrowed as the runtime narrows it
(ROCm: ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES), and torch in the trials' interpreter
able to use them at all. Here torch is a CPU build: a machine whose nvidia-smi lists GPUs tunes on CPU ranks and
says why (it tuned as if the trials had GPUs)."""

from __future__ import annotations

import json
import stat

import pytest
import torch

from tuner import amd_gpus, device

SMI = ("0, GPU-1b2c0000-aaaa-bbbb-cccc-000000000000, NVIDIA H100 80GB HBM3, 81559\n"
       "1, GPU-2d3e0000-aaaa-bbbb-cccc-000000000001, NVIDIA H100 80GB HBM3, 81559")
CARDS = {f"card{i}": {"Card Series": f"AMD Instinct MI{n}", "VRAM Total Memory (B)": str(gib * 2**30)}
         for i, (n, gib) in enumerate([("300X", 192), ("325X", 256), ("355X", 288)])}


def _tool(folder, name: str, output: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' '{output}'\n")  # a shell builtin: PATH holds only these tools
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def listed_h100s(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    for var in ("PLAN_FORCE_CPU", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    _tool(tmp_path, "nvidia-smi", SMI)
    return tmp_path


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch here can use a GPU: the fallback is for a CPU build")
def test_gpus_listed_but_a_cpu_torch_tunes_on_cpu_ranks(listed_h100s, tmp_path):
    assert device.has_cuda_gpu()  # the driver lists them
    assert device.torch_sees_gpus()[0] == 0
    on_gpu, note = device.gpu_decision()
    assert not on_gpu
    assert note.startswith("2 GPU(s) listed (NVIDIA H100 80GB HBM3), but torch ") and "cannot use them" in note

    from tuner.config import TuneConfig
    from tuner.setup import open_study

    ctx = open_study(TuneConfig(model="tiny", gpus=2, budget_s=60, storage=f"sqlite:///{tmp_path}/s.db",
                                measure_network=False, progress=False))
    assert not ctx.on_gpu and ctx.system.gpu.id == device.CPU_GPU_ID
    assert ctx.study.study_name.endswith("-2xcpu-any") and ctx.device_note == note


def test_no_gpu_listed_asks_no_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PLAN_FORCE_CPU", raising=False)
    if amd_gpus.os.path.exists("/dev/kfd"):
        pytest.skip("an AMD driver here")
    assert device.gpu_decision() == (False, None)


ROWS = [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)]


@pytest.mark.parametrize("env,names", [
    ({}, "abcd"),
    ({"ROCR_VISIBLE_DEVICES": "2,3"}, "cd"),
    ({"HIP_VISIBLE_DEVICES": "1"}, "b"),
    ({"CUDA_VISIBLE_DEVICES": "3,0"}, "da"),  # HIP reads it too
    ({"HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0,2"}, "b"),  # HIP's first
    ({"ROCR_VISIBLE_DEVICES": "1,2,3", "HIP_VISIBLE_DEVICES": "0"}, "b"),  # HIP indexes what ROCR left
    ({"ROCR_VISIBLE_DEVICES": "3,1", "HIP_VISIBLE_DEVICES": "1,0"}, "bd"),
    ({"HIP_VISIBLE_DEVICES": ""}, ""), ({"ROCR_VISIBLE_DEVICES": "-1"}, ""),
    ({"HIP_VISIBLE_DEVICES": "0,9,1"}, "a"),  # the first entry that names no device ends the list
    ({"HIP_VISIBLE_DEVICES": "1,1"}, ""),  # a repeated one leaves none (torch's reading)
    ({"ROCR_VISIBLE_DEVICES": "GPU-4b2c1a9f"}, "abcd"),  # UUIDs: not resolved here
])
def test_rocm_isolation_variables(env, names):
    assert "".join(n for n, _ in amd_gpus.rocm_visible(ROWS, env)) == names


def test_amd_tool_rows_are_narrowed(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    for var in ("PLAN_FORCE_CPU", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    _tool(tmp_path, "rocm-smi", json.dumps(CARDS))
    assert len(device.local_gpus()) == 3
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "2,1")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    assert device.local_gpus() == [("AMD Instinct MI325X", 256.0)]
