"""Bucketed data-parallel gradient reduction overlapped with backward, as a pipeline (DDP, ZeRO-1/2, Megatron's
distributed optimizer; pure, vectorised).

PyTorch DDP and Megatron-Core's DDP split the gradients into buckets in reverse parameter order and launch each
bucket's collective as soon as the backward has produced all its gradients, one after the other on the
communication stream (Li et al., "PyTorch Distributed", VLDB 2020, sec. 3.2.3 and 4.1; Megatron-Core
`--overlap-grad-reduce`, megatron/core/distributed/param_and_grad_buffer.py). With n buckets the first is ready
after about 1/n of the backward, and the last one holds the input embedding, whose gradient is complete only
when the backward ends (Megatron-Core's distributed optimizer even gives the shared embedding a bucket of its
own: param_and_grad_buffer.py `_does_param_require_new_bucket`). The communication stream then ends

    max(comm - overlap x backward x (1 - 1/n), last bucket's comm)

after the backward: all of the communication less the backward left once the first bucket is ready, or, when
there is more than enough compute, the last bucket, which nothing is left to hide. `overlap` is the share of
that backward a concurrent collective leaves to hide behind (the stack profile's overlap_* prior).

Megatron-Core's bucket, unless `--ddp-bucket-size` is given, is max(40,000,000, 1,000,000 x dp) parameters
("larger DP sizes need larger buckets to ensure collectives do not become latency-bound",
megatron/core/distributed/distributed_data_parallel.py and distributed_data_parallel_config.py `bucket_size`);
its parameter all-gather (`--overlap-param-gather`) uses the same buckets. A stack profile states that rule with
`grad_bucket_params` > 0 (and `grad_bucket_params_per_rank`); 0 keeps the plan's DeepSpeed-style bucket knobs
(reduce/allgather_bucket_elems). The dp term keeps each rank's chunk of a ring reduce-scatter, whose latency
grows as n - 1 steps (planner/comm.py, busbw_curve.py), the same size.
"""

from __future__ import annotations

import numpy as np

# Megatron-Core's default bucket, parameters (megatron/core/distributed/distributed_data_parallel.py,
# `ddp_config.bucket_size = max(40000000, 1000000 * dp_size)`).
MEGATRON_BUCKET_PARAMS = 40_000_000
MEGATRON_BUCKET_PARAMS_PER_RANK = 1_000_000


def count(params, plan_bucket_elems, dp, prof) -> np.ndarray:
    """Buckets of one GPU's `params`: the stack's own rule (`grad_bucket_params`, at least
    `grad_bucket_params_per_rank` x dp, Megatron-Core's) where the profile sets one, else the plan's knob."""
    own = np.asarray(prof["grad_bucket_params"], dtype=np.float64)
    rule = np.maximum(own, np.asarray(prof["grad_bucket_params_per_rank"], dtype=np.float64) * dp)
    size = np.where(own > 0, rule, plan_bucket_elems)
    return np.maximum(np.ceil(np.asarray(params, dtype=np.float64) / size), 1.0)


def pipelined_s(comm_s, hide_s, buckets, last_share) -> np.ndarray:
    """Exposed seconds of `buckets` collectives taking `comm_s` in all, each launched when the backward produces
    its gradients, `hide_s` (overlap share x backward seconds) beside them: never below the last bucket's
    share `last_share` of the communication, never above all of it."""
    comm_s = np.asarray(comm_s, dtype=np.float64)
    n = np.maximum(np.asarray(buckets, dtype=np.float64), 1.0)
    hidden = np.maximum(np.asarray(hide_s, dtype=np.float64), 0.0) * (1.0 - 1.0 / n)
    return np.maximum(comm_s - hidden, comm_s * np.clip(last_share, 0.0, 1.0))
