"""User-facing errors of the planner (the first of the two error tiers).

A `PlanError` is bad input or an infeasible request: the CLI prints its one line and exits 2.
Bugs are asserts, never `PlanError`.
"""

from __future__ import annotations

from collections.abc import Iterable

from hardware.errors import closest


class PlanError(ValueError):
    """Invalid input or infeasible plan, said in one line that names the field."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class NothingFits(PlanError):
    """Valid input, but no plan fits (memory, host RAM): the CLI prints its one line and exits 3, as
    `plan estimate` does after its closest misses; elsewhere (the service) it is a PlanError like any."""


def unknown(field: str, value: object, allowed: Iterable[str]) -> PlanError:
    """An error for an unknown name, suggesting the closest allowed ones."""
    allowed = list(allowed) if isinstance(allowed, (list, tuple)) else sorted(allowed)  # a list keeps its order
    close = closest(value, allowed)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    shown = ", ".join(allowed) if len(allowed) <= 12 else ", ".join(allowed[:12]) + ", ..."
    return PlanError(field, f"unknown value {value!r}{hint} (allowed: {shown})")
