"""A measured peak memory and the prediction to compare it with, by how it was measured.

Three tools report a training run's "peak memory", and they count different things:

- `allocated`: `torch.cuda.max_memory_allocated()`, the tensors alive at the peak;
- `reserved`: `torch.cuda.max_memory_reserved()`, what the caching allocator holds from the
  driver: allocated + the cached blocks it has not returned (fragmentation, freed transients).
  torchtitan logs this (`memory: {max_reserved_gib}GiB`, torchtitan/metrics.py);
- `nvidia-smi`: the device's used memory: reserved + what lives outside PyTorch's allocator, the
  CUDA context with its loaded kernels and NCCL's own buffers (NCCL_BUFFSIZE per channel and
  peer, NCCL env docs). BLOOM's prequel measured 1573 MiB for the context alone on an A100
  (`torch.ones(1).cuda()` in nvidia-smi; bigscience train/tr11-176B-ml/chronicles-prequel.md).

PyTorch docs, "CUDA semantics / Memory management": "the unused memory managed by the allocator
will still show as if used in nvidia-smi"; `memory_reserved` vs `memory_allocated`.

The planner's memory terms (planner/memory.py) map onto them: `runtime_bytes` (CUDA context,
NCCL) is outside the allocator, `fragmentation_bytes` is reserved but not allocated.
"""

from __future__ import annotations

import numpy as np

from planner.errors import PlanError

CONVENTIONS = ("nvidia-smi", "reserved", "allocated")
# How each published source measured `measured_peak_mem_GB`, as the source states it
# (validation/data/README.md); a runs file may give the column `measured_peak_mem_convention`.
_MEM_CONVENTION = {
    # torchtitan logs `max_reserved_gib` (torch.cuda.memory_stats' reserved_bytes.all.peak, metrics.py)
    "torchtitan": "reserved",
    # chronicles-prequel: "Mem = max memory used by the first (last) nodes", read with `nvidia-smi`
    "bloom_prequel": "nvidia-smi",
}


def peak_bytes(mem: dict[str, np.ndarray], convention: str) -> np.ndarray:
    """The predicted peak as `convention` reports it, from `memory.memory_arrays`' terms."""
    total = np.asarray(mem["total_bytes"], dtype=np.float64)
    if convention == "nvidia-smi":
        return total
    outside_allocator = np.asarray(mem["runtime_bytes"], dtype=np.float64)
    if convention == "reserved":
        return total - outside_allocator
    if convention == "allocated":
        return total - outside_allocator - np.asarray(mem["fragmentation_bytes"], dtype=np.float64)
    raise ValueError(f"unknown peak-memory convention {convention!r} (known: {', '.join(CONVENTIONS)})")


def convention_of(row: dict[str, str], notes: list[str]) -> str:
    """The row's `measured_peak_mem_convention`, else its source's (README), else nvidia-smi."""
    v = (row.get("measured_peak_mem_convention") or "").strip().lower()
    if v:
        if v not in CONVENTIONS:
            raise PlanError("measured_peak_mem_convention",
                            f"row {row['id']}: {v!r} is not one of {', '.join(CONVENTIONS)}")
        return v
    known = _MEM_CONVENTION.get(row["id"].rsplit("_", 1)[0])
    if known:
        return known
    if (row.get("measured_peak_mem_GB") or "").strip():
        notes.append("peak memory convention not stated: nvidia-smi (device total)")
    return "nvidia-smi"
