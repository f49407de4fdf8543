"""Resolve `--model` into the planner's `ModelSpec` (the same shapes the planner predicts)."""

from __future__ import annotations

import json
from pathlib import Path

from planner.model import ModelSpec
from planner.presets import resolve_model


def resolve_spec(ref: str) -> ModelSpec:
    p = Path(ref)
    if p.suffix == ".json" and p.is_file():
        data = json.loads(p.read_text())
        if "n_layers" in data and "hidden" in data:  # a ModelSpec dumped as JSON
            return ModelSpec(**data)
    return resolve_model(ref)
