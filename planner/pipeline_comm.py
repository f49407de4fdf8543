"""Pipeline stage times with their communication, and the bubble those times make.

A pipelined step is the makespan of m micro batches through the stages (Alpa, Zheng et al. OSDI
2022, sec. 5.1 eq. 2, for stages of unequal time; Narayanan et al. SC21, arXiv 2104.04473,
sec. 2.2.1 / 2.2.2 for the bubble of 1F1B, (p - 1) / m, and of the interleaved schedule,
(p - 1) / (m v), both with equal stages):

    T = sum_i t_i + (m - 1) max_j t_j                          (1F1B, v = 1)

exact where the last stage is the slowest; planner/pipeline_stages.ratio_of takes the longest path
of the schedule (planner/plain_paths.py for v = 1, planner/interleaved_paths.py for v > 1). The t_i there are a stage's whole busy time per
micro batch, not its compute alone: whatever a stage spends per micro batch also delays the micro
batches behind it, on the steady (m - 1) term as in the fill and drain. Per micro batch, forward +
backward, stage i holding b_i blocks:

    t_i = b_i (c + x) + [i = p - 1] o + n_i e

- c: compute of one block (GEMMs, attention, element-wise kernels, framework overhead; the stack's
  factors applied), planner/throughput.py;
- x: the exposed TP collectives of one block (the all-reduces / reduce-scatters + all-gathers of
  Shoeybi et al. 2019 less what the stack overlaps), the exposed context-parallel exchange and the
  MoE all-to-alls: what planner/throughput.py charges the busiest stage, per block;
- o: the output layer and the loss (the last stage only);
- e: one point-to-point exchange of the activations between neighbouring stages,
  s b h / t bytes (the scatter/gather optimisation or sequence parallelism: Narayanan et al.
  sec. 4.1), planner/comm.p2p_s at the link between the two stages;
- n_i: exchanges per micro batch. Megatron batches a send with the receive that goes the other
  way over the same full-duplex link (schedules.py: send_forward_recv_backward after a forward,
  send_backward_recv_forward after a backward), so in the steady state the first and the last
  stages send and receive once per micro batch in each direction (activations out and gradients
  in for the first, the mirror for the last): n = 1; a middle stage does it on both sides: n = 2.
  With v model chunks per rank every chunk has both neighbours but the first chunk of rank 0 and
  the last chunk of rank p - 1: n = 2 v - 1 at the ends, 2 v in the middle. Summed over the
  stages, 2 (p v - 1) exchanges: one per boundary and direction, the latency of one micro batch
  there and back.

Without the exchanges and x in the t_i, a plan whose busiest stage is a middle one (more blocks,
hence more TP traffic, and two neighbours) got the fill and drain of stages as cheap as their
compute, and the output layer's share of the last stage weighed on the ratio as if comm did not
exist: pp 32, 64 blocks (2 + logits on the last stage) came out faster than 63 (2 blocks on the
middle stages) on some stacks.
"""

from __future__ import annotations

import numpy as np

from planner import comm
from planner.pipeline_stages import StageTimes, bubble_fraction, ratio_of, stage_times


def exchanges(pp, vpp) -> tuple[np.ndarray, np.ndarray]:
    """p2p exchanges per micro batch of (an end stage, a middle stage); 0 without a pipeline."""
    p = np.asarray(pp, dtype=np.float64)
    v = np.maximum(np.asarray(vpp, dtype=np.float64), 1.0)
    ends = np.where(p > 1, 2.0 * v - 1.0, 0.0)
    middle = np.where(p > 2, 2.0 * v, ends)
    return ends, middle


def exchange_s(links: comm.Links, act_bytes, inter_node) -> np.ndarray:
    """Seconds of one exchange of `act_bytes` (the send and the opposite receive at once)."""
    return comm.p2p_s(links, act_bytes, inter_node)


def busiest_exchanges(sp, per_layer, logits, pp, vpp) -> np.ndarray:
    """Exchanges per micro batch of the stage planner/pipeline_stages.busiest picks."""
    s0, sm, sl = stage_times(sp, per_layer, logits)
    ends, middle = exchanges(pp, vpp)
    is_end = (sl > np.maximum(s0, sm)) | (s0 > sm)
    return np.where(is_end, ends, middle)


def times(n_layers: int, sp, per_block, logits, exch_s, pp, vpp) -> StageTimes:
    """Busy seconds per micro batch of the stages and chunks (`per_block`: c + x above, `logits`: o,
    `exch_s`: e)."""
    ends, middle = exchanges(pp, vpp)
    t = np.asarray(per_block, dtype=np.float64)
    e = np.asarray(exch_s, dtype=np.float64)
    p = np.asarray(pp, dtype=np.float64)
    v = np.maximum(np.asarray(vpp, dtype=np.float64), 1.0)
    s0, sm, sl = stage_times(sp, t, logits)
    # chunk-level exchanges: rank 0's first chunk and rank p-1's last one have one neighbour
    head_n = np.where(p > 1, 1.0, 0.0)
    chunk_n = np.where(p > 1, 2.0, 0.0)
    return StageTimes(first=s0 + ends * e, middle=sm + middle * e, last=sl + ends * e,
                      head=sp.first_head * t + head_n * e, chunk=sp.middle_chunk * t + chunk_n * e,
                      tail=sp.last_tail * t + logits + head_n * e,
                      total=n_layers * t + logits + np.maximum(2.0 * (p * v - 1.0), 0.0) * e)


def makespan_s(st: StageTimes, pp, vpp, grad_accum) -> np.ndarray:
    """Seconds of m micro batches through the pipeline: m x the slowest stage plus the fill and
    drain (planner/pipeline_stages.ratio_of: 1F1B's longest path, m < p included; the SC21 bubble of
    an interleaved schedule with fewer micro batches than stages)."""
    m = np.asarray(grad_accum, dtype=np.float64)
    frac = bubble_fraction(pp, m, vpp) * ratio_of(st, pp, vpp, m)
    return m * st.slowest * (1.0 + frac)


def bubble_s(n_layers: int, sp, busy_s, pp_s, logits, exch_s, layers, with_logits, pp, vpp, grad_accum) -> np.ndarray:
    """Idle seconds per step of the busiest stage: the makespan of the pipeline (stage times with
    their comm) less `busy_s`, the busy time planner/throughput.py charges that stage per step
    (compute + exposed TP/CP/MoE comm + its p2p sends `pp_s`); it holds `layers` blocks and the
    output layer where `with_logits`. Its time per block, comm included, is what every stage pays
    per block. 0 without a pipeline."""
    m = np.asarray(grad_accum, dtype=np.float64)
    blocks_s = busy_s - pp_s - m * with_logits * logits
    per_block = blocks_s / (m * np.maximum(layers, 1e-12))
    st = times(n_layers, sp, per_block, logits, exch_s, pp, vpp)
    out = np.maximum(makespan_s(st, pp, vpp, m) - busy_s, 0.0)
    return np.where(np.asarray(pp) > 1, out, 0.0)
