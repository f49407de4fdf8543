"""Transformer blocks per pipeline rank and per model chunk (virtual stage), the first and last
stages included: the even split, Megatron-Core's uneven one, and the embedding and the loss
counted as blocks of the split.

Megatron-Core spells an uneven pipeline three ways (megatron/core/transformer/transformer_layer.py
`get_transformer_layer_offset`, megatron/training/arguments.py):
- `--decoder-first-pipeline-num-layers F` / `--decoder-last-pipeline-num-layers G`: rank 0 holds F
  blocks, rank p-1 holds G, the ranks between share the rest equally; with interleaving each rank's
  blocks are split equally over its v model chunks (each count must divide by v);
- `--account-for-embedding-in-pipeline-split` / `--account-for-loss-in-pipeline-split`: the
  embedding (the output layer and loss) takes one block's place, so L + 1 (+ 1) slots are split
  equally over the p x v virtual stages and the first (last) virtual stage runs one block less.
  Llama 3 405B does this (126 blocks, pp 16; Llama Team 2024, sec. 3.3.2: "we reduce one
  Transformer layer each from the first and the last stages ... the first model chunk on the first
  stage has only the embedding, and the last model chunk on the last stage has only output
  projection and loss calculation").
Without either, L blocks are split evenly; where pp does not divide L (DeepSpeed's uniform
partition; Megatron refuses it) q = L // p blocks go to the first and last stages and q + 1 to
as many of the others as needed (the heaviest stage: ceil(L / p)).

A `StageSplit` holds, per candidate, the blocks of rank 0, of the heaviest middle rank and of rank
p-1, and of the chunks the pipeline fill and drain cross: rank 0's first chunk (virtual stage 0),
one chunk of a middle rank, rank p-1's last chunk (virtual stage p v - 1, with the output layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# the ExecutionPlan knobs of an uneven split, in the order `split` takes them
SPLIT_KNOBS = ("first_stage_layers", "last_stage_layers", "embedding_in_split", "loss_in_split")


@dataclass(frozen=True)
class StageSplit:
    first: np.ndarray  # blocks on pipeline rank 0 (all its chunks); it also holds the embedding
    middle: np.ndarray  # blocks on the heaviest rank between (0 where pp = 2 with both ends given)
    last: np.ndarray  # blocks on rank p-1; it also holds the output layer and the loss
    first_head: np.ndarray  # blocks of rank 0's first chunk (virtual stage 0)
    middle_chunk: np.ndarray  # blocks of one chunk of a middle rank
    last_tail: np.ndarray  # blocks of rank p-1's last chunk (virtual stage p v - 1)

    @property
    def heaviest(self) -> np.ndarray:
        return np.maximum(np.maximum(self.first, self.middle), self.last)

    @property
    def uneven(self) -> np.ndarray:
        """Some stage holds fewer blocks than the heaviest one."""
        return (self.first != self.heaviest) | (self.last != self.heaviest) | (self.middle != self.heaviest)


def _f(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def split(n_layers: int, pp, vpp, first_layers=0, last_layers=0, embedding_in_split=0, loss_in_split=0) -> StageSplit:
    """Blocks per stage and chunk of each candidate (arrays broadcast together). `first_layers`,
    `last_layers`: 0 where not given; `embedding_in_split`, `loss_in_split`: 0/1. Combinations
    Megatron-Core refuses (planner/rules.py) still give finite numbers here."""
    L = float(n_layers)
    p, v = np.maximum(_f(pp), 1.0), np.maximum(_f(vpp), 1.0)
    F, G = _f(first_layers), _f(last_layers)
    e, lo = _f(embedding_in_split), _f(loss_in_split)
    # the even split (pp need not divide L): first and last get floor, the heaviest ceil
    light, heavy = np.floor(L / p), np.ceil(L / p)
    # --decoder-first/last-pipeline-num-layers: the others share the rest
    given_f, given_g = F > 0, G > 0
    n_mid = p - given_f - given_g
    rest = L - F - G
    per = np.where(n_mid > 0, rest / np.maximum(n_mid, 1.0), 0.0)
    ends = given_f | given_g
    ex_first = np.where(given_f, F, per)
    ex_last = np.where(given_g, G, per)
    ex_middle = np.where(p > 2, per, 0.0)
    # --account-for-embedding/loss-in-pipeline-split: L + e + l slots over p x v virtual stages
    slots = (L + e + lo) / (p * v)
    acc = ((e > 0) | (lo > 0)) & ~ends
    first = np.where(ends, ex_first, np.where(acc, slots * v - e, light))
    last = np.where(ends, ex_last, np.where(acc, slots * v - lo, light))
    middle = np.where(ends, ex_middle, np.where(acc, np.where(p > 2, slots * v, 0.0), heavy))
    first_head = np.where(acc, slots - e, first / v)
    last_tail = np.where(acc, slots - lo, last / v)
    middle_chunk = middle / v
    one = p <= 1  # no pipeline: one stage holds every block
    Lf = np.full(np.shape(first), L)
    return StageSplit(
        first=np.where(one, Lf, first), middle=np.where(one, Lf, middle), last=np.where(one, Lf, last),
        first_head=np.where(one, Lf / v, first_head), middle_chunk=np.where(one, Lf / v, middle_chunk),
        last_tail=np.where(one, Lf / v, last_tail))


def of_layout(n_layers: int, layout) -> StageSplit:
    """`split` of a Layout's candidates, computed once per Layout and layer count: one search asks for
    it ~20 times (memory terms, the step time), ~0.2 s each over a MoE model's 2M candidates. A Layout
    is frozen and its arrays are never written in place (`take` and `dataclasses.replace` make a new
    Layout, without this cache)."""
    cache = vars(layout).get("_stage_splits")
    if cache is None:
        cache = {}
        object.__setattr__(layout, "_stage_splits", cache)
    if n_layers not in cache:
        cache[n_layers] = split(n_layers, layout.pp, layout.vpp, *(getattr(layout, k) for k in SPLIT_KNOBS))
    return cache[n_layers]


def _given(first_layers, last_layers, embedding_in_split, loss_in_split):
    ends = (_f(first_layers) > 0) | (_f(last_layers) > 0)
    acc = (_f(embedding_in_split) > 0) | (_f(loss_in_split) > 0)
    return ends, acc


def split_bad(n_layers: int, pp, first_layers, last_layers, embedding_in_split, loss_in_split) -> np.ndarray:
    """Where the first/last stage counts do not leave a whole, equal, non-empty share to every
    other stage (Megatron-Core: the rest divided equally over the middle stages), or are given
    without pipeline stages."""
    p, F, G = _f(pp), _f(first_layers), _f(last_layers)
    ends, acc = _given(first_layers, last_layers, embedding_in_split, loss_in_split)
    n_mid = p - (F > 0) - (G > 0)
    rest = n_layers - F - G
    share_bad = np.where(n_mid > 0, (rest < n_mid) | (np.mod(rest, np.maximum(n_mid, 1.0)) != 0), rest != 0)
    return ((ends | acc) & (p <= 1)) | (ends & share_bad)


def chunks_bad(n_layers: int, pp, vpp, first_layers, last_layers, embedding_in_split, loss_in_split) -> np.ndarray:
    """Where the split does not give every model chunk a whole number of blocks: the even split
    needs pp x vpp to divide n_layers; given first/last counts, each rank's blocks must divide by
    vpp (Megatron-Core: "number of layers at first stage ... must be divisible by virtual pipeline
    parallel degree"); the embedding/loss accounting needs pp x vpp to divide n_layers + 1 (+ 1)."""
    p, v = np.maximum(_f(pp), 1.0), _f(vpp)
    F, G = _f(first_layers), _f(last_layers)
    ends, acc = _given(first_layers, last_layers, embedding_in_split, loss_in_split)
    n_mid = np.maximum(p - (F > 0) - (G > 0), 1.0)
    per = (n_layers - F - G) / n_mid
    ends_bad = (np.mod(F, v) != 0) | (np.mod(G, v) != 0) | (np.mod(per, v) != 0)
    slots = n_layers + _f(embedding_in_split) + _f(loss_in_split)
    bad = np.where(ends, ends_bad, np.mod(np.where(acc, slots, n_layers), p * v) != 0)
    return (v > 1) & bad


def describe(n_layers: int, pp: int, vpp: int, first_layers=0, last_layers=0, embedding_in_split=False,
             loss_in_split=False) -> str:
    """One plan's split in words ("7 + 14 x 8 + 7 blocks; chunks of 1 block, the first and last 0")."""
    sp = split(n_layers, pp, vpp, first_layers, last_layers, int(embedding_in_split), int(loss_in_split))
    f, mid, la = (int(np.asarray(x).reshape(-1)[0]) for x in (sp.first, sp.middle, sp.last))
    middles = max(pp - 2, 0)
    text = f"{f} + {middles} x {mid} + {la} blocks" if middles else f"{f} + {la} blocks"
    if vpp > 1:
        head, chunk, tail = (float(np.asarray(x).reshape(-1)[0]) for x in (sp.first_head, sp.middle_chunk, sp.last_tail))
        text += f" (chunks: first {head:g}, middle {chunk:g}, last {tail:g})"
    return text


def chunk_need(n_layers: int, pp: int, vpp: int, first_layers=0, last_layers=0, embedding_in_split=0,
               loss_in_split=0) -> str:
    """What `chunks_bad` asks of one plan, in words."""
    if first_layers or last_layers:
        return (f"the first ({first_layers}), last ({last_layers}) and middle stages' blocks must each divide by "
                f"vpp {vpp} (Megatron-Core)")
    if embedding_in_split or loss_in_split:
        slots = n_layers + int(bool(embedding_in_split)) + int(bool(loss_in_split))
        return f"pp x vpp = {pp * vpp} must divide n_layers + embedding/loss slots = {slots}"
    return f"pp x vpp = {pp * vpp} must divide n_layers ({n_layers})"
