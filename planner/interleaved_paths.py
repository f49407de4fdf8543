"""Critical paths of Megatron's interleaved 1F1B schedule that the per-rank sum of
planner/pipeline_stages.ratio_of misses when the model chunks are unequal.

The schedule (Narayanan et al. SC21 sec. 2.2.2; megatron/core/pipeline_parallel/schedules.py
forward_backward_pipelining_with_interleaving): rank r runs W_r = 2 (p - r - 1) + (v - 1) p warm-up
forwards, then one forward and one backward in turn, then the remaining backwards; its forward op k
is chunk (k mod p v) // p of micro batch (k // p v) p + k mod p, its backwards go from the last chunk
down. A micro batch crosses the p v virtual stages c p + r in turn. The step is the longest path
through these ops; each function below is the weight of one family of paths (so a lower bound of
the step, never above it), read off an op-by-op replay of the schedule
(tests/planner/test_interleaved_split.replay). Chunk times per micro batch, forward + backward:
rank 0 `h` (its first chunk, virtual stage 0) and `a` (the others), a middle rank `b`, rank p-1 `l`
(all but its last) and `z` (its last chunk, with the output layer). m micro batches, m >= p.

- `rank0_cycle`: in the steady state rank 0 and rank p-1 hand each group of p micro batches to one
  another: rank p-1 runs the round of chunk v-1 (p z), then rank 0 its ((v - 1) p - 2) forward and
  backward pairs of chunks 1..v-1 (a each) between the edges stage p-1 -> p and p -> p-1, and rank
  p-1 one chunk l; with the fill (rank 0's first p (v - 1) + 1 forwards, the first micro batch down
  the middle ranks) and the drain (back up, rank 0's last backwards):
      T >= m (z + (v-1) a) - (m/p) (2a - l) + p h + (p - 2) b + (3 - p) a - l.
  It is the heavy FIRST chunk's bound (rank 0's blocks heavier than the middle ranks', with an output
  layer on rank p-1): the per-rank sum was up to 28% low there.
- `rank0_drain`: rank 0 the busiest rank: it idles between its last warm-up forward and the first
  backward it may run. Rank r enters its steady state with forward W_r followed by backward 0
  (chunk v-1 of micro batch 0), so rank 0's backwards wait for rank 0's forwards 0..W_r, that
  forward down ranks 1..r and micro batch 0's backward of chunk v-1 back up ranks r..1; then rank
  0 runs all its backwards and its forwards after W_0. The longest over r. Forward and backward
  split a chunk's time 1 : 2 (a backward computes two GEMMs per forward GEMM; Narayanan et al.
  SC21 sec. 5.1 count 2x the forward FLOPs in the backward pass).
"""

from __future__ import annotations

import numpy as np

FORWARD_SHARE = 1.0 / 3.0  # forward : backward = 1 : 2 of a chunk's time


def rank0_cycle(h, a, b, l, z, p, v, m) -> np.ndarray:
    """Weight of the rank 0 <-> rank p-1 steady-state path above (0 where m < p or v = 1)."""
    on = (m >= p) & (v > 1) & (p >= 2)
    t = (m * (z + (v - 1.0) * a) - m / np.maximum(p, 1.0) * (2.0 * a - l) + p * h
         + np.maximum(p - 2.0, 0.0) * b + (3.0 - p) * a - l)
    return np.where(on, t, 0.0)


def _chunk0_ops(n, p, v):
    """How many of a rank's forward ops 0..n-1 run chunk 0."""
    n = np.maximum(n, 0.0)
    pv = p * v
    return np.floor(n / pv) * p + np.minimum(np.mod(n, pv), p)


def _back0_ops(n, p, v):
    """How many of a rank's backward ops 0..n-1 run chunk 0 (backwards go from chunk v-1 down)."""
    n = np.maximum(n, 0.0)
    pv = p * v
    return np.floor(n / pv) * p + np.maximum(np.mod(n, pv) - (v - 1.0) * p, 0.0)


def _rank0_from(k, h, a, p, v, m):
    """Rank 0's busy time from its forward op k to the end of the step (its later forwards, and its
    backwards from the one paired with forward k on)."""
    fs = FORWARD_SHARE
    total = m * v
    w0 = np.minimum(2.0 * (p - 1.0) + (v - 1.0) * p, total)
    n_f = np.maximum(total - k, 0.0)
    f0 = _chunk0_ops(total, p, v) - _chunk0_ops(k, p, v)
    first_b = np.maximum(k - w0, 0.0)
    n_b = total - first_b
    b0 = _back0_ops(total, p, v) - _back0_ops(first_b, p, v)
    return fs * (f0 * h + (n_f - f0) * a) + (1.0 - fs) * (b0 * h + (n_b - b0) * a)


def rank0_round(h, a, b, l, z, p, v, m) -> np.ndarray:
    """Rank 0's first p (v - 1) + 1 forwards, micro batch 0 down the middle ranks, rank p-1's first
    round of chunk v-1 (p z) and its next forward (chunk 0 of micro batch p), then rank 0 from the
    forward that one feeds (chunk 1 of micro batch p) to the end; 0 where m < 2 p or v = 1."""
    p, v, m = (np.asarray(x, dtype=np.float64) for x in (p, v, m))
    fs = FORWARD_SHARE
    fill = fs * (p * h + ((v - 2.0) * p + 1.0) * a + np.maximum(p - 2.0, 0.0) * b)
    t = fill + p * z + fs * l + _rank0_from((v + 1.0) * p, h, a, p, v, m)
    return np.where((m >= 2.0 * p) & (v > 1), t, 0.0)


def rank0_drain(h, a, b, l, z, p, v, m) -> np.ndarray:
    """Longest over r of rank 0's warm-up forwards, the hop to rank r and back, and rank 0's
    backwards (above); 0 where v = 1 or m < p. 1-d arrays of one length."""
    h, a, b, l, z, p, v, m = (np.asarray(x, dtype=np.float64)[:, None] for x in (h, a, b, l, z, p, v, m))
    fs = FORWARD_SHARE
    total = m * v
    w0 = np.minimum(2.0 * (p - 1.0) + (v - 1.0) * p, total)
    # rank 0's backwards, and its forwards after W_0 (1F1B pairs with backwards)
    late_n = np.maximum(total - w0 - 1.0, 0.0)
    late0 = _chunk0_ops(total, p, v) - _chunk0_ops(np.minimum(w0 + 1.0, total), p, v)
    tail = m * (h + (v - 1.0) * a) * (1.0 - fs) + fs * (late0 * h + (late_n - late0) * a)
    # the path's length moves by about b - 2 a / 3 a rank (one more hop, two forwards of rank 0
    # fewer), so the longest is at either end of the ranks r whose warm-up ends before the last
    # forward: the first two and the last three are tried
    r_min = np.maximum(np.floor(p - 1.0 - (total - (v - 1.0) * p) / 2.0) + 1.0, 1.0)
    r = np.concatenate([r_min, r_min + 1.0, p - 3.0, p - 2.0, p - 1.0], axis=1)
    wr = 2.0 * (p - r - 1.0) + (v - 1.0) * p
    ok = (r >= 1.0) & (r < p) & (wr < total)
    n0 = _chunk0_ops(wr + 1.0, p, v)
    fill = fs * (n0 * h + (wr + 1.0 - n0) * a)
    c = np.floor(np.mod(wr, p * v) / p)
    # forward W_r down ranks 1..r (rank p-1 runs chunk c), backward of chunk v-1 up ranks r..1
    mids = np.minimum(r, p - 2.0) * b
    at_last = r == p - 1
    hop = (fs * (mids + np.where(at_last, np.where(c == v - 1.0, z, l), 0.0))
           + (1.0 - fs) * (mids + np.where(at_last, z, 0.0)))
    return np.max(np.where(ok & (v > 1) & (m >= p), fill + hop + tail, 0.0), axis=1, initial=0.0)


RANK0_PATHS = (rank0_cycle, rank0_round, rank0_drain)


def rank0_longest(h, a, b, l, z, p, v, m) -> np.ndarray:
    """The longest of the paths above, evaluated where they can be the longest: interleaved, m >= p,
    and rank 0's chunks heavier than a middle rank's (or pp 2, rank 0 the only other rank); 0
    elsewhere (the per-rank and last-chunk paths of planner/pipeline_stages.ratio_of are longer
    there: with rank 0 no heavier the replay agrees with them, tests/planner/test_pipeline_comm_bubble.py)."""
    args = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (h, a, b, l, z, p, v, m)))
    h, a, b, l, z, p, v, m = args
    out = np.zeros(h.shape)
    on = (v > 1) & (m >= p) & ((a > b) | (p == 2))
    if on.any():
        sub = [x[on] for x in args]
        out[on] = np.maximum.reduce([f(*sub) for f in RANK0_PATHS])
    return out
