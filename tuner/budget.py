"""Wall-clock budget: parsing `--budget 2h`, the deadline, and how long a trial will take."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from planner.errors import PlanError

_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")


def parse_duration_s(text: str, field_name: str = "budget") -> float:
    """'2h', '90m', '1h30m', '45s', '120' (seconds) -> seconds."""
    s = text.strip().lower().replace(" ", "")
    if not s or not re.fullmatch(r"(\d+(?:\.\d+)?[smhd]?)+", s):
        raise PlanError(field_name, f"{text!r} is not a duration (examples: 2h, 90m, 1h30m, 45s)")
    total = sum(float(n) * _UNITS_S[u or "s"] for n, u in _PART.findall(s))
    if total <= 0:
        raise PlanError(field_name, f"{text!r} must be longer than 0 s")
    return total


@dataclass
class Budget:
    """A deadline on a monotonic clock (shared by every trial of one `plan tune` run)."""

    total_s: float
    started_at: float = field(default_factory=time.monotonic)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started_at

    @property
    def left_s(self) -> float:
        return max(0.0, self.total_s - self.elapsed_s)

    def allows(self, trial_s: float) -> bool:
        """Start a trial only when it can finish inside what is left."""
        return trial_s <= self.left_s


def trial_duration_s(startup_s: float, steps: int, warmup_steps: int, step_time_s: float) -> float:
    """Expected wall time of one trial: start-up (launch, init, compile) + every step it runs."""
    return startup_s + (steps + warmup_steps) * step_time_s


def trial_timeout_s(expected_s: float, *, factor: float = 3.0, floor_s: float = 60.0) -> float:
    """Kill a trial that runs far past its expectation (a hang, DeepSpeed issue 4100)."""
    return max(floor_s, factor * expected_s)
