"""The parallel attention + MLP block (GPT-J, GPT-NeoX, PaLM, Falcon, Phi-1/2, Cohere) in the
breakdowns: tensor-parallel collectives and the tensors a block saves.

A sequential pre-norm block is x' = x + attn(n1(x)); y = x' + mlp(n2(x')). The parallel block is
y = x + attn(n1(x)) + mlp(n2(x)), with n2 = n1 where the model has one norm per block (GPT-J,
Falcon-7B, PaLM, Phi, Cohere) and two norms over the same x where it has two (GPT-NeoX
`use_parallel_residual`, Falcon's new decoder architecture: ln_attn, ln_mlp).

- FLOPs: the same GEMMs and the same attention core (planner/flops.py is unchanged).
- Tensor parallelism: the row-parallel outputs of attention and MLP are summed locally before a
  single all-reduce, "one all-reduce in the forward pass and one in the backward pass" per block
  instead of two of each (Black et al. 2022, GPT-NeoX-20B, arXiv 2204.06745, sec. 3.1 "Parallel
  Attention + FF Layers"; MegaScale, Jiang et al. 2024, arXiv 2402.15627, sec. 3.1 "Parallel
  transformer block"). With sequence parallelism the same holds of the pairs: one all-gather
  before the block and one reduce-scatter after it, in each direction, instead of two pairs.
  Same bytes per collective (the hidden-size activation), so the TP time halves.
- Saved tensors (Korthikanti et al. 2022 sec. 4.1 counts norm inputs and attention/MLP inputs):
  the block input x is the only norm input (4 -> 2 norm-side tensors of s*b*h with one norm,
  3 with two: x and the two normed outputs); one norm's mean/rstd instead of two with one norm.
- GEMM fusion: PaLM (Chowdhery et al. 2022, arXiv 2204.02311, sec. 2 "Parallel Layers") credits
  its ~15% faster training at large scale to fusing the MLP and attention input matmuls. That
  fusion is NOT modelled: each linear keeps its own GEMM size (planner/flops.block_gemms), as
  GPT-NeoX, Megatron-style code and Hugging Face implement the block (separate query_key_value
  and dense_h_to_4h linears).
"""

from __future__ import annotations

import re

import numpy as np

from planner.errors import PlanError
from planner.model import ModelSpec

# Sequential block: per block, all-reduce equivalents in forward (attention, MLP) and backward.
SEQUENTIAL_TP_CALLS_PER_PASS = 2.0
PARALLEL_TP_CALLS_PER_PASS = 1.0

# Async TP (planner/async_tp.py) fusion of each collective with its neighbour matmuls, by the
# forward matmul indices of planner/flops.block_gemms (qkv, o, up, down), in forward and in backward.
# Sequential: AG -> qkv, o -> RS, AG -> up, down -> RS forward; backward only AG(dY) -> dX of o, down.
SEQUENTIAL_FUSED = (((0,), True, False), ((1,), True, True), ((2,), True, False), ((3,), True, True))
# Parallel: one AG feeds qkv and up (fused with both); the RS reads the sum of o and down (no single
# producer matmul: not fused); backward AG(dY) feeds the dX matmuls of o and down; the RS of dX
# reads the sum of qkv's and up's dX (not fused).
PARALLEL_FUSED = (((0, 2), True, False), ((1, 3), False, True))


def tp_calls_per_pass(spec: ModelSpec) -> float:
    """All-reduce-sized TP collectives per block and pass (forward, backward or a recomputed
    forward); with sequence parallelism each is an all-gather + reduce-scatter pair. A hybrid stack's
    layer (Mamba, attention or MLP: planner/ssm.py) has one row-parallel output, one collective."""
    if spec.layer_pattern is not None:
        return PARALLEL_TP_CALLS_PER_PASS
    return PARALLEL_TP_CALLS_PER_PASS if spec.parallel_block else SEQUENTIAL_TP_CALLS_PER_PASS


def tp_calls_per_block(spec: ModelSpec, block_recompute) -> np.ndarray:
    """All-reduce equivalents per block and micro batch: forward + backward + recomputed forward
    (Shoeybi et al. 2019: 2 + 2 for the sequential block; 1 + 1 for the parallel one)."""
    return tp_calls_per_pass(spec) * (2.0 + np.asarray(block_recompute, dtype=np.float64))


def async_tp_fused(spec: ModelSpec) -> tuple:
    """((matmul indices), fused in forward, fused in backward) of each collective of a block."""
    return PARALLEL_FUSED if spec.parallel_block else SEQUENTIAL_FUSED


def norm_side_tensors(spec: ModelSpec) -> int:
    """Tensors of s*b*h a block keeps around its norms: norm inputs and norm outputs (the
    attention and MLP inputs). Sequential: 2 inputs + 2 outputs; parallel: the shared input x
    and one (one norm) or two (two norms) normed outputs."""
    if not spec.parallel_block:
        return 4
    return 2 if spec.norms_per_layer == 1 else 3


def norms_run(spec: ModelSpec) -> int:
    """Norms a block computes (each keeps its per-token statistics for backward)."""
    return 1 if spec.parallel_block and spec.norms_per_layer == 1 else 2


def replicated_sbh(spec: ModelSpec) -> float:
    """The part of Korthikanti et al.'s element-wise traffic that tensor parallelism does not
    split, in units of s*b*h at 16 bit: their sequential 10 (two norm inputs 4, attention and MLP
    inputs 4, two dropout masks 2); a parallel block has fewer norm-side tensors."""
    return 2.0 * norm_side_tensors(spec) + 2.0


# ---- a runs file's row: an optional `parallel_block` column, or its notes ---------------------------
YES, NO = ("yes", "y", "true", "1", "on", "parallel"), ("no", "n", "false", "0", "off", "sequential")
_STATED = re.compile(r"parallel[\s_-]*(attention|attn|residual|layers?|blocks?)\b", re.I)
_DENIED = re.compile(r"\b(no|without|w/o)\s+parallel[\s_-]*(attention|attn|residual|layers?|blocks?)\b"
                     r"|\bsequential\s+(transformer\s+)?blocks?\b", re.I)


def stated_in_row(row) -> bool | None:
    """Whether a run row states a parallel attention+MLP block: the `parallel_block` column
    (yes/no), or its notes ("parallel attention", "parallel residual", "parallel layers",
    "no parallel attention", "sequential block"); None where nothing says."""
    cell = (row.get("parallel_block") or "").strip().lower()
    if cell:
        if cell not in YES + NO:
            raise PlanError("parallel_block", f"row {row.get('id')}: {cell!r} is not one of yes, no")
        return cell in YES
    text = row.get("notes") or ""
    if _DENIED.search(text):
        return False
    return True if _STATED.search(text) else None


def apply_row(row, spec: ModelSpec, notes: list[str]) -> ModelSpec:
    """The row's model with the block it states (a preset's own block where the row says nothing).
    A shape made parallel keeps its two norms (GPT-NeoX's form: only the block input is shared)."""
    stated = stated_in_row(row)
    if stated is None or stated == spec.parallel_block:
        return spec
    fields = {**spec.model_dump(), "published_params": None}
    fields.update(switched(fields, stated))
    notes.append(f"{'parallel attention+MLP' if stated else 'sequential'} block as stated"
                 + (f" ({fields['norms_per_layer']} norms per block)" if stated else ""))
    return ModelSpec(**fields)


def switched(fields: dict, parallel: bool | None) -> dict:
    """ModelSpec fields of a block switched to `parallel` (None: unchanged): a one-norm parallel
    block made sequential gets its second norm; a block made parallel keeps its norms."""
    if parallel is None:
        return {}
    norms = fields.get("norms_per_layer", 2)
    return {"parallel_block": parallel, "norms_per_layer": 2 if not parallel and norms == 1 else norms}
