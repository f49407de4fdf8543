"""The interleaved bubble with uneven chunks (planner/pipeline_stages.split_ratio) against Megatron's
interleaved 1F1B schedule replayed op by op, and a schedule worked out by hand."""

import numpy as np
import pytest

from planner import pipeline_stages, stage_split


def replay(chunks, m, fwd_share=1 / 3):
    """Step time of Megatron's interleaved 1F1B schedule (megatron/core/pipeline_parallel/schedules.py
    forward_backward_pipelining_with_interleaving: rank r runs (p - r - 1) x 2 + (v - 1) p warm-up
    forwards, then one forward and one backward in turn, then the remaining backwards; op k is chunk
    (k mod p v) // p of micro batch (k // p v) p + k mod p, backwards from the last chunk down; v = 1:
    plain 1F1B with p - r - 1 warm-up forwards). chunks[r][c]: forward + backward time of chunk c of
    rank r (virtual stage c p + r); every op starts when its rank is free and its input has arrived."""
    p, v = len(chunks), len(chunks[0])
    order = []
    for r in range(p):
        total = m * v
        warm = min((p - r - 1) * 2 + (v - 1) * p, total) if v > 1 else min(p - r - 1, m)

        def op(kind, k):
            if v == 1:
                return kind, k, 0
            c = (k % (p * v)) // p
            return kind, (k // (p * v)) * p + k % p, c if kind == "F" else v - 1 - c

        seq = [op("F", k) for k in range(warm)]
        for i in range(total - warm):
            seq += [op("F", warm + i), op("B", i)]
        order.append(seq + [op("B", i) for i in range(total - warm, total)])
    done, free, at = {}, [0.0] * p, [0] * p
    moved = True
    while moved:
        moved = False
        for r in range(p):
            while at[r] < len(order[r]):
                kind, mb, c = order[r][at[r]]
                s = c * p + r
                dep = (None if s == 0 else ("F", mb, s - 1)) if kind == "F" else \
                    (("F", mb, s) if s == p * v - 1 else ("B", mb, s + 1))
                if dep is not None and dep not in done:
                    break
                start = max(free[r], done[dep] if dep else 0.0)
                free[r] = start + chunks[r][c] * (fwd_share if kind == "F" else 1 - fwd_share)
                done[(kind, mb, s)] = free[r]
                at[r] += 1
                moved = True
    assert at == [len(o) for o in order], "the replay deadlocked"
    return max(free)


def predicted_step(n_layers, pp, vpp, m, per_layer=1.0, logits=0.0, **split):
    """m x (the busiest rank's time per micro batch) x (1 + bubble fraction), as planner/throughput.py."""
    sp = stage_split.split(n_layers, pp, vpp, *(split.get(k, 0) for k in stage_split.SPLIT_KNOBS))
    busiest = max(pipeline_stages.stage_times(sp, per_layer, logits))
    ratio = pipeline_stages.split_ratio(n_layers, sp, pp, vpp, m, per_layer, logits)
    frac = pipeline_stages.bubble_fraction(pp, m, vpp) * ratio
    return float(m * busiest * (1 + frac))


def chunk_times(n_layers, pp, vpp, per_layer=1.0, logits=0.0, **split):
    """Forward + backward time of every chunk, from the split (rank 0, middles, rank p-1)."""
    sp = stage_split.split(n_layers, pp, vpp, *(split.get(k, 0) for k in stage_split.SPLIT_KNOBS))
    f = lambda x: float(np.asarray(x).reshape(-1)[0])  # noqa: E731
    first = [f(sp.first_head)] + [(f(sp.first) - f(sp.first_head)) / max(vpp - 1, 1)] * (vpp - 1)
    last = [(f(sp.last) - f(sp.last_tail)) / max(vpp - 1, 1)] * (vpp - 1) + [f(sp.last_tail)]
    rows = [first] + [[f(sp.middle_chunk)] * vpp for _ in range(pp - 2)] + [last]
    rows = [[n * per_layer for n in row] for row in rows]
    rows[-1][-1] += logits
    return rows


@pytest.mark.parametrize("p, v, m", [(4, 2, 8), (8, 3, 16), (2, 4, 4), (16, 8, 32)])
def test_equal_chunks_reduce_to_the_sc21_bubble(p, v, m):
    """(p - 1) / (v m) of the busy time (Narayanan et al. SC21 sec. 2.2.2), and the replay agrees."""
    L = p * v * 2
    sp = stage_split.split(L, p, v)
    assert pipeline_stages.split_ratio(L, sp, p, v, m, 1.0, 0.0) == pytest.approx(1.0)
    step = predicted_step(L, p, v, m)
    busy = m * L / p
    assert (step - busy) / busy == pytest.approx((p - 1) / (v * m))
    assert replay(chunk_times(L, p, v), m) == pytest.approx(step)


def test_plain_1f1b_is_alpa_with_the_last_stage_slowest():
    """v = 1: sum of the stages + (m - 1) x the slowest (Alpa eq. 2) is exact where the slowest stage is
    the last (the output layer's), an upper bound otherwise (1F1B's warm-up forwards hide part of the
    round trip behind an early heavy stage; planner/plain_paths.py takes the schedule's longest path,
    tests/planner/test_plain_1f1b.py)."""
    for stages, m in (([1.0, 1.0, 1.0, 2.5], 8), ([2.0, 2.0, 2.0, 2.4], 8), ([1.0, 1.0, 1.0, 1.0], 4)):
        alpa = sum(stages) + (m - 1) * max(stages)
        assert replay([[t] for t in stages], m) == pytest.approx(alpa)
    for stages, m in (([3.0, 1.0, 1.0, 1.0], 8), ([1.0, 2.0, 2.0, 1.0], 6)):
        assert replay([[t] for t in stages], m) < sum(stages) + (m - 1) * max(stages)


def test_hand_computed_interleaved_schedule():
    """p 2, v 2, 2 micro batches; blocks per chunk rank 0 [1, 2], rank 1 [2, 2] (the embedding in the
    split: 7 slots on 4 virtual stages of 2, the first one a block less); a block's forward 1,
    backward 2. Rank 0: F0c0 0-1, F1c0 1-2, F0c1 3-5 (after rank 1's F0c0 1-3), F1c1 5-7; rank 1:
    F0c0 1-3, F1c0 3-5, F0c1 5-7, B0c1 7-11, F1c1 11-13, B1c1 13-17; rank 0: B0c1 11-15, B1c1 17-21;
    rank 1: B0c0 15-19, B1c0 21-25; rank 0: B0c0 19-21 ... 25-27 (B1c0 after rank 1's 21-25).
    The step is 27: the busiest rank (rank 1: 2 x 12 = 24) plus rank 0's first chunk there and back (3)."""
    chunks = [[3.0, 6.0], [6.0, 6.0]]
    assert replay(chunks, 2) == pytest.approx(27.0)
    assert predicted_step(7, 2, 2, 2, per_layer=3.0, embedding_in_split=1) == pytest.approx(27.0)


@pytest.mark.parametrize("p, v, m", [(4, 2, 8), (8, 2, 16), (16, 8, 32), (4, 4, 16)])
@pytest.mark.parametrize("logits", [0.0, 0.4, 3.0])
def test_llama3_split_matches_the_replay(p, v, m, logits):
    """Embedding and loss in the split (Llama 3 405B, Megatron-Core's accounting): within 1%."""
    L = 2 * p * v - 2
    step = predicted_step(L, p, v, m, logits=logits, embedding_in_split=1, loss_in_split=1)
    sim = replay(chunk_times(L, p, v, logits=logits, embedding_in_split=1, loss_in_split=1), m)
    assert step == pytest.approx(sim, rel=0.01) and step <= sim * (1 + 1e-9)


@pytest.mark.parametrize("p, v, m", [(4, 2, 8), (8, 4, 16)])
def test_lighter_first_and_last_ranks_match_the_replay(p, v, m):
    """--decoder-first/last-pipeline-num-layers lighter than the middle, no heavy output layer: exact."""
    L = (p - 2) * 2 * v + 2 * v
    step = predicted_step(L, p, v, m, first_stage_layers=v, last_stage_layers=v)
    assert step == pytest.approx(replay(chunk_times(L, p, v, first_stage_layers=v, last_stage_layers=v), m))


def test_heavy_last_chunk_follows_the_replay():
    """A last chunk heavier than the chunks feeding it is paced round by round (the t_tail bound of
    pipeline_stages.ratio_of); the per-rank sum alone was 17% low here (25.7 against 31)."""
    kw = dict(first_stage_layers=2, last_stage_layers=2)
    step = predicted_step(16, 4, 2, 4, logits=2.0, **kw)
    sim = replay(chunk_times(16, 4, 2, logits=2.0, **kw), 4)
    assert step == pytest.approx(sim, rel=0.03) and step <= sim * (1 + 1e-9)


def test_llama3_405b_split():
    """126 blocks on 16 stages, one block less on the first and last (Llama 3 sec. 3.3.2): 7 + 14 x 8
    + 7; interleaved by 8 the first and last chunks hold the embedding and the loss alone."""
    assert stage_split.describe(126, 16, 1, embedding_in_split=True, loss_in_split=True) == "7 + 14 x 8 + 7 blocks"
    sp = stage_split.split(126, 16, 8, 0, 0, 1, 1)
    assert (float(sp.first_head[()]), float(sp.middle_chunk[()]), float(sp.last_tail[()])) == (0.0, 1.0, 0.0)
    assert not stage_split.chunks_bad(126, 16, 8, 0, 0, 1, 1)
    assert stage_split.chunks_bad(126, 16, 8, 0, 0, 0, 0)  # the even split cannot interleave 126 by 16 x 8
    same = stage_split.split(126, 16, 1, 7, 7, 0, 0)
    assert (float(same.first), float(same.middle), float(same.last)) == (7.0, 8.0, 7.0)


@pytest.mark.parametrize("m", [16, 32, 64])
def test_llama3_405b_bubble_is_sc21_arithmetic(m):
    """Golden: Llama 3 405B's interleaved layout (126 blocks, pp 16, vpp 8, embedding and loss in the
    split; Llama Team 2024 sec. 3.3.2). The schedule arithmetic of Narayanan et al. SC21 sec. 2.2.2:
    a rank idles while the first micro batch crosses the first model chunk of every rank before it
    and while the last backward comes back through them, (p - 1) (t_f + t_b) / v for the last rank
    of equal chunks. Here the busiest ranks are the middle ones (8 one-block chunks; rank 15 holds 7
    blocks, its last chunk only the loss), the last of them is rank 14, and rank 0's first chunk
    holds only the embedding: 13 one-block chunks before it, step = m x 8 + 13 block times (the
    embedding's and output layer's time left out), the replay agreeing."""
    step = predicted_step(126, 16, 8, m, embedding_in_split=1, loss_in_split=1)
    assert step == pytest.approx(m * 8 + 13)
    assert replay(chunk_times(126, 16, 8, embedding_in_split=1, loss_in_split=1), m) == pytest.approx(m * 8 + 13)


def test_hand_computed_heavy_first_rank():
    """pp 2, vpp 2, 8 micro batches, rank 0 [3, 3] (a heavy first stage: 6 blocks), rank 1 [1, 5] (2
    blocks and a 4-block output layer); forward : backward 1 : 2. The critical path: rank 0's F0c0,
    F1c0, F0c1 (3 x 1), then four times rank 1's round of chunk 1 (two F + B of 5) and rank 0's B, F
    of chunk 1 between the rounds (3), then rank 0's last B of chunk 1 and two of chunk 0 (3 x 2):
    3 + 4 x 10 + 3 x 3 + 6 = 58 (rank 0 alone is 8 x 6 = 48; the per-rank sum said 51)."""
    assert replay([[3.0, 3.0], [1.0, 5.0]], 8) == pytest.approx(58.0)
    assert predicted_step(8, 2, 2, 8, logits=4.0, first_stage_layers=6, last_stage_layers=2) == pytest.approx(58.0)
