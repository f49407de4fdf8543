"""Exposed seconds of the ZeRO-1/2 parameter all-gather (the updated 16-bit parameters sent back to every
data-parallel rank after the sharded optimizer step).

DeepSpeed ZeRO-1/2 all-gathers inside `optimizer.step()` once the partition is updated
(deepspeed/runtime/zero/stage_1_and_2.py: `step` -> `all_gather_dp_groups`), before the next forward
starts: nothing runs beside it, so its profile value is 0. Megatron-Core's distributed optimizer with
`--overlap-param-gather` ("If true, overlap param all-gather with forward compute",
megatron/core/distributed/distributed_data_parallel_config.py) launches the gathers bucket by bucket and
waits for each one in the forward pre-hook of the module that needs it (the next bucket's gather is
dispatched while the current one's layers run): the all-gather hides behind the next step's first forward
pass, except the first bucket, which nothing precedes: the one holding the input embedding, which the backward
completes last (planner/grad_buckets.py). The profile's `overlap_param_gather` is the share of that forward the
gathers can hide behind.
"""

from __future__ import annotations

import numpy as np

from planner import grad_buckets


def exposed_s(allgather_s, fwd_micro_s, overlap, buckets, first_share=None) -> np.ndarray:
    """Exposed all-gather seconds per step: the gathers as a pipeline beside `overlap` x the first micro batch's
    forward (bucket i is needed when the forward reaches its layers), never below the first bucket's share
    (`first_share`, else one bucket's: it waits for nothing to hide behind)."""
    first = 1.0 / np.maximum(buckets, 1.0) if first_share is None else first_share
    return grad_buckets.pipelined_s(allgather_s, overlap * np.asarray(fwd_micro_s), buckets, first)
