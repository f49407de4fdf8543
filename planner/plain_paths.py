"""The step of a plain (non-interleaved) 1F1B pipeline whose first, middle and last stages differ:
the longest path through the schedule, exact against an op-by-op replay where m >= p.

The schedule (PipeDream-Flush, Narayanan et al. SC21 sec. 2.2.1, fig. 4; Megatron-Core
megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_without_interleaving:
num_warmup_microbatches = min(p - rank - 1, m)): stage j runs W_j = p - 1 - j warm-up forwards,
then one forward and one backward in turn, then its last W_j backwards. Forward k of stage j waits
for forward k of stage j - 1, backward k for backward k of stage j + 1.

Number stage j's ops 0 .. 2m - 1 in program order: forward k is op max(k, 2k - W_j), backward k op
min(W_j + 2k + 1, m + k). A forward edge j -> j + 1 keeps the op number in the warm-up (k < W_j) and
adds one after it; a backward edge j + 1 -> j adds one, and keeps it in the drain (k >= m - W_j).
Every path of the schedule is then a path on a grid of columns 0 .. 2m - 1 (op numbers) by stages:
in the steady part a column holds one op of the path, forwards on a diagonal down, backwards on a
diagonal up, a forward and a backward in turn along a stage; in the warm-up triangle (column +
stage < p - 1) the path may go down a column for free, in the drain triangle (column - stage >
2m - p) up. The step is the heaviest path from forward 0 on stage 0 to backward m - 1 on stage 0.

With the planner's stages (stage 0: t_a = f_a + b_a per micro batch, the p - 2 middle ones t_b
each, the last one t_c with the output layer), the heaviest path runs along one stage j for its
steady part, m t_j in all, and trades its first W_j + 1 ops (forwards, f_j each) for the best of

- `direct`: the forward of micro batch 0 down to j, waiting in the warm-up on the stage i <= j with
  the heaviest forward: sum_{i <= j} f_i + W_j max_{i <= j} f_i;
- `round trip`: W_j's columns first spent on stage 0 (x + 1 forwards), then micro batch x down to
  stage d = p - 1 - x and its backward 0 back up to stage j + 1:
  (x + 1) f_a + sum_{0 < i <= d} f_i + sum_{j < i <= d} b_i, x in 0 .. W_j - 1 (linear in x
  past x = 0, so x = 0, 1 and W_j - 1 are tried): a heavy first stage waits for the last stage's
  first backward (Alpa's sum_i t_i + (m - 1) max t was up to 31% above the step there);

and its last W_j + 1 ops (backwards) for the mirror of these, forward and backward swapped (the
schedule read backwards in time is 1F1B again with f and b exchanged). Paths that switch their
steady stage are linear in the switch point, so one of these ends is as long. Middle stages being
equal, j = 1 and j = p - 2 are the only middle ones to try (the sum of two convex functions of j).
The step is the longest of these over j. Checked against the replay (tests/planner/test_plain_1f1b.py):
exact (to rounding) for p 2-16, m p..8p, any stage times and any forward share.

With m < p, stages 0 .. p - m warm up with min(p - 1 - j, m) >= m - 1 forwards: each runs all its
forwards, then all its backwards (GPipe-like), and every path crosses them as one GPipe block: down
it to forward k of stage p - m (sum of their forwards + k x the heaviest forward), back up from
backward k' (sum of their backwards + (m - 1 - k') x the heaviest backward); a path turning inside
the block is never longer than one going on down (all times >= 0). The block is then one stage at
its heaviest time (forward k of a GPipe-like stage ends at (k + 1) x its forward) plus a constant,
the block's sum less its heaviest: the step of m micro batches on the p' = m stages (block, the
m - 2 middle stages below it, the last one) of the families above (m >= p'), plus that constant;
m = 1: the sum of the stages. Exact (to rounding) against the replay for p 2-24, m 1..p - 1 (and the
block's reduction for any stage times).
"""

from __future__ import annotations

import numpy as np


def _gains(f, b, p):
    """What the best way into the steady part of stage 0, of middle stage 1, of middle stage p - 2 and
    of the last stage adds to that stage's own first W_j + 1 forwards (`f`, `b`: forward and
    backward times of stage 0, a middle stage and the last one; swap them for the way out)."""
    f_a, f_b, f_c = f
    b_a, b_b, b_c = b
    t_b, t_c = f_b + b_b, f_c + b_c
    three = p >= 3.0
    # stage 0: round trips to stage p-1 (x = 0), p-2 (x = 1) and 1 (x = p-2); the direct way is its own
    trips = np.maximum(f_a + (p - 2.0) * t_b + t_c,
                       np.where(three, np.maximum(2.0 * f_a + (p - 2.0) * t_b, (p - 1.0) * f_a + t_b), 0.0))
    g_first = np.maximum(trips - p * f_a, 0.0)
    g_last = f_a + (p - 2.0) * f_b  # W = 0: micro batch 0 down every stage

    def middle(j):
        w = p - 1.0 - j
        direct = f_a + j * f_b + w * np.maximum(f_a, f_b)
        to_last = f_a + (p - 2.0) * f_b + f_c + (p - 2.0 - j) * b_b + b_c  # x = 0
        to_p2 = np.where(w >= 2.0, 2.0 * f_a + (p - 2.0) * f_b + (p - 2.0 - j) * b_b, 0.0)  # x = 1
        to_next = np.where(w >= 2.0, w * f_a + (j + 1.0) * f_b + b_b, 0.0)  # x = W_j - 1: down to middle stage j + 1
        return np.maximum(np.maximum(direct, to_last), np.maximum(to_p2, to_next)) - (w + 1.0) * f_b

    return g_first, middle(1.0), middle(np.maximum(p - 2.0, 1.0)), g_last


def step(first, middle, last, pp, grad_accum, fwd_share, middle_mean=None) -> np.ndarray:
    """Seconds of m micro batches through p stages of 1F1B (stage times forward + backward per micro
    batch: `first`, `middle` for each of the p - 2 between, `last`); p >= 2, m >= 1 (m < p: the
    GPipe-like block of the first p - m + 1 stages as one stage, see above).
    `middle_mean`: the middle stages' mean where they differ (an even split pp does not divide: some
    hold one block more, planner/stage_split.py), taken for the fill and drain across them (and the
    block's sum), `middle` (the heaviest) for the steady part (and the block's heaviest); with the last
    stage the slowest the step is then Alpa's sum of the true stage times, exact."""
    t_a, t_b, t_c, p, m = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64)
                                                for x in (first, middle, last, pp, grad_accum)))
    t_mean = t_b if middle_mean is None else np.broadcast_to(np.asarray(middle_mean, dtype=np.float64), t_b.shape)
    few = m < p  # stages 0 .. p - m: one GPipe-like block (p - m >= 1 middle stages in it)
    heavy = np.maximum(t_a, t_b)
    block_rest = np.where(few, t_a + (p - m) * t_mean - heavy, 0.0)
    one = t_a + (p - 2.0) * t_mean + t_c  # m = 1: the stages' sum
    t_a, p = np.where(few, heavy, t_a), np.where(few, np.maximum(m, 2.0), p)
    t_b, t_mean = np.where(p > 2, t_b, 0.0), np.where(p > 2, t_mean, 0.0)
    return np.where(m <= 1, one, block_rest + _steady_step(t_a, t_b, t_c, t_mean, p, m, float(fwd_share)))


def _steady_step(t_a, t_b, t_c, t_mean, p, m, fs) -> np.ndarray:
    """`step` where m >= p (the families of the module's text)."""
    f = (fs * t_a, fs * t_mean, fs * t_c)
    b = (t_a - f[0], t_mean - f[1], t_c - f[2])
    g_in, g_out = _gains(f, b, p), _gains(b, f, p)
    mids = np.where(p >= 3.0, m * t_b + np.maximum(g_in[1] + g_out[1], g_in[2] + g_out[2]), 0.0)
    return np.maximum(np.maximum(m * t_a + g_in[0] + g_out[0], m * t_c + g_in[3] + g_out[3]), mids)
