"""The bare-size rule: a parameter count like "7b" or "350m" -> a GPT-2-style `ModelSpec`.

Rule (also in the README):
  1. hidden: log-log interpolation of hidden size against parameter count through published
     GPT shapes (GPT-3, Brown et al. 2020, Table 2.1, up to 13B; Megatron-LM, Narayanan et al.
     2021, Table 1, above), extrapolated along the end segments. Head dim 128, so
     n_heads = hidden / 128; hidden is rounded to the nearest multiple of 128*g, where g is the
     largest of 1, 2, 4, 8 with 512*g <= hidden: n_heads is then divisible by g (by 8 from
     hidden 4096 on, so tensor parallelism up to 8 divides the heads); every anchor is kept.
  2. n_layers: the layer count (at least 1) whose exact parameter count is closest to the target.
  3. the rest is GPT-2: learned positions (max_positions 2048), GELU MLP of 4*hidden, LayerNorm,
     biases, tied embeddings, vocab 50257 padded to a multiple of 128 (50304, seed 000).
"""

from __future__ import annotations

import math
import re

from planner.errors import PlanError
from planner.model import ModelSpec

# (parameters, hidden): GPT-3 (Brown et al. 2020, Table 2.1) to 13B, Megatron-LM (Narayanan et
# al. 2021, Table 1) from 18.4B; 175B is GPT-3's.
SHAPE_ANCHORS: tuple[tuple[float, int], ...] = (
    (125e6, 768), (350e6, 1024), (760e6, 1536), (1.3e9, 2048), (2.7e9, 2560), (6.7e9, 4096),
    (13e9, 5120), (18.4e9, 6144), (39.1e9, 8192), (76.1e9, 10240), (175e9, 12288),
    (310.1e9, 16384), (529.6e9, 20480), (1008e9, 25600),
)
GPT2_VOCAB = 50257
VOCAB_MULTIPLE = 128
HEAD_DIM = 128
SIZE_FORMS = "a size like 125m, 1.3b, 7b or 52B (suffix k, m, b or t)"
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmbt])\s*$", re.IGNORECASE)
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def parse_size(text: str) -> float | None:
    """'7b' -> 7e9, '350M' -> 3.5e8; None if `text` is not of that form. Raises on <= 0."""
    m = _SIZE_RE.match(text)
    if m is None:
        return None
    n_params = float(m.group(1)) * _SCALE[m.group(2).lower()]
    if n_params <= 0:
        raise PlanError("model", f"size {text!r} must be positive ({SIZE_FORMS})")
    return n_params


def hidden_for_params(n_params: float) -> int:
    """Step 1 of the rule: the hidden size for a target parameter count."""
    pts = SHAPE_ANCHORS
    i = next((k for k in range(1, len(pts) - 1) if n_params < pts[k][0]), len(pts) - 1)
    (p0, h0), (p1, h1) = pts[i - 1], pts[i]
    t = math.log(n_params / p0) / math.log(p1 / p0)
    hidden = math.exp(math.log(h0) + t * math.log(h1 / h0))
    group = max((g for g in (1, 2, 4, 8) if 4 * HEAD_DIM * g <= hidden), default=1)
    step = HEAD_DIM * group
    return max(HEAD_DIM, round(hidden / step) * step)


def gpt_for_params(n_params: float, max_positions: int = 2048, name: str | None = None) -> ModelSpec:
    """Steps 1-3 of the rule; PlanError when no GPT-2 shape comes within 25% of the target."""
    hidden = hidden_for_params(n_params)
    base = ModelSpec(
        name=name or _size_name(n_params), family="gpt", n_layers=1, hidden=hidden,
        n_heads=hidden // HEAD_DIM, vocab=GPT2_VOCAB, vocab_multiple=VOCAB_MULTIPLE,
        max_positions=max_positions, source="bare-size rule (planner/sizes.py)",
    )
    per_layer, outside = base.params_per_layer, base.embedding_params
    guess = max(1, math.floor((n_params - outside) / per_layer))
    layers = min((guess, guess + 1), key=lambda n: abs(outside + n * per_layer - n_params))
    spec = base.model_copy(update={"n_layers": layers})
    if spec.n_params > 1.25 * n_params:
        raise PlanError(
            "model",
            f"{_size_name(n_params)} is too small for a GPT-2 shape with a {base.vocab_padded}-row "
            f"embedding (smallest: {spec.n_params / 1e6:.0f}m); use the preset 'tiny' or a config.json",
        )
    return spec


def _size_name(n_params: float) -> str:
    for suffix, scale in (("t", 1e12), ("b", 1e9), ("m", 1e6), ("k", 1e3)):
        if n_params >= scale:
            return f"{n_params / scale:.4g}{suffix}"
    return f"{n_params:.0f}"
