"""Megatron-Core's data-parallel collectives under the interleaved pipeline schedule (vpp > 1): one gradient
reduction and one parameter all-gather per model chunk (pure, vectorised; planner/dp_comm.py uses them).

Each of a stage's vpp model chunks is its own DistributedDataParallel with its own buffer; only the first chunk of
the first stage is split into buckets ("Turn off bucketing for model_chunk 2 onwards, since communication for these
model chunks is overlapped with compute anyway": megatron/training/training.py get_model, `disable_bucketing=
(model_chunk_idx > 0)`; distributed_data_parallel.py turns it off on every stage past the first, "data-parallel
communication on these stages is not on the critical path").

Gradients (megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving, with
Megatron-LM's default --delay-grad-reduce: `config.grad_sync_func = [model_chunk.start_grad_sync ...]`,
megatron/training/training.py): a chunk's whole reduction is launched after the backward of its last micro batch,
never bucket by bucket during it. In the cool-down the chunks finish in reverse, p micro batches apart (p = pp, the
schedule's group of micro batches per chunk), so chunk k > 0 has k x p chunk backwards left to hide behind, and
chunk 0, whose last backward ends the step, none ("Launch any remaining grad reductions"). Stage s launches each
chunk's reduction s micro batches later (`grad_sync_microbatch_id = microbatch_id - pipeline_parallel_rank`, to
launch them "at the same time across the pipeline-parallel group") and ends its backward s micro batches earlier:
the first stage sets the exposure. On one communication stream, with c = comm / vpp per chunk and h = p x (hidden backward of one micro batch) / vpp:

    exposed = c + (vpp - 1) x max(0, c - h)

(the chunks k = vpp-1 .. 1 queue up when c > h; chunk 0's reduction is exposed whole).

Parameters (--overlap-param-gather, megatron/core/optimizer/distrib_optimizer.py zero_grad: "launch all-gather
for first accessed bucket here before forward compute is initiated. The all-gather for the next bucket will be
launched in the forward pre-hook when this all-gather finishes"): chunk 0's buckets are gathered as a pipeline
beside its first micro batch's forward (planner/param_gather.py), each later chunk in one call launched when the
previous chunk's parameters are first used: chunk 1 when chunk 0's last bucket is, in chunk 0's first forward,
p - 1 chunk forwards before its own first forward (the schedule runs p micro batches of a chunk before the next
chunk's); chunk k > 1 at chunk k-1's first forward, p chunk forwards ahead:

    exposed = pipelined(c, f / vpp, buckets of chunk 0) + max(0, c - (p - 1) x f / vpp)
              + (vpp - 2) x max(0, c - p x f / vpp)
"""

from __future__ import annotations

import numpy as np

from planner import grad_buckets


def on(layout, prof) -> np.ndarray:
    """The plans this applies to: vpp > 1 under a stack with Megatron-Core's own buckets (the profile's
    grad_bucket_params > 0 and finite; Megatron-LM's local DDP, one flat buffer after backward, is not)."""
    own = np.asarray(prof["grad_bucket_params"], dtype=np.float64)
    return (np.asarray(layout.vpp) > 1) & (own > 0) & np.isfinite(own)


def chunk0_buckets(params, plan_bucket_elems, dp, vpp, prof) -> np.ndarray:
    """Buckets of the first model chunk (Megatron-Core's rule over a chunk's parameters; `plan_bucket_elems`: the
    plan's own size where the stack has no rule, as planner/grad_buckets.count)."""
    v = np.maximum(np.asarray(vpp, dtype=np.float64), 1.0)
    return grad_buckets.count(np.asarray(params, dtype=np.float64) / v, plan_bucket_elems, dp, prof)


def grad_sync_s(comm_s, hide_s, pp, vpp) -> np.ndarray:
    """Exposed seconds of the per-chunk gradient reductions (`comm_s` in all; `hide_s`: the share of one micro
    batch's backward on the stage that a concurrent collective can hide behind)."""
    v = np.maximum(np.asarray(vpp, dtype=np.float64), 1.0)
    c = np.asarray(comm_s, dtype=np.float64) / v
    h = np.asarray(pp, dtype=np.float64) * np.maximum(np.asarray(hide_s, dtype=np.float64), 0.0) / v
    # schedules.py (interleaved, grad_sync_func): chunk k's reduction after its last backward, k x p chunk
    # backwards before the end; chunk 0's after the last one ("Launch any remaining grad reductions")
    return c + (v - 1.0) * np.maximum(c - h, 0.0)


def param_gather_s(comm_s, hide_s, pp, vpp, chunk0_buckets) -> np.ndarray:
    """Exposed seconds of the per-chunk parameter all-gathers (`hide_s`: the share of one micro batch's
    forward on the stage they can hide behind; `chunk0_buckets`: the first chunk's buckets)."""
    v = np.maximum(np.asarray(vpp, dtype=np.float64), 1.0)
    c = np.asarray(comm_s, dtype=np.float64) / v
    f = np.maximum(np.asarray(hide_s, dtype=np.float64), 0.0) / v
    n0 = np.maximum(np.asarray(chunk0_buckets, dtype=np.float64), 1.0)
    # chunk 0: bucket by bucket behind its first forward (distributed_data_parallel.py forward pre-hook)
    first = grad_buckets.pipelined_s(c, f, n0, 1.0 / n0)
    # chunk k > 0: one call, launched when chunk k-1's parameters are first used: p - 1 chunk forwards ahead for
    # chunk 1 (launched in chunk 0's first forward), p for the others (forward pre-hook chain)
    p = np.asarray(pp, dtype=np.float64)
    second = np.where(v > 1.0, np.maximum(c - (p - 1.0) * f, 0.0), 0.0)
    return first + second + np.maximum(v - 2.0, 0.0) * np.maximum(c - p * f, 0.0)
