"""Measured bus bandwidths from a `plan allreduce-bench --json` file.

Format: {"busbw_gbps": {"intranode": X | null, "internode": Y | null}, ...}; other keys are
ignored. The values become System.measured_*_busbw_gbps, which the comm model prefers to the
catalog's link numbers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from planner.errors import PlanError


def load_network(path: str | Path) -> dict[str, float | None]:
    """{'intranode_busbw_gbps': X | None, 'internode_busbw_gbps': Y | None}; PlanError if malformed."""
    field = "network_from"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlanError(field, f"file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PlanError(field, f"cannot read {path} ({e})") from None
    except json.JSONDecodeError as e:
        raise PlanError(field, f"{path} is not JSON ({e.msg} at line {e.lineno})") from None
    bw = data.get("busbw_gbps") if isinstance(data, dict) else None
    if not isinstance(bw, dict):
        raise PlanError(field, f"{path} has no 'busbw_gbps' object (write it with `plan allreduce-bench --json`)")
    out: dict[str, float | None] = {}
    for key in ("intranode", "internode"):
        v = bw.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0):
            raise PlanError(field, f"busbw_gbps.{key} must be a positive number or null, not {v!r}")
        out[f"{key}_busbw_gbps"] = float(v) if v is not None else None
    if out["intranode_busbw_gbps"] is None and out["internode_busbw_gbps"] is None:
        raise PlanError(field, f"{path}: busbw_gbps has neither 'intranode' nor 'internode'")
    return out
