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


def closest(value: object, allowed: Iterable[str], cutoff: float = 0.5, n: int = 3) -> list[str]:
    """The allowed names a mistyped one most likely meant: those that start with it first ('h100' ->
    h100-80gb, not h800; case aside), then difflib's nearest."""
    allowed = sorted(allowed)
    text = str(value).strip().lower()
    prefixed = [a for a in allowed if text and a.lower().startswith(text)]
    near = difflib.get_close_matches(str(value).strip(), allowed, n=n, cutoff=cutoff)
    return list(dict.fromkeys([*prefixed, *near]))[:n]


def unknown_id(kind: str, value: str, known: Iterable[str]) -> CatalogError:
    """An error for an unknown catalog id, suggesting the closest known ones."""
    known = sorted(known)
    close = closest(value, known)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    shown = ", ".join(known) if len(known) <= 20 else ", ".join(known[:20]) + ", ..."
    return CatalogError(None, kind, f"unknown id {value!r}{hint} (known: {shown})")
