"""Step-time statistics and the peak to compute MFU against (the FLOPs: planner/flops.py)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

USER_CATALOG = Path("~/.config/plan/catalog").expanduser()


def step_stats(times_s: list[float]) -> dict[str, float]:
    ordered = sorted(times_s)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"step_time_s_median": statistics.median(ordered),
            "step_time_s_mean": statistics.fmean(ordered), "step_time_s_p90": p90}


def _catalog_dirs() -> list[Path]:
    dirs = [USER_CATALOG] if USER_CATALOG.is_dir() else []
    return dirs


def catalog_peak_tflops(device_name: str, precision: str, memory_gib: float | None = None, arch: str | None = None,
                        compute_units: int | None = None) -> tuple[float, str] | None:
    """The catalog's peak for this device: the GPU the driver's name is (hardware/gpu_names.py, the tuner's
    matcher), else on ROCm the part its LLVM target and compute units are (`arch`: gcnArchName; a device whose name
    is empty or "AMD Radeon Graphics" when the image lacks libdrm's amdgpu.ids), else the `local` entry (on a GPU
    only one `plan probe` wrote for this very device: a CPU probe's peak is no GPU's). None when neither fits, or
    the part lacks the precision (bf16 on a V100)."""
    try:
        from hardware.catalog import load_catalog
        from hardware.gpu_names import match_gpu_id, match_rocm_arch

        cat = load_catalog(_catalog_dirs())
    except Exception:  # a broken user catalog must not fail a training run
        return None
    if device_name != "cpu":
        gid = match_gpu_id(cat, device_name, memory_gib) if device_name.strip() else None
        if gid is None and arch:
            gid = match_rocm_arch(cat, arch, compute_units, memory_gib)
        if gid is not None:
            try:
                return cat.gpus[gid].peak_tflops(precision), f"catalog:{gid}"
            except ValueError:
                return None
    local = cat.gpus.get("local")  # an empty name is in every name: it matched a CPU probe's entry
    label = gpu_label(device_name, arch, compute_units) if device_name != "cpu" else "cpu"
    if local is not None and (label == "cpu" or label != "unnamed GPU" and label.lower() in local.name.lower()):
        try:
            return local.peak_tflops(precision), f"catalog:local ({cat.paths.get('gpus/local', '')})"
        except ValueError:
            return None
    return None


def gpu_label(name: str, arch: str | None = None, compute_units: int | None = None) -> str:
    """A GPU's name for results and notes: the driver's, else (ROCm without libdrm's amdgpu.ids: an empty name) its
    LLVM target and compute units, e.g. "AMD gfx942 (304 CUs)"."""
    if name.strip():
        return name
    if arch:
        return f"AMD {arch.split(':')[0]}" + (f" ({compute_units} CUs)" if compute_units else "")
    return "unnamed GPU"


def cuda_identity(device) -> dict:
    """name, memory_gib, arch (ROCm's gcnArchName; None on CUDA) and compute_units of a torch "cuda" device."""
    import torch

    props = torch.cuda.get_device_properties(device)
    arch = getattr(props, "gcnArchName", None) if getattr(torch.version, "hip", None) else None
    return {"name": torch.cuda.get_device_name(device), "memory_gib": props.total_memory / 2**30,
            "arch": arch or None, "compute_units": getattr(props, "multi_processor_count", None)}


def unknown_gpu_note(device_name: str) -> str:
    """Why a GPU's MFU is against a measured matmul, not a datasheet peak (said in the result's peak_source)."""
    return (f"{device_name!r} is no catalog GPU (catalog/gpus/*.toml names; `plan probe` on this machine writes "
            "a `local` entry): MFU is against this measured matmul, not the datasheet peak")


def measured_matmul_tflops(dtype_name: str = "fp32", sizes: tuple[int, ...] = (256, 512, 1024),
                           repeats: int = 3, min_time_s: float = 0.05) -> float:
    """A robust matmul peak on this device when the catalog has nothing better: every shape
    in `repeats` rounds, the best (plan probe does the same, longer, and caches it)."""
    import torch

    from trainer.probe import matmul_tflops

    name = "bf16" if dtype_name == "bf16_pure" else dtype_name
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return max(matmul_tflops(n, name, device, min_time_s) for _ in range(repeats) for n in sizes)


def host_peak_rss_bytes() -> int | None:
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB
    except (ImportError, OSError):
        return None


def cpu_threads() -> int:
    return int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
