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

import numpy as np


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
