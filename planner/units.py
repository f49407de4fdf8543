"""Parsing of human-written quantities ("100B" tokens, "2h" budgets, "8:128" GPU ranges)."""

from __future__ import annotations

import re

from planner.errors import PlanError

_COUNT = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_DURATION = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_count(field: str, text: str | float | int) -> float:
    """'100B' -> 1e11, '1.5T' -> 1.5e12, '3e9' -> 3e9."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbgt]?)\s*", str(text).lower())
        if not m:
            raise PlanError(field, f"{text!r} is not a count (e.g. 100B, 1.5T, 300M, 2e9)")
        value = float(m.group(1)) * _COUNT[m.group(2)]
    if value <= 0:
        raise PlanError(field, f"must be > 0, got {text!r}")
    return value


def parse_duration_s(field: str, text: str) -> float:
    """'2h' -> 7200, '90m' -> 5400, '3m' -> 180, '45s', '1.5h', or plain seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*", str(text).lower())
    if not m:
        raise PlanError(field, f"{text!r} is not a duration (e.g. 2h, 90m, 45s)")
    value = float(m.group(1)) * _DURATION[m.group(2) or "s"]
    if value <= 0:
        raise PlanError(field, f"must be > 0, got {text!r}")
    return value


def parse_gpu_range(text: str, step_default: int) -> list[int]:
    """'48' -> [48]; '8:128' -> 8, 16, ... 128 in whole nodes; '8:128:8' with an explicit step."""
    parts = str(text).split(":")
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        raise PlanError("gpus", f"{text!r} is not a GPU count or range (e.g. 48, 8:128, 8:128:16)") from None
    if any(n <= 0 for n in nums) or len(nums) > 3:
        raise PlanError("gpus", f"{text!r}: counts must be > 0 (forms: N, LO:HI, LO:HI:STEP)")
    if len(nums) == 1:
        return nums
    lo, hi = nums[0], nums[1]
    if hi < lo:
        raise PlanError("gpus", f"range {text!r} goes down ({lo} > {hi})")
    step = nums[2] if len(nums) == 3 else step_default
    values = list(range(lo, hi + 1, step))
    if values[-1] != hi:
        values.append(hi)
    return values


def format_params(n: float) -> str:
    """A parameter count for people: '7.061B', '124M', '0.94M' (never '0.000B')."""
    if n >= 1e12:
        return f"{n / 1e12:.3f}T"
    if n >= 1e9:
        return f"{n / 1e9:.3f}B"
    return f"{n / 1e6:.3g}M"
