"""Pipeline fill and drain with stages of unequal work.

A synchronous pipeline (GPipe, or 1F1B as in Megatron-LM) of S stages running B micro batches
takes (Alpa, Zheng et al. OSDI 2022, sec. 5.1 eq. 2; the same critical path as Narayanan et al.
SC21 sec. 2.2 when the stages are equal)

    T = sum_i t_i + (B - 1) * max_j t_j

where t_i is the forward + backward time of one micro batch on stage i: the first micro batch
crosses every stage once on the way in and once on the way out, and the slowest stage sets the
pace in between. The bubble is therefore sum_{i != slowest} t_i, not (S - 1) * max t_j: when the
slowest stage is the last one because it also holds the output layer and the loss (a wide
vocabulary, few blocks per stage), or pp does not divide the layers, the fill and drain run
through the lighter stages and cost less. `ratio` is that bubble over (S - 1) * max t_j, the
factor on the equal-stage bubble (p - 1) / (m * v) of planner/throughput.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner import interleaved_paths, plain_paths


def ratio(n_layers: int, pp, heavy, light, per_layer, logits, last_is_busiest) -> np.ndarray:
    """(sum of the other stages' times) / ((pp - 1) x the slowest stage's time), per candidate.

    `heavy`/`light`: blocks on the fullest/emptiest stage (planner/memory.stage_layers: the last
    stage gets `light` blocks and the output layer `logits`); `per_layer`, `logits`: seconds of one
    block and of the output layer + loss per micro batch; `last_is_busiest`: the last stage is the
    slowest. 1.0 where pp is 1 (no bubble) or the stages are equal."""
    pp = np.asarray(pp, dtype=np.float64)
    per_layer = np.asarray(per_layer, dtype=np.float64)
    slowest = np.where(last_is_busiest, light * per_layer + logits, heavy * per_layer)
    total = n_layers * per_layer + logits
    others = np.maximum(total - slowest, 0.0)
    denom = (pp - 1.0) * slowest
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(denom > 0, others / np.where(denom > 0, denom, 1.0), 1.0)
    return np.clip(r, 0.0, 1.0)


def bubble_fraction(pp, grad_accum, vpp) -> np.ndarray:
    """Idle time of a stage over its busy time, stages equal: (p - 1) / (m v) when there are at
    least as many micro batches m as stages p (Narayanan et al. SC21, eq. 1 and 2), and more when
    the interleaved schedule has fewer: m < p micro batches never meet on a GPU, so they run down
    the chain of p x v model chunks (t / v each, t a stage's forward + backward) as through a
    plain pipeline of p v stages, (p v + m - 1) t / v in all: a bubble of (p - m) t + (m - 1) t / v.
    A step is never shorter than one micro batch crossing every stage (p t). Equal to (p - 1) / m
    without interleaving (v = 1), for any m."""
    p = np.asarray(pp, dtype=np.float64)
    m = np.asarray(grad_accum, dtype=np.float64)
    v = np.asarray(vpp, dtype=np.float64)
    return (np.maximum(p - m, 0.0) + (np.minimum(m, p) - 1.0) / v) / m


def stage_times(sp, per_layer, logits) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forward + backward seconds per micro batch of rank 0, the heaviest middle rank and rank p-1
    (which also runs the output layer and the loss) of a planner/stage_split.StageSplit."""
    t = np.asarray(per_layer, dtype=np.float64)
    return sp.first * t, sp.middle * t, sp.last * t + logits


def busiest(sp, per_layer, logits) -> tuple[np.ndarray, np.ndarray]:
    """(blocks of the busiest stage, whether it is the last one: the one with the output layer)."""
    s0, sm, sl = stage_times(sp, per_layer, logits)
    last = sl > np.maximum(s0, sm)
    return np.where(last, sp.last, np.where(s0 > sm, sp.first, sp.middle)), last


@dataclass(frozen=True)
class StageTimes:
    """Forward + backward seconds per micro batch of the stages the fill and drain cross."""

    first: np.ndarray  # rank 0 (all its chunks)
    middle: np.ndarray  # the heaviest rank between (0 where pp = 2)
    last: np.ndarray  # rank p-1, the output layer and the loss included
    head: np.ndarray  # rank 0's first chunk (virtual stage 0)
    chunk: np.ndarray  # one chunk of a middle rank
    tail: np.ndarray  # rank p-1's last chunk (virtual stage p v - 1), the output layer included
    total: np.ndarray  # every stage once: all blocks, the output layer (and every send, with comm)

    @property
    def slowest(self) -> np.ndarray:
        return np.maximum(np.maximum(self.first, self.middle), self.last)


def times_of(n_layers: int, sp, per_layer, logits) -> StageTimes:
    """Compute-only stage times of a split: `per_layer` seconds a block, `logits` the output layer."""
    t = np.asarray(per_layer, dtype=np.float64)
    s0, sm, sl = stage_times(sp, t, logits)
    return StageTimes(s0, sm, sl, sp.first_head * t, sp.middle_chunk * t, sp.last_tail * t + logits,
                      n_layers * t + logits)


def split_ratio(n_layers: int, sp, pp, vpp, grad_accum, per_layer, logits) -> np.ndarray:
    """`ratio_of` the compute-only stage times of a split (planner/stage_split.py)."""
    return ratio_of(times_of(n_layers, sp, per_layer, logits), pp, vpp, grad_accum)


def ratio_of(st: StageTimes, pp, vpp, grad_accum) -> np.ndarray:
    """`ratio` for any split of the blocks (planner/stage_split.py), with and without interleaving.

    v = 1: the longest path through 1F1B with the first, middle and last stages' times
    (planner/plain_paths.py; exact against the op-by-op replay, m < p included: the first p - m + 1
    stages then run all forwards before their backwards). Alpa's sum_i t_i + (m - 1) max_j t_j
    (above) is that where the slowest stage is the last one, and up to 31% above it where an earlier
    stage is slower (1F1B's warm-up forwards hide part of the round trip behind it). v > 1 (Megatron's interleaved 1F1B,
    Narayanan et al. SC21 sec. 2.2.2: each rank runs v model chunks of its blocks, a micro batch
    crosses the p v virtual stages in turn, and the equal-chunk bubble shrinks to (p - 1) t / v):
    the step is the longest of the ranks' own critical paths,

        T = max_j [ m T_j + sum_{r < j} c_r ]

    where T_j is rank j's forward + backward time per micro batch (all its chunks) and c_r the
    forward + backward time of rank r's first chunk: rank j starts once the first micro batch has
    crossed the first chunk of every rank before it and ends once its last backward has crossed
    them back; the warm-up micro batches of the interleaved schedule ((p - j - 1) x 2 + (v - 1) p
    forwards) keep it busy in between. Equal chunks c: the last rank gives m v c + (p - 1) c, the
    bubble (p - 1) c = (p - 1) t / v of SC21. It is a lower bound of the step; against a replay of
    Megatron's interleaved schedule op by op (tests/planner/test_interleaved_split.py) it is exact
    for equal chunks, for the embedding alone in the split, and within 1% for the embedding and
    the loss in the split (Llama 3's, pp >= 3). Where the last chunk z (the output layer's) is
    heavier than the middle ranks' chunks b that feed it, the per-rank sum runs low (up to 17% at
    pp 4-16, vpp 2): every rank's backward of chunk v-1 waits for rank p-1's, so the round of p
    micro batches through chunk v-1 goes at z a micro batch on every rank, the other v-1 rounds at
    b, the rounds overlapping by one op (b): with m >= p and p >= 3,

        T >= m (z + (v - 1) b) - (m / p) b + c_0 + (p - 1) b

    (c_0: rank 0's first chunk; found on the op-by-op replay, where it is exact with rank 0's
    chunks no heavier than b, and never above it; at pp 2 rank 0 feeds the last chunk, b is rank 0's
    chunk and the ends are p c_0). A heavy FIRST rank (its chunks heavier than b) adds the paths of
    planner/interleaved_paths.py: its cycle with rank p-1, its way through rank p-1's first round,
    and its drain. Every term is the weight of a path of the schedule, so a lower bound of the step;
    the bubble is not clipped at the plain 1F1B one (a heavy last chunk makes it longer). Against the
    replay: within 3% and never above for p 2-16, v 2-4, m p..4p, heavy first, middle and last
    chunks (tests/planner/test_pipeline_comm_bubble.py); up to 5% low with a first rank 1.25-1.5x
    the middle ones at m <= 3p, and up to 8% low with rank 0's first chunk much lighter than its
    others while they are heavier than b (not a split the planner makes).
    Returns the bubble T - m max_j T_j over the SC21 bubble (p - 1) max_j T_j / v."""
    p = np.asarray(pp, dtype=np.float64)
    v = np.asarray(vpp, dtype=np.float64)
    m = np.asarray(grad_accum, dtype=np.float64)
    s0, sm, sl, head, chunk = st.first, st.middle, st.last, st.head, st.chunk
    slowest = st.slowest
    # v = 1: the longest path of 1F1B (planner/plain_paths.py)
    others = np.maximum(st.total - slowest, 0.0)
    # (Alpa's sum is that path where the last stage is the slowest: kept there, to the bit)
    plain = (v <= 1) & (p >= 2) & (m >= 1) & (sl < slowest)
    if np.any(plain):
        i = plain.reshape(-1)  # the plans it concerns only (a few of a search)
        s0_, sm_, sl_, tot, p_, m_ = (np.broadcast_to(x, plain.shape).reshape(-1)[i] for x in (s0, sm, sl, st.total, p, m))
        mean = np.where(p_ > 2, (tot - s0_ - sl_) / np.maximum(p_ - 2.0, 1.0), 0.0)  # what the middles hold
        exact = plain_paths.step(s0_, np.where(p_ > 2, sm_, 0.0), sl_, p_, m_, interleaved_paths.FORWARD_SHARE,
                                 np.minimum(mean, sm_))
        flat = np.array(np.broadcast_to(others, plain.shape), dtype=np.float64).reshape(-1)
        flat[i] = np.maximum(exact - m_ * np.maximum(np.maximum(s0_, sm_), sl_), 0.0)
        others = flat.reshape(plain.shape)
    # v > 1: the critical path of rank 0, of the last middle rank, and of the last rank
    t_first = m * s0
    t_middle = np.where(p > 2, m * sm + head + np.maximum(p - 3, 0.0) * chunk, 0.0)
    t_last = m * sl + head + np.maximum(p - 2, 0.0) * chunk
    # the round of chunk v-1 paced by the last chunk, the other rounds by rank p-2's chunks (rank 0's at pp 2)
    vv = np.maximum(v - 1.0, 1.0)
    a, l = (s0 - head) / vv, (sl - st.tail) / vv  # rank 0's other chunks, rank p-1's other chunks
    x = np.where(p > 2, chunk, a)
    ends = np.where(p > 2, head + (p - 1.0) * x, p * head)  # pp 2: rank 0's first chunk, p micro batches
    t_tail = np.where((p >= 2) & (m >= p), m * (st.tail + (v - 1.0) * x) - m / np.maximum(p, 1.0) * x + ends, 0.0)
    # a heavy first rank: its cycle with rank p-1, its drain (planner/interleaved_paths.py)
    b = np.where(p > 2, chunk, 0.0)
    t_rank0 = interleaved_paths.rank0_longest(head, a, b, l, st.tail, p, v, m)
    longest = np.maximum(np.maximum(np.maximum(t_first, t_middle), t_last), np.maximum(t_tail, t_rank0))
    interleaved = (longest - m * slowest) * v
    bubble = np.where(v > 1, interleaved, others)
    denom = (p - 1.0) * slowest
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(denom > 0, bubble / np.where(denom > 0, denom, 1.0), 1.0)
    return np.maximum(r, 0.0)
