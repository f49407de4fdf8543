"""Process-group set-up: rank/world from torchrun or SLURM env, gloo on CPU, NCCL on GPU."""

from __future__ import annotations

import os
import subprocess

import torch
import torch.distributed as dist


def launched_externally() -> bool:
    """True under torchrun (RANK/WORLD_SIZE) or under SLURM srun with several tasks."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return True
    return int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in os.environ


def _first_slurm_host() -> str:
    nodes = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or "localhost"
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()[0]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return nodes.split(",")[0].split("[")[0]


def env_from_slurm(rdzv_endpoint: str | None) -> None:
    """Fill torch's RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* from SLURM's variables (srun)."""
    if "RANK" in os.environ:
        return
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    os.environ["LOCAL_RANK"] = os.environ.get("SLURM_LOCALID", "0")
    os.environ["LOCAL_WORLD_SIZE"] = os.environ.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0]
    if rdzv_endpoint:
        host, _, port = rdzv_endpoint.partition(":")
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, port or "29500"
    os.environ.setdefault("MASTER_ADDR", _first_slurm_host())
    os.environ.setdefault("MASTER_PORT", "29500")


def local_device_index(local_rank: int, visible: int) -> int:
    """This rank's GPU among the `visible` ones: its local rank (torchrun, srun seeing the node's GPUs), or the
    only one a launcher that binds a GPU per task left visible (srun --gpus-per-task=1 / --gpu-bind: each task
    sees one device, index 0, whatever its SLURM_LOCALID). More ranks than GPUs is a clear error, not CUDA's
    "invalid device ordinal"."""
    from planner.errors import PlanError

    if 0 <= local_rank < visible:
        return local_rank
    if visible == 1:
        return 0
    raise PlanError("nproc", f"local rank {local_rank} but {visible} GPUs are visible to this process "
                    "(CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES): give at most one rank per visible GPU")


def pick_device() -> torch.device:
    if torch.cuda.is_available():
        local = local_device_index(int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count())
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def check_precision(precision: str, device_name: str, bf16_native: bool) -> None:
    """bf16 needs bf16 tensor cores (compute capability 8.0+, or any ROCm GPU): on a V100 torch emulates it
    (`torch.cuda.is_bf16_supported()` is True there only with `including_emulation`), many times slower and
    with no catalog peak to report MFU against. Refused, naming what runs there."""
    from planner.errors import PlanError

    if precision in ("bf16", "bf16_pure") and not bf16_native:
        raise PlanError("precision", f"{device_name} has no bf16 tensor cores (torch would emulate {precision}): "
                        "use fp16 (loss-scaled) or fp32 on it")


def check_device_precision(precision: str, device: torch.device) -> None:
    if device.type == "cuda":
        check_precision(precision, torch.cuda.get_device_name(device),
                        torch.cuda.is_bf16_supported(including_emulation=False))


def set_cpu_threads() -> None:
    """OMP threads per rank = cores // ranks on this node (notes/cpu-runs.md: else 10x swings)."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    threads = max(1, (os.cpu_count() or 1) // max(1, local_world))
    if "OMP_NUM_THREADS" in os.environ:
        threads = int(os.environ["OMP_NUM_THREADS"])
    torch.set_num_threads(threads)


def init(timeout_s: float) -> torch.device:
    """Initialise the default process group (once) and return this rank's device."""
    import datetime

    device = pick_device()
    if device.type == "cpu":
        set_cpu_threads()
    if not dist.is_initialized():
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in os.environ:  # one process: its store binds a port the OS picks (no race)
            os.environ["MASTER_PORT"] = "0" if os.environ["WORLD_SIZE"] == "1" else str(free_port())
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=max(60, timeout_s)))
    return device


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
