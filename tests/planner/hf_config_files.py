"""The Hugging Face config.json fixtures (tests/fixtures/hf_configs) and edited copies of them for a test."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"


def edited_config(tmp_path: Path, base: str, **changes: object) -> Path:
    """`base` with `changes` applied (a None value removes the key), written as tmp_path/config.json."""
    cfg = json.loads((FIXTURES / base).read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path
