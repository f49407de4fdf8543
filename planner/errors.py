"""User-facing errors of the planner (the first of the two error tiers).

A `PlanError` is bad input or an infeasible request: the CLI prints its one line and exits 2.
Bugs are asserts, never `PlanError`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class PlanError(ValueError):
    """Invalid input or infeasible plan, said in one line that names the field."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


def unknown(field: str, value: object, allowed: Iterable[str]) -> PlanError:
    """An error for an unknown name, suggesting the closest allowed ones."""
    allowed = sorted(allowed)
    close = difflib.get_close_matches(str(value), allowed, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    shown = ", ".join(allowed) if len(allowed) <= 12 else ", ".join(allowed[:12]) + ", ..."
    return PlanError(field, f"unknown value {value!r}{hint} (allowed: {shown})")
