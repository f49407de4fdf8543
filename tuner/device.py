"""The devices `plan tune` runs on, described for the planner.

On a machine with a GPU the catalog entry named by --gpu/--cluster (or guessed from
nvidia-smi, or on ROCm from amd-smi / rocm-smi / torch's HIP devices: tuner/amd_gpus.py) is used. Without one, `--gpus N` means N CPU ranks: a "cpu-rank" GPU entry whose
peak is measured here (a numpy matmul), whose memory is --device-memory-gib (the per-rank cap)
or this host's RAM / N, and whose network is the measured all-reduce bus bandwidth.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np

from hardware.models import GPU, Catalog, Cluster

CPU_GPU_ID = "cpu-rank"
CPU_CLUSTER_ID = "local-cpu"


def has_cuda_gpu() -> bool:
    """True when nvidia-smi lists a GPU, or an AMD tool an AMD GPU (torch's "cuda" device on ROCm; no torch
    import where neither tool nor /dev/kfd is there: the tuner stays light)."""
    if os.environ.get("PLAN_FORCE_CPU") == "1":
        return False
    return len(local_gpus()) > 0


def torch_sees_gpus(timeout_s: float = 120.0) -> tuple[int, str]:
    """(GPUs torch can use, what it said) in the trials' interpreter (sys.executable, this environment: the ranks
    run there, tuner/runner.py): torch.cuda.is_available() and device_count(), which a CPU-only build answers
    False / 0 on a GPU machine (HIP devices on ROCm builds). Asked in a subprocess: the tuner stays light."""
    code = ("import torch; ok = torch.cuda.is_available(); "
            "print(int(ok), torch.cuda.device_count() if ok else 0, torch.__version__, torch.version.cuda or "
            "getattr(torch.version, 'hip', None) or 'cpu')")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as e:
        return 0, f"could not ask torch ({e})"
    words = done.stdout.split()
    if done.returncode != 0 or len(words) < 4:
        last = (done.stderr or done.stdout).strip().splitlines()
        return 0, f"torch failed to load ({last[-1][:160] if last else f'exit {done.returncode}'})"
    ok, count, version, build = words[:4]
    return (int(count) if ok == "1" else 0), f"torch {version} ({build} build)"


def gpu_decision() -> tuple[bool, str | None]:
    """(trials run on GPUs, a line saying why not where the driver lists GPUs that torch cannot use). The
    driver's list (nvidia-smi / the AMD tools) is not enough: a CPU-only torch on a GPU machine ran every
    trial on CPU ranks while the planner modelled GPUs."""
    if os.environ.get("PLAN_FORCE_CPU") == "1":
        return False, None
    rows = local_gpus()
    if not rows:
        return False, None
    usable, said = torch_sees_gpus()
    if usable == 0:
        return False, (f"{len(rows)} GPU(s) listed ({rows[0][0]}), but {said} in {sys.executable} cannot use "
                       "them (torch.cuda.is_available() is False): tuning on CPU ranks; install a CUDA/ROCm "
                       "build of torch to tune on the GPUs")
    return True, None


def local_gpus() -> list[tuple[str, float]]:
    """(name, memory GiB) per visible GPU: NVIDIA's (nvidia-smi), else AMD's (tuner/amd_gpus.py)."""
    from tuner.amd_gpus import amd_gpus

    return nvidia_gpus() or amd_gpus()


def nvidia_gpus() -> list[tuple[str, float]]:
    """(name, memory GiB) per NVIDIA GPU this process may use (nvidia-smi lists them all: CUDA_VISIBLE_DEVICES
    narrows them, as it does for the trials' ranks)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi(out, os.environ.get("CUDA_VISIBLE_DEVICES"))


def parse_nvidia_smi(text: str, visible: str | None) -> list[tuple[str, float]]:
    """(name, GiB) of `nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`
    rows, in CUDA_VISIBLE_DEVICES order when it is set. CUDA reads that list as indices or GPU UUIDs (a
    unique prefix will do) and stops at the first entry that names no device ("" or "-1": none; CUDA C
    Programming Guide, CUDA Environment Variables). MIG instances ("MIG-...") are not resolved here:
    every GPU is listed, as before."""
    rows = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        try:
            rows.append((int(parts[0]), parts[1], ",".join(parts[2:-1]), float(parts[-1]) / 1024))
        except ValueError:
            continue
    if visible is None or any(e.strip().startswith("MIG") for e in visible.split(",")):
        return [(name, gib) for _, _, name, gib in rows]
    chosen: list[tuple] = []
    for entry in (e.strip() for e in visible.split(",")):
        hits = [r for r in rows if (entry.isdigit() and r[0] == int(entry))
                or (entry.startswith("GPU-") and r[1].startswith(entry))]
        if len(hits) != 1:
            break  # CUDA ignores this entry and every one after it
        if hits[0] not in chosen:
            chosen.append(hits[0])
    entries = [e.strip() for e in visible.split(",") if e.strip() not in ("", "-1")]
    if len(chosen) < len(entries) and len(rows) == len(entries) and all(e.isdigit() for e in entries):
        # a cgroup-constrained job (Slurm ConstrainDevices): nvidia-smi lists only the job's GPUs, with their
        # host indices, while CUDA_VISIBLE_DEVICES numbers them from 0: the listed GPUs are the visible ones
        return [(name, gib) for _, _, name, gib in rows]
    return [(name, gib) for _, _, name, gib in chosen]


def guess_gpu_id(catalog: Catalog, name: str, memory_gib: float) -> str | None:
    """The catalog GPU whose name matches the driver's (nvidia-smi, amd-smi, rocm-smi) and whose memory is
    closest: hardware/gpu_names.py, the matcher the trainer uses on torch's device name too."""
    from hardware.gpu_names import match_gpu_id

    return match_gpu_id(catalog, name, memory_gib)


def host_ram_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    return 8.0


def measured_cpu_tflops(seconds: float = 0.15, sizes: tuple[int, ...] = (256, 512, 1024), rounds: int = 3) -> float:
    """Achieved fp32 matmul TFLOPS of this host (all cores): numpy, several shapes, several
    rounds, the best (load from other processes only ever slows a round down)."""
    best = 0.0
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        for n in sizes:
            a = rng.standard_normal((n, n), dtype=np.float32)
            a @ a  # warm up
            reps, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds or reps < 2:
                a @ a
                reps += 1
            best = max(best, 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12)
    return best


def probed_precision_ratios(catalog_dir: Path | None = None, nproc: int = 1, run_probe: bool = True) -> dict[str, float]:
    """Peak of each precision relative to fp32 on this CPU, from `plan probe`'s `local` entry
    (measured with torch; cached in the user catalog). Runs the probe once when there is none."""
    from trainer.metrics import USER_CATALOG

    folder = catalog_dir or USER_CATALOG
    path = folder / "gpus" / "local.toml"
    if not path.is_file() and run_probe:
        try:
            subprocess.run([sys.executable, "-m", "plan_cli.main", "probe", "--nproc", str(nproc), "--out", str(folder)],
                           capture_output=True, timeout=300)
        except (OSError, subprocess.SubprocessError):
            return {}
    try:
        entry = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    fp32 = entry.get("fp32_tflops")
    if not fp32:
        return {}
    return {p: entry[f"{p}_tflops"] / fp32 for p in ("fp16", "bf16") if entry.get(f"{p}_tflops")}


def cpu_peaks_tflops(nproc: int) -> dict[str, float]:
    """Per-rank peaks of one CPU rank: fp32 measured now, the others by the probe's ratios."""
    fp32 = measured_cpu_tflops() / max(1, nproc)
    ratios = probed_precision_ratios(nproc=nproc)
    return {"fp32": fp32, "fp16": fp32 * ratios.get("fp16", 1.0), "bf16": fp32 * ratios.get("bf16", 1.0)}


def cpu_entries(nproc: int, *, device_memory_gib: float | None, busbw_gbps: float | None,
                peaks_tflops: dict[str, float] | None = None) -> tuple[GPU, Cluster]:
    """A GPU entry for one CPU rank and a one-node cluster of `nproc` of them."""
    peaks = peaks_tflops or cpu_peaks_tflops(nproc)
    ram_gib = host_ram_gib()
    memory_gib = device_memory_gib or ram_gib / max(1, nproc)
    link_gbps = busbw_gbps or 25.0  # notes/cpu-runs.md: gloo all-reduce ~25-28 Gbps here
    gpu = GPU(
        id=CPU_GPU_ID, name=f"CPU rank ({os.cpu_count()} cores / {nproc} ranks)", vendor="cpu",
        hbm_gib=memory_gib, hbm_gbytes_per_s=10.0, fp32_tflops=peaks["fp32"], fp16_tflops=peaks["fp16"],
        bf16_tflops=peaks["bf16"], intranode_gbps=link_gbps,
        source="measured by plan tune (numpy fp32 matmul; bf16/fp16 ratios from plan probe; gloo all-reduce)",
    )
    cluster = Cluster(
        id=CPU_CLUSTER_ID, name="this machine (CPU ranks)", gpu=CPU_GPU_ID, gpus_per_node=max(1, nproc),
        host_ram_gib=ram_gib, host_to_gpu_gbps=80.0, internode_gbps=link_gbps,
        intranode_gbps=link_gbps, cpu_cores_per_node=os.cpu_count(),
        source="this machine, measured by plan tune",
    )
    return gpu, cluster


def with_entries(catalog: Catalog, gpu: GPU, cluster: Cluster) -> Catalog:
    return catalog.model_copy(update={
        "gpus": {**catalog.gpus, gpu.id: gpu}, "clusters": {**catalog.clusters, cluster.id: cluster}})
