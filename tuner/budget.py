"""Wall-clock budget: the deadline and how long a trial will take."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


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
