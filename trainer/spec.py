"""Resolve `--model` into the planner's `ModelSpec` (the same shapes the planner predicts)."""

from __future__ import annotations

import json
from pathlib import Path

from planner.errors import PlanError
from planner.model import ModelSpec

# Used only while planner.presets is absent; planner.presets.resolve_model is the authority.
_FALLBACK_TINY = ModelSpec(name="tiny", n_layers=2, hidden=64, n_heads=4, vocab=256,
                           vocab_multiple=128, max_positions=256)


def resolve_spec(ref: str) -> ModelSpec:
    p = Path(ref)
    if p.suffix == ".json" and p.is_file():
        data = json.loads(p.read_text())
        if "n_layers" in data and "hidden" in data:  # a ModelSpec dumped as JSON
            return ModelSpec(**data)
    try:
        from planner.presets import resolve_model
    except ImportError:
        if ref == "tiny":
            return _FALLBACK_TINY
        raise PlanError("model", f"unknown model {ref!r} (planner.presets is not available; use tiny or a ModelSpec JSON)") from None
    return resolve_model(ref)
