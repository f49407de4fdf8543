"""Saved activations of a hybrid stack's layer, the mean over its pattern (planner/ssm.py), for
planner/memory.py `layer_activation_bytes`.

Each pattern layer keeps its pre-norm's input and output (half of the transformer block's
norm-side tensors and statistics): an attention layer its q/k/v, output and attention core
(flash: output and log-sum-exp; eager: the probabilities); an MLP layer its MLP tensors; a Mamba
layer what its fused kernels save (ssm.saved_elems_per_token: no s x s term, linear in s).
"""

from __future__ import annotations

import numpy as np

from planner import ssm


def hybrid_layer_bytes(spec, layout, sb, dtype_bytes, sp_div, block_replicated, attention, mlp) -> np.ndarray:
    """Bytes per micro batch of one layer averaged over the pattern; `block_replicated`, `attention`,
    `mlp`: the transformer block's norm-side, attention and MLP terms (memory.py)."""
    a, f, share = ssm.shares(spec)
    half = block_replicated / 2.0
    out = a * (half + attention) + f * (half + mlp)
    if share:
        out = out + share * sb * dtype_bytes * ssm.saved_elems_per_token(spec, layout.tp, sp_div)
    return out
