"""Step-time statistics, FLOPs per step and the peak to compute MFU against."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from planner.model import ModelSpec

USER_CATALOG = Path("~/.config/plan/catalog").expanduser()


def step_stats(times_s: list[float]) -> dict[str, float]:
    ordered = sorted(times_s)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"step_time_s_median": statistics.median(ordered),
            "step_time_s_mean": statistics.fmean(ordered), "step_time_s_p90": p90}


def matmul_params(spec: ModelSpec) -> int:
    """Parameters that take part in matmuls: the blocks and the output head (not positions)."""
    return spec.n_params_non_embedding + spec.vocab_padded * spec.hidden


def model_flops_per_token(spec: ModelSpec, seq_len: int) -> float:
    # PaLM (Chowdhery et al. 2022, App. B): 6N + 12 * L * H * Q * T per token, H*Q = hidden
    return 6 * matmul_params(spec) + 12 * spec.n_layers * spec.hidden * seq_len


def hw_flops_per_token(spec: ModelSpec, seq_len: int, checkpointing: str) -> float:
    """Model FLOPs plus what recomputation adds (one more forward: 2N + 4*L*h*s; attention core: 4*L*h*s)."""
    base = model_flops_per_token(spec, seq_len)
    attn_fwd = 4 * spec.n_layers * spec.hidden * seq_len
    if checkpointing == "full":
        return base + 2 * spec.n_params_non_embedding + attn_fwd
    if checkpointing == "selective":
        return base + attn_fwd
    return base


def _catalog_dirs() -> list[Path]:
    dirs = [USER_CATALOG] if USER_CATALOG.is_dir() else []
    return dirs


def catalog_peak_tflops(device_name: str, precision: str) -> tuple[float, str] | None:
    """The catalog's peak for this device: an entry whose name matches, else `local`."""
    try:
        from hardware.catalog import load_catalog

        cat = load_catalog(_catalog_dirs())
    except Exception:  # a broken user catalog must not fail a training run
        return None
    want = device_name.lower().replace("nvidia", "").split()
    if device_name != "cpu":
        for gid, gpu in cat.gpus.items():
            if gid != "local" and all(w in gpu.name.lower() for w in want):
                return gpu.peak_tflops(precision), f"catalog:{gid}"
    local = cat.gpus.get("local")
    if local is not None:
        try:
            return local.peak_tflops(precision), f"catalog:local ({cat.paths.get('gpus/local', '')})"
        except ValueError:
            return None
    return None


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
