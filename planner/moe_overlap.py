"""The expert-parallel all-to-all hidden behind compute (opt-in; off = planner/moe_time.py's fully exposed
all-to-all, unchanged).

- Batch-level overlap (Settings.moe_a2a_overlap; Megatron-Core --overlap-moe-expert-parallel-comm, "Overlap
  the EP A2A communication by batch-level overlapping in 1f1b stage", with --delay-wgrad-compute,
  megatron/training/arguments.py `_add_moe_args`; DeepSeek-V3, arXiv 2412.19437 sec. 3.2.1, DualPipe
  overlaps the forward of one micro batch with the backward of another): in the 1F1B steady state the
  forward of micro batch j+1 runs layer by layer beside the backward of micro batch j on two streams, the
  all-to-alls of each under the other's compute. Rule implemented: a micro batch's all-to-alls hide only
  in such a forward/backward pair; the busiest (first) stage's warm-up forwards and cool-down backwards
  have no partner and stay exposed. Warm-up: pp - 1 micro batches (PipeDream-Flush, Narayanan et al.
  SC21 sec. 2.2; Megatron-Core schedules.py: (pp - rank - 1) at rank 0), interleaved (vpp > 1)
  2 (pp - 1) + (vpp - 1) pp model chunks of 1/vpp of a micro batch each (Megatron-Core's
  forward_backward_pipelining_with_interleaving, microbatch_group_size_per_vp_stage = pp); at pp 1
  Megatron's combined 1F1B runs F0, then F(j+1) with B(j), then the last B: one unpaired micro batch.
  So ga - w of the ga micro batches pair (w = that warm-up, at least 1, at most ga): with one micro batch
  in flight nothing hides.
- Shared-expert overlap (Settings.moe_shared_expert_overlap; Megatron-Core --moe-shared-expert-overlap,
  "overlapping between shared expert computations and dispatcher communications"): each MoE layer's
  all-to-alls hide under its own shared expert's GEMMs (every micro batch, no partner needed). Megatron-Core
  refuses both overlaps together (TransformerConfig.__post_init__: "disable moe_shared_expert_overlap when
  enabling overlap_moe_expert_parallel_comm"): with both set, the batch-level overlap is modelled.
- SM contention: the all-to-all kernels occupy streaming multiprocessors while they run, so the compute
  beside them runs on the rest: DeepSeek-V3 (sec. 3.2.2) dedicates 20 of the H800's 132 SMs to
  communication (DeepEP's default, Megatron-LM --moe-deepep-num-sms 20). Of a pair's compute c and
  all-to-all a, the compute runs at (sms - 20) / sms speed while the all-to-all runs: the pair takes
  max(a, c + a x 20 / sms); beyond c: max(a - c, a x 20 / sms) exposed (never more than a, never less
  than the SM share of a).
"""

from __future__ import annotations

import numpy as np

COMM_SMS = 20  # DeepSeek-V3 sec. 3.2.2: "only 20 SMs are sufficient to fully utilize the bandwidths of IB and NVLink"
DEFAULT_SMS = 132  # H800 / H100 SXM: where the GPU entry gives no sm_count


def comm_sm_share(gpu) -> float:
    """The share of the GPU's SMs the all-to-all kernels take from the compute beside them."""
    sms = getattr(gpu, "sm_count", None) or DEFAULT_SMS
    return min(COMM_SMS / float(sms), 1.0)


def exposed_s(a2a_s, compute_s, share) -> np.ndarray:
    """What an all-to-all of `a2a_s` adds beside `compute_s` of compute slowed by `share` of the SMs."""
    a, c = np.asarray(a2a_s, dtype=np.float64), np.asarray(compute_s, dtype=np.float64)
    return np.maximum(a - c, share * a)


def unpaired_micro_batches(pp, vpp, ga) -> np.ndarray:
    """Micro batches of the first stage whose forward (warm-up) and backward (cool-down) have no partner."""
    pp, vpp, ga = (np.asarray(x, dtype=np.float64) for x in (pp, vpp, ga))
    chunks = 2.0 * (pp - 1.0) + (vpp - 1.0) * pp
    warmup = np.where(vpp > 1, chunks / np.maximum(vpp, 1.0), pp - 1.0)
    return np.minimum(np.maximum(warmup, 1.0), ga)


def batch_overlap_a2a_s(a2a_layer_s, moe_layers, layers, micro_s, pp, vpp, ga, share) -> np.ndarray:
    """Exposed all-to-all seconds per step with batch-level overlap: per MoE layer, a paired micro batch's
    all-to-all (forward's and backward's, `a2a_layer_s`) beside the layer's forward + backward compute
    (the stage's `micro_s` over its `layers`); unpaired micro batches fully exposed."""
    w = unpaired_micro_batches(pp, vpp, ga)
    per_layer_compute = micro_s / np.maximum(np.asarray(layers, dtype=np.float64), 1.0)
    paired = (np.asarray(ga, dtype=np.float64) - w) * exposed_s(a2a_layer_s, per_layer_compute, share)
    return moe_layers * (paired + w * a2a_layer_s)


def shared_overlap_a2a_s(a2a_layer_s, moe_layers, shared_layer_s, ga, share) -> np.ndarray:
    """Exposed all-to-all seconds per step with the shared expert's GEMMs (`shared_layer_s` per micro batch
    and MoE layer) beside every MoE layer's all-to-alls."""
    return np.asarray(ga, dtype=np.float64) * moe_layers * exposed_s(a2a_layer_s, shared_layer_s, share)


__all__ = ["COMM_SMS", "batch_overlap_a2a_s", "comm_sm_share", "exposed_s", "shared_overlap_a2a_s",
           "unpaired_micro_batches"]
