"""Errors of the hardware catalog (hardware/ knows nothing of the planner's PlanError)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path


class CatalogError(ValueError):
    """A malformed catalog file or an unknown catalog id, said in one line.

    The line names the file (when there is one) and the field: `path: field: message`.
    """

    def __init__(self, path: str | Path | None, field: str, message: str):
        self.path = str(path) if path is not None else None
        self.field = field
        self.message = " ".join(str(message).split())  # one line, always
        where = f"{self.path}: " if self.path else ""
        super().__init__(f"{where}{field}: {self.message}")


def unknown_id(kind: str, value: str, known: Iterable[str]) -> CatalogError:
    """An error for an unknown catalog id, suggesting the closest known ones (difflib)."""
    known = sorted(known)
    close = difflib.get_close_matches(value, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    shown = ", ".join(known) if len(known) <= 20 else ", ".join(known[:20]) + ", ..."
    return CatalogError(None, kind, f"unknown id {value!r}{hint} (known: {shown})")
