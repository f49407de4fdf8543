"""Classify a failure as oom / timeout / bad_config / crash, and per-rank error files.

Imports no torch at module level: the launcher uses it after the ranks are gone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

OOM_MARKERS = ("DefaultCPUAllocator: can't allocate memory", "CUDA out of memory",
               "out of memory", "OutOfMemoryError", "MemoryError", "std::bad_alloc")


def classify(exc: BaseException) -> str:
    from planner.errors import PlanError

    if isinstance(exc, PlanError):
        return "bad_config"
    if isinstance(exc, MemoryError):
        return "oom"
    if type(exc).__name__ == "OutOfMemoryError":  # torch.OutOfMemoryError (CUDA)
        return "oom"
    return classify_text(f"{type(exc).__name__}: {exc}")


def classify_text(text: str) -> str:
    return "oom" if any(m in text for m in OOM_MARKERS) else "crash"


def error_path(result_path: str | Path, rank: int) -> Path:
    return Path(f"{result_path}.rank{rank}.error.json")


def write_rank_error(result_path: str | Path, rank: int, status: str, message: str) -> None:
    p = error_path(result_path, rank)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps({"rank": rank, "status": status, "error": message[-4000:]}))
    os.replace(tmp, p)


def read_rank_errors(result_path: str | Path) -> list[dict]:
    """Errors the ranks wrote, most telling first (oom, timeout, bad_config, then crash)."""
    base = Path(result_path)
    found = []
    for p in sorted(base.parent.glob(base.name + ".rank*.error.json")):
        try:
            found.append(json.loads(p.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    order = {"bad_config": 0, "oom": 1, "timeout": 2, "crash": 3}
    return sorted(found, key=lambda e: (order.get(e.get("status"), 9), e.get("rank", 0)))


def clear_rank_errors(result_path: str | Path) -> None:
    base = Path(result_path)
    for p in base.parent.glob(base.name + ".rank*.error.json"):
        p.unlink(missing_ok=True)
