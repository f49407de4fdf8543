"""Exposed seconds of the ZeRO-1/2 parameter all-gather (the updated 16-bit parameters sent back to every
data-parallel rank after the sharded optimizer step).

DeepSpeed ZeRO-1/2 all-gathers inside `optimizer.step()` once the partition is updated
(deepspeed/runtime/zero/stage_1_and_2.py: `step` -> `all_gather_dp_groups`), before the next forward
starts: nothing runs beside it, so its profile value is 0. Megatron-Core's distributed optimizer with
`--overlap-param-gather` ("If true, overlap param all-gather with forward compute",
megatron/core/distributed/distributed_data_parallel_config.py) launches the gathers bucket by bucket and
waits for each one in the forward pre-hook of the module that needs it (the next bucket's gather is
dispatched while the current one's layers run): the all-gather hides behind the next step's first forward
pass, except the first bucket, which nothing precedes. The profile's `overlap_param_gather` is the share of
that forward the gathers can hide behind.
"""

from __future__ import annotations

import numpy as np


def exposed_s(allgather_s, fwd_micro_s, overlap, buckets) -> np.ndarray:
    """Exposed all-gather seconds per step: hidden behind `overlap` x the first micro batch's forward,
    never below one bucket's share (the first gather waits for nothing to hide behind)."""
    ag = np.asarray(allgather_s, dtype=np.float64)
    return np.maximum(ag - overlap * np.asarray(fwd_micro_s), ag / np.maximum(buckets, 1.0))
