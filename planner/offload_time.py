"""Step time of ZeRO-Offload / ZeRO-Infinity / FSDP CPU offload per rank (pure, vectorised).

Ren et al., ATC'21 (ZeRO-Offload) sec. 4: gradients go to host during backward (overlapped with it),
the CPU runs Adam on the rank's shard (planner/cpu_optimizer.py), the updated 16-bit parameters come
back; parameter offload (ZeRO-Infinity, Rajbhandari et al. SC21; FSDP CPUOffload) also fetches the
parameter shard twice per micro batch (forward and backward).

The gradients reach the host in the optimizer's fp32, not in the 16-bit wire dtype the paper's 4M
count assumes: DeepSpeed ZeRO-1/2 casts each partition to float before the copy
(`async_inplace_copy_grad_to_fp32_buffer_from_gpu`, deepspeed/runtime/zero/stage_1_and_2.py) and,
with gradient accumulation, moves the 16-bit accumulation buffer down and back up every micro
batch (`async_accumulate_grad_in_cpu_via_gpu`, both copies on one stream: 2 + 2 B); FSDP casts to
the fp32 parameter dtype before `_offload_grad` (torch/distributed/fsdp/_runtime_utils.py). So
4 B per parameter cross the link each time the gradient shard moves (2 B in pure bf16).

With the parameters offloaded too, they stay on the host, where the CPU optimizer updates them; the first fetch
of the updated shard cannot start before the CPU step ends, as ZeRO-Offload's upload cannot: it is counted as
that upload, unhidden (the sanity sweep's rule: more offload is never faster). FSDP fetches its host shard in the dtype it stores
it, fp32 under mixed precision, and casts on the GPU: `flat_param._local_shard.to(self.device)` before the
copy into the low-precision shard (FSDP1, torch/distributed/fsdp/_flat_param.py `_use_low_precision_shard`),
`sharded_param_data.to(self.device)` before `_to_dtype_if_needed` (FSDP2, _fully_shard/_fsdp_param.py
`all_gather_inputs`); DeepSpeed ZeRO-3 keeps 16-bit partitions on the host (2 B).
"""

from __future__ import annotations

import numpy as np

from planner import comm
from planner.cpu_optimizer import cpu_adam_s
from planner.layout import OFFLOAD, PREC, Layout
from planner.memory import _is_mixed, compute_dtype_bytes
from planner.system import System


def host_grad_bytes(layout: Layout) -> np.ndarray:
    """Link bytes per parameter each time the gradient shard goes to the host: fp32, or 2 B in
    pure bf16 (no fp32 master; see the module note)."""
    return np.where(layout.precision == PREC["bf16_pure"], 2.0, 4.0)


def offload_s(layout: Layout, links: comm.Links, system: System, shard, adam_bytes_per_param: float,
              micro, bwd_micro, prof) -> np.ndarray:
    """Exposed offload time per step; `shard` the parameters one rank updates, `micro`/`bwd_micro` the
    compute time of one micro batch / of its backward (what transfers hide behind)."""
    ga = layout.grad_accum
    gb = host_grad_bytes(layout)
    pb = compute_dtype_bytes(layout)
    d2h = shard * gb / links.host_Bps * (1.0 + layout.shards_grads * (ga - 1.0))
    d2h_exposed = np.maximum(d2h - prof["overlap_host"] * ga * bwd_micro, 0.0)
    cpu_adam = cpu_adam_s(shard, adam_bytes_per_param, system, prof["cpu_optimizer_threads_per_rank"])
    off = layout.offload
    params_on_host = off == OFFLOAD["optimizer+params"]
    fetch_bytes = np.where(layout.is_fsdp & _is_mixed(layout), 4.0, pb)  # FSDP: its fp32 host shard
    # the updated parameters reach the GPU after the CPU step: uploaded (ZeRO-Offload), or fetched first thing
    h2d = shard * np.where(params_on_host, fetch_bytes, pb) / links.host_Bps
    opt = d2h_exposed + cpu_adam + h2d
    fetch = 2.0 * shard * fetch_bytes / links.host_Bps
    params = ga * np.maximum(fetch - prof["overlap_zero3"] * micro, 0.0)
    return (off != OFFLOAD["none"]) * (opt + params_on_host * params)
