"""Human-written quantities ("100B" tokens, "4M" batch tokens, "2h" budgets, "8:128" GPU ranges).

`Count`, `IntCount` and `Seconds` are the field types of the pydantic models (Scenario,
ExecutionPlan, TrainConfig, the service's requests): a model field parses its own text once,
and every face (CLI flag, scenario CSV/TOML cell, JSON body) passes the text through as written.
A bad value is a one-line validation error naming the field and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator
from pydantic_core import PydanticCustomError

from planner.errors import PlanError

_COUNT = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_DURATION = {"s": 1, "m": 60, "h": 3600, "d": 86400}
COUNT_ALLOWED = "a number with an optional k/M/B/T suffix, e.g. 100B, 1.5T, 4M, 2e9"
DURATION_ALLOWED = "seconds, or a number with s/m/h/d, e.g. 2h, 90m, 1h30m, 45s"


def _count(text: str) -> float | None:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*", text.lower())
    value = float(m.group(1)) * _COUNT[m.group(2)] if m else None
    return value if value is None or math.isfinite(value) else None  # '1e400' overflows to inf


def _seconds(text: str) -> float | None:
    s = text.strip().lower()
    if not re.fullmatch(r"(?:[0-9]*\.?[0-9]+\s*[smhd]\s*)*[0-9]*\.?[0-9]+\s*[smhd]?", s):
        return None  # '1h 30m' and '1h30m' are 90 minutes; '1 30m' is no duration
    return sum(float(n) * _DURATION[u or "s"] for n, u in re.findall(r"([0-9]*\.?[0-9]+)\s*([smhd]?)", s))


def parse_duration_s(field: str, text: str | float | int) -> float:
    """'2h' -> 7200, '90m' -> 5400, '1h30m' -> 5400, '45s', '1.5h', or plain seconds (> 0)."""
    value = float(text) if isinstance(text, (int, float)) else _seconds(str(text))
    if value is None:
        raise PlanError(field, f"{text!r} is not a duration (allowed: {DURATION_ALLOWED})")
    if value <= 0:
        raise PlanError(field, f"must be > 0, got {text!r}")
    return value


def _field_parser(parse, kind: str, allowed: str):
    """A BeforeValidator body: text through `parse`; anything else goes on to the type check."""

    def check(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        parsed = parse(value)
        if parsed is None:
            raise PydanticCustomError(kind, "{text} is not a {kind} (allowed: {allowed})",
                                      {"text": repr(value), "kind": kind.replace("_", " "), "allowed": allowed})
        return parsed

    return check


# "100B" tokens, "4M" batch tokens: a float (or an int) on the model, text on every face
Count = Annotated[float, BeforeValidator(_field_parser(_count, "count", COUNT_ALLOWED),
                                         json_schema_input_type=float | str)]
def _int_count(text: str) -> float | int | None:
    """A count that is whole as a Python int: '1e20' is then 'at most ...', not pydantic's 'exceeded maximum size'."""
    value = _count(text)
    return int(value) if value is not None and value.is_integer() else value


IntCount = Annotated[int, BeforeValidator(_field_parser(_int_count, "count", COUNT_ALLOWED),
                                          json_schema_input_type=int | str)]
# "2h", "90m", "1h30m": seconds on the model
Seconds = Annotated[float, BeforeValidator(_field_parser(_seconds, "duration", DURATION_ALLOWED),
                                           json_schema_input_type=float | str)]


@dataclasses.dataclass(frozen=True, slots=True)
class AtMost(AfterValidator):
    """at_most's validator, its limit kept as `le` for whoever reads a field's bound (tuner/space.py reads
    ExecutionPlan's, as it read annotated_types.Le)."""

    le: float | None = None

    def __get_pydantic_json_schema__(self, core_schema, handler):
        schema = handler(core_schema)  # the OpenAPI schema keeps its "maximum", as le= wrote it
        return {**schema, "maximum": self.le} if self.le is not None and "type" in schema else schema


def at_most(limit: float, why: str, shown: str | None = None, unit: str = "") -> AtMost:
    """An upper bound whose error says why: "at most 7d (604,800 s), got 3.6e+11 s: a study is saved after
    every trial ...", where a bare `le=` said only "Input should be less than or equal to 604800"."""
    def check(value):
        if value is not None and value > limit:
            raise PydanticCustomError("at_most", "at most {shown}, got {got}: {why}",
                                      {"shown": shown or f"{limit:,}", "got": _shown(value) + unit, "why": why})
        return value

    return AtMost(check, le=limit)


def _shown(value: float) -> str:
    """4,096, 12,345 and 0.5 as written; 1e+40, not its 41 digits."""
    whole = value < 1e15 and (value >= 1e4 or float(value).is_integer())
    return f"{value:,.0f}" if whole else f"{value:.6g}"


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
    node = step_default  # counts above one node are whole nodes (planner/resolve.py)
    start, end = _whole(max(lo, node), node), max(node, hi // node * node)  # the whole-node sweep inside lo..hi
    n = (hi - lo) // step + 1 + ((hi - lo) % step != 0)
    if n > MAX_SWEEP_COUNTS:
        wider = _whole(-(-(end - start) // (MAX_SWEEP_COUNTS - 1)), node)
        raise PlanError("gpus", f"sweep {text!r} has {n:,} GPU counts (at most {MAX_SWEEP_COUNTS}: one search each); "
                        f"use a larger step, e.g. {start}:{end}:{wider}")
    values = list(range(lo, hi + 1, step))
    if values[-1] != hi:
        values.append(hi)
    if bad := [v for v in values if v > node and v % node]:
        raise PlanError("gpus", f"sweep {text!r} reaches {bad[0]} GPUs, not whole nodes of {node}: above one node, "
                        f"start, end and step must be multiples of {node} (e.g. {start}:{end}:{_whole(step, node)})")
    return values


MAX_SWEEP_COUNTS = 256


def _whole(n: int, node: int) -> int:
    """n rounded up to whole nodes."""
    return -(-n // node) * node


def format_params(n: float) -> str:
    """A parameter count for people: '7.061B', '124M', '0.94M' (never '0.000B')."""
    if n >= 1e12:
        return f"{n / 1e12:.3f}T"
    if n >= 1e9:
        return f"{n / 1e9:.3f}B"
    return f"{n / 1e6:.3g}M"
