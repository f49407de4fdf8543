"""The model FLOPs per token behind MFU, split as `plan estimate --explain` shows them: the linear layers (a
mixture of experts: its ACTIVE experts and routers, planner/moe.py), the attention core and the logits, each
forward, and the training total (3 x forward: backward = 2 x forward; planner/flops.py's conventions).

The attention core follows the full s x s convention of Megatron-LM and PaLM (appendix B: 2 x 2 x s x q_dim per
token and layer); a sliding-window or chunked layer counts the keys its kernel computes in the same convention
(planner/attn_window.py `effective_len`), which the row states per kind of layer."""

from __future__ import annotations

import numpy as np

from planner import attn_window, flops, moe
from planner.model import ModelSpec


def _f(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def attention_keys(spec: ModelSpec, seq_len: int) -> str:
    """The keys per token each kind of layer counts, e.g. 'window 128 on 18/36 layers: 252 keys per token, the
    others 4,096 (full causal)'."""
    if spec.attn_window is None:
        return f"{seq_len:,} keys per token (full causal, counted as s x s)"
    kinds = attn_window.mix(spec, seq_len)
    local = _f(kinds[0][1])
    kind = "chunked attention" if spec.attn_chunked else "window"
    k = attn_window.local_layers(spec)
    where = "" if k == spec.n_layers else f" on {k}/{spec.n_layers} layers"
    out = f"{kind} {spec.attn_window}{where}: {local:,.0f} keys per token"
    if len(kinds) > 1:
        out += f", the others {seq_len:,} (full causal)"
    return out


def rows(spec: ModelSpec, seq_len: int) -> list[tuple[str, float, str]]:
    """(term, GFLOP per token, what it counts): forward terms, then the training total of MFU."""
    total = _f(flops.model_flops_per_token(spec, seq_len))
    core = spec.n_layers * _f(flops.attention_core_forward_flops_per_token(spec, seq_len))
    logits = flops.logits_forward_flops_per_token(spec)
    linear = total / 3.0 - core - logits
    what = ("attention projections, the ACTIVE experts (top-k routed + shared) and the routers"
            if moe.is_moe(spec) else "attention projections and MLP")
    return [("linear layers (forward)", linear / 1e9, what),
            ("attention core (forward)", core / 1e9, attention_keys(spec, seq_len)),
            ("logits (forward)", logits / 1e9, f"hidden x vocab {spec.vocab_padded:,}"),
            ("model FLOPs (training)", total / 1e9, "3 x forward (MFU's numerator, per token)")]
