"""Step time of ZeRO-Offload / ZeRO-Infinity / FSDP CPU offload per rank (pure, vectorised).

Ren et al., ATC'21 (ZeRO-Offload) sec. 4: gradients go to host during backward (overlapped with it),
the CPU runs Adam on the rank's shard (planner/cpu_optimizer.py), the updated 16-bit parameters come
back; parameter offload (ZeRO-Infinity, Rajbhandari et al. SC21; FSDP CPUOffload) also fetches the
parameter shard twice per micro batch (forward and backward).
"""

from __future__ import annotations

import numpy as np

from planner import comm, dp_comm
from planner.cpu_optimizer import cpu_adam_s
from planner.layout import OFFLOAD, Layout
from planner.memory import compute_dtype_bytes
from planner.system import System


def offload_s(layout: Layout, links: comm.Links, system: System, shard, adam_bytes_per_param: float,
              micro, bwd_micro, prof) -> np.ndarray:
    """Exposed offload time per step; `shard` the parameters one rank updates, `micro`/`bwd_micro` the
    compute time of one micro batch / of its backward (what transfers hide behind)."""
    ga = layout.grad_accum
    gb = dp_comm.grad_bytes(layout)
    pb = compute_dtype_bytes(layout)
    d2h = shard * gb / links.host_Bps * (1.0 + layout.shards_grads * (ga - 1.0))
    d2h_exposed = np.maximum(d2h - prof["overlap_host"] * ga * bwd_micro, 0.0)
    cpu_adam = cpu_adam_s(shard, adam_bytes_per_param, system, prof["cpu_optimizer_threads_per_rank"])
    h2d = shard * pb / links.host_Bps
    opt = d2h_exposed + cpu_adam + h2d
    fetch = 2.0 * shard * pb / links.host_Bps
    params = ga * np.maximum(fetch - prof["overlap_zero3"] * micro, 0.0)
    off = layout.offload
    return (off != OFFLOAD["none"]) * (opt + (off == OFFLOAD["optimizer+params"]) * params)
